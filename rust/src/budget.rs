//! The conversation budget ledger: one token count per retained turn, and the longest run of
//! most recent turns that fits the budget left after the summary.
//!
//! Twin of `memlane/_pure/budget.py`; every operation is O(1) amortised (a running total and a
//! moving window start, never a re-sum).

use std::collections::VecDeque;

/// Why a ledger operation was refused (the twin raises `ValueError` for the same cases).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// `max_tokens` was 0.
    NonPositiveMax,
    /// `pop_front(n)` with `n` greater than the number of retained turns.
    EvictTooMany { retained: usize },
}

/// Token counts of a conversation's retained turns and the window that fits the budget.
///
/// Positions are absolute turn indices: the first retained turn is `offset`, the newest is
/// `offset + len - 1`; eviction from the front advances `offset`.
#[derive(Clone, Debug)]
pub struct BudgetLedger {
    counts: VecDeque<u64>,
    max_tokens: u64,
    /// Absolute index of `counts[0]`.
    offset: u64,
    /// Absolute index of the window's first turn.
    start: u64,
    // Sums are u128 so that no sequence of u64 counts can overflow them, as Python ints cannot.
    total: u128,
    window: u128,
    /// Tokens taken by the summary, 0 when it is left out; never above `max_tokens`.
    reserved: u64,
}

impl BudgetLedger {
    /// An empty ledger with a budget of `max_tokens` (which must be > 0).
    pub fn new(max_tokens: u64) -> Result<Self, BudgetError> {
        if max_tokens == 0 {
            return Err(BudgetError::NonPositiveMax);
        }
        Ok(Self {
            counts: VecDeque::new(),
            max_tokens,
            offset: 0,
            start: 0,
            total: 0,
            window: 0,
            reserved: 0,
        })
    }

    /// The budget.
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// Sum of every retained turn's count.
    pub fn total(&self) -> u128 {
        self.total
    }

    /// Sum of the counts in the window (the summary excluded).
    pub fn window_tokens(&self) -> u128 {
        self.window
    }

    /// Tokens reserved for the summary (0 when it does not fit and is left out).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Absolute index of the oldest retained turn.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Absolute index of the oldest turn in the window (`end` when it is empty).
    pub fn window_start(&self) -> u64 {
        self.start
    }

    /// Absolute index one past the newest turn.
    pub fn end(&self) -> u64 {
        self.offset + self.counts.len() as u64
    }

    /// Number of retained turns.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no turn is retained.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    fn available(&self) -> u128 {
        u128::from(self.max_tokens - self.reserved)
    }

    fn count_at(&self, absolute: u64) -> u64 {
        self.counts[(absolute - self.offset) as usize]
    }

    fn shrink(&mut self) {
        let limit = self.available();
        while self.window > limit {
            self.window -= u128::from(self.count_at(self.start));
            self.start += 1;
        }
    }

    fn grow(&mut self) {
        let limit = self.available();
        while self.start > self.offset
            && self.window + u128::from(self.count_at(self.start - 1)) <= limit
        {
            self.start -= 1;
            self.window += u128::from(self.count_at(self.start));
        }
    }

    /// Appends the newest turn's count and slides the window.
    pub fn push(&mut self, tokens: u64) {
        self.counts.push_back(tokens);
        self.total += u128::from(tokens);
        self.window += u128::from(tokens);
        self.shrink();
    }

    /// Evicts the `n` oldest turns; returns the tokens they held.
    pub fn pop_front(&mut self, n: usize) -> Result<u128, BudgetError> {
        if n > self.counts.len() {
            return Err(BudgetError::EvictTooMany {
                retained: self.counts.len(),
            });
        }
        let mut freed = 0u128;
        for _ in 0..n {
            let tokens = self.counts.pop_front().map_or(0, u128::from);
            freed += tokens;
            if self.offset >= self.start {
                // The evicted turn was inside the window.
                self.window -= tokens;
                self.start = self.offset + 1;
            }
            self.offset += 1;
        }
        self.total -= freed;
        Ok(freed)
    }

    /// Reserves room for a summary of `tokens`; returns whether it is included.
    ///
    /// A summary larger than the whole budget is left out (reserving nothing) rather than
    /// pushing the history over the budget. The window shrinks or grows to fit what is left.
    pub fn set_summary_tokens(&mut self, tokens: u64) -> bool {
        let included = tokens <= self.max_tokens;
        self.reserved = if included { tokens } else { 0 };
        self.shrink();
        self.grow();
        included
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest suffix of `counts` whose sum fits `limit`, as (start index, sum).
    fn oracle(counts: &[u64], limit: u128) -> (usize, u128) {
        let mut start = counts.len();
        let mut sum = 0u128;
        while start > 0 && sum + u128::from(counts[start - 1]) <= limit {
            start -= 1;
            sum += u128::from(counts[start]);
        }
        (start, sum)
    }

    fn check(ledger: &BudgetLedger, retained: &[u64]) {
        let limit = u128::from(ledger.max_tokens() - ledger.reserved());
        let (start, sum) = oracle(retained, limit);
        assert_eq!(ledger.window_start(), ledger.offset() + start as u64);
        assert_eq!(ledger.window_tokens(), sum);
        assert_eq!(
            ledger.total(),
            retained.iter().map(|&c| u128::from(c)).sum::<u128>()
        );
        assert_eq!(ledger.end(), ledger.offset() + retained.len() as u64);
        assert!(
            ledger.window_tokens() + u128::from(ledger.reserved())
                <= u128::from(ledger.max_tokens())
        );
    }

    #[test]
    fn zero_budget_is_refused() {
        assert_eq!(
            BudgetLedger::new(0).unwrap_err(),
            BudgetError::NonPositiveMax
        );
    }

    #[test]
    fn window_is_longest_fitting_suffix() {
        let mut ledger = BudgetLedger::new(10).unwrap();
        let mut retained = Vec::new();
        for c in [3, 4, 2, 5, 11, 1, 0, 9, 1] {
            ledger.push(c);
            retained.push(c);
            check(&ledger, &retained);
        }
    }

    #[test]
    fn summary_reserves_and_oversized_summary_is_left_out() {
        let mut ledger = BudgetLedger::new(10).unwrap();
        let retained = [2, 3, 4];
        for &c in &retained {
            ledger.push(c);
        }
        assert!(ledger.set_summary_tokens(4));
        assert_eq!(ledger.reserved(), 4);
        check(&ledger, &retained);
        assert!(!ledger.set_summary_tokens(11));
        assert_eq!(ledger.reserved(), 0);
        check(&ledger, &retained);
        assert!(!ledger.set_summary_tokens(u64::MAX));
        assert!(ledger.set_summary_tokens(10));
        assert_eq!((ledger.window_tokens(), ledger.window_start()), (0, 3));
    }

    #[test]
    fn eviction_advances_offset_and_returns_freed_tokens() {
        let mut ledger = BudgetLedger::new(5).unwrap();
        for c in [4, 1, 2, 3] {
            ledger.push(c);
        }
        assert_eq!(ledger.window_start(), 2);
        assert_eq!(ledger.pop_front(3).unwrap(), 7);
        assert_eq!(
            (
                ledger.offset(),
                ledger.window_start(),
                ledger.window_tokens()
            ),
            (3, 3, 3)
        );
        check(&ledger, &[3]);
        assert_eq!(
            ledger.pop_front(2).unwrap_err(),
            BudgetError::EvictTooMany { retained: 1 }
        );
        assert_eq!(ledger.pop_front(1).unwrap(), 3);
        assert_eq!(
            (ledger.window_start(), ledger.end(), ledger.total()),
            (4, 4, 0)
        );
        assert!(ledger.is_empty());
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let mut ledger = BudgetLedger::new(u64::MAX).unwrap();
        ledger.push(u64::MAX);
        ledger.push(u64::MAX);
        assert_eq!(ledger.total(), 2 * u128::from(u64::MAX));
        check(&ledger, &[u64::MAX, u64::MAX]);
    }

    #[test]
    fn random_ops_match_oracle() {
        // A small deterministic LCG keeps the test free of extra dependencies.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) % m
        };
        for _ in 0..200 {
            let mut ledger = BudgetLedger::new(next(20) + 1).unwrap();
            let mut retained: Vec<u64> = Vec::new();
            for _ in 0..40 {
                match next(4) {
                    0 | 1 => {
                        let c = next(12);
                        ledger.push(c);
                        retained.push(c);
                    }
                    2 => {
                        let n = next(retained.len() as u64 + 2) as usize;
                        match ledger.pop_front(n) {
                            Ok(freed) => {
                                let gone: Vec<u64> = retained.drain(..n).collect();
                                assert_eq!(
                                    freed,
                                    gone.iter().map(|&c| u128::from(c)).sum::<u128>()
                                );
                            }
                            Err(_) => assert!(n > retained.len()),
                        }
                    }
                    _ => {
                        let s = next(25);
                        assert_eq!(ledger.set_summary_tokens(s), s <= ledger.max_tokens());
                    }
                }
                check(&ledger, &retained);
            }
        }
    }
}
