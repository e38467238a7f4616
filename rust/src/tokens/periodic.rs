//! tiktoken's merge of a periodic piece (one character repeated, a short pattern repeated),
//! done on one period instead of every byte.
//!
//! The merge of a piece `s^k t` (`s` of at most `MAX_PERIOD` bytes, `t` a proper prefix of `s`)
//! is followed step by step, in tiktoken's order (lowest rank first, then leftmost), on a state
//! that stands for the whole token sequence: `prefix`, then `unit` repeated `copies` times, then
//! `suffix`. Each step either changes how that state is written (the sequence it stands for is
//! the same) or performs exactly the merges tiktoken performs next:
//!
//! * a lowest pair in the prefix or the suffix is merged there, as tiktoken would;
//! * a lowest pair across the prefix's edge (or the suffix's) moves one copy of the unit into
//!   the prefix (or the suffix), where the next step merges it;
//! * a one-token unit `X` becomes `XX` (half the copies, an odd `X` into the suffix);
//! * a lowest pair of rank `r` inside the unit: tiktoken now merges the pairs of rank `r` left
//!   to right. Provided none of the pairs those merges make ranks below `r` (checked: none can
//!   rank `r`, as that would be the same bytes as the token made), that is a left-to-right scan,
//!   and if the scan of one copy does not reach into the next, every copy is scanned the same
//!   way: the unit becomes its scanned self. A scan that reaches into the next copy makes the
//!   unit start one token later (the first token into the prefix, the rest of the last copy
//!   into the suffix) and is scanned again.
//!
//! Anything else (a merge making a pair below the rank being merged, prefix or suffix growing
//! past `MAX_EDGE`, more pair lookups than `LOOKUPS_PER_BYTE` allows) answers `None`, and the
//! caller runs the general merge, so the count is tiktoken's in every case; the shortcut only
//! decides how fast it comes.

use super::{ExactCounter, Rank};

/// Longest period looked for, in bytes: one character is at most four, and a few characters
/// repeated (`"ab" * n`, `"=-" * n`) are as common a worst case.
const MAX_PERIOD: usize = 8;
/// Tokens the prefix and the suffix may hold together before the shortcut gives up: each step
/// reads all their pairs.
const MAX_EDGE: usize = 48;
/// Pair lookups the shortcut may make, per byte of the piece and in all: a real encoding needs
/// a few steps per merge level, and a pattern it gives up on costs at most about what the
/// heap merge (three lookups a byte) adds to it.
const LOOKUPS_PER_BYTE: usize = 2;
const LOOKUPS_AT_LEAST: usize = 256;
/// Below this many copies the state is written out and merged directly.
const FEW_COPIES: usize = 4;

type Token = Vec<u8>;

#[cfg(test)]
thread_local! {
    /// How often this thread's shortcut moved the unit's start, and gave up because a merge
    /// made a pair below the rank being merged: the tests check both paths are taken.
    static ROTATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static BELOW: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The count of tiktoken's merge of `piece`, if it is periodic and the shortcut applies.
pub(super) fn count(counter: &ExactCounter, piece: &[u8]) -> Option<usize> {
    let n = piece.len();
    let period =
        (1..=MAX_PERIOD).find(|&d| n >= 2 * FEW_COPIES * d && piece[d..] == piece[..n - d])?;
    let bytes = |part: &[u8]| part.iter().map(|&b| vec![b]).collect::<Vec<Token>>();
    State {
        counter,
        budget: LOOKUPS_PER_BYTE * n + LOOKUPS_AT_LEAST,
        prefix: Vec::new(),
        unit: bytes(&piece[..period]),
        copies: n / period,
        suffix: bytes(&piece[n - n % period..]),
    }
    .run()
}

/// Where the lowest pair of the sequence is, leftmost among equals.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lowest {
    Prefix(usize),
    PrefixEdge,
    /// A pair inside the copies: the first copy's, or the one across into the second.
    Unit,
    SuffixEdge,
    Suffix(usize),
}

/// What scanning the copies for the lowest rank found.
enum Scan {
    /// Each copy merged into this unit: the scan of a copy stops inside it.
    Merged(Vec<Token>),
    /// The scan reaches into the next copy.
    IntoNextCopy,
    /// A merge would make a pair below the rank scanned for, which tiktoken merges first:
    /// the scan is not its order then.
    Below,
}

/// `prefix`, then `unit` `copies` times, then `suffix`: the token sequence being merged.
struct State<'a> {
    counter: &'a ExactCounter,
    /// Pair lookups left before giving up.
    budget: usize,
    prefix: Vec<Token>,
    unit: Vec<Token>,
    copies: usize,
    suffix: Vec<Token>,
}

impl State<'_> {
    fn rank(&self, left: &[u8], right: &[u8]) -> Rank {
        self.counter.rank(&[left, right].concat())
    }

    fn run(mut self) -> Option<usize> {
        // A scan that reached into the next copy moved the unit's start once; a second time
        // in a row would loop.
        let mut rotated = false;
        loop {
            let just_rotated = std::mem::take(&mut rotated);
            // What `lowest` and `scan` look up, at most.
            let lookups = self.prefix.len() + self.suffix.len() + 2 * self.unit.len() + 4;
            self.budget = self.budget.checked_sub(lookups)?;
            if self.prefix.len() + self.suffix.len() > MAX_EDGE {
                return None;
            }
            if self.copies < FEW_COPIES {
                let mut tokens = std::mem::take(&mut self.prefix);
                for _ in 0..self.copies {
                    tokens.extend(self.unit.iter().cloned());
                }
                tokens.append(&mut self.suffix);
                return Some(merge_tokens(self.counter, tokens));
            }
            let Some((rank, lowest)) = self.lowest() else {
                return Some(self.prefix.len() + self.copies * self.unit.len() + self.suffix.len());
            };
            match lowest {
                Lowest::Prefix(i) => merge_at(&mut self.prefix, i),
                Lowest::Suffix(i) => merge_at(&mut self.suffix, i),
                Lowest::PrefixEdge => {
                    self.prefix.extend(self.unit.iter().cloned());
                    self.copies -= 1;
                }
                Lowest::SuffixEdge => {
                    let mut suffix = self.unit.clone();
                    suffix.append(&mut self.suffix);
                    self.suffix = suffix;
                    self.copies -= 1;
                }
                Lowest::Unit if self.unit.len() == 1 => {
                    if self.copies % 2 == 1 {
                        self.suffix.insert(0, self.unit[0].clone());
                    }
                    self.unit.push(self.unit[0].clone());
                    self.copies /= 2;
                }
                Lowest::Unit => match self.scan(rank) {
                    Scan::Merged(unit) => self.unit = unit,
                    Scan::Below => return None,
                    Scan::IntoNextCopy if just_rotated => return None,
                    Scan::IntoNextCopy => {
                        // unit^c = u0 (u1.. u0)^(c-1) u1..
                        let first = self.unit.remove(0);
                        let mut suffix = self.unit.clone();
                        suffix.append(&mut self.suffix);
                        self.suffix = suffix;
                        self.prefix.push(first.clone());
                        self.unit.push(first);
                        self.copies -= 1;
                        rotated = true;
                        #[cfg(test)]
                        ROTATIONS.set(ROTATIONS.get() + 1);
                    }
                },
            }
        }
    }

    /// The lowest-ranked pair of the sequence and where it is (leftmost among equal ranks),
    /// `None` if no two adjacent tokens merge. `copies >= FEW_COPIES`, so the first copy's
    /// pairs, and the one across into the second, stand for every pair inside the copies.
    fn lowest(&self) -> Option<(Rank, Lowest)> {
        let mut best: Option<(Rank, Lowest)> = None;
        let mut offer = |rank: Rank, at: Lowest| {
            if rank != Rank::MAX && best.is_none_or(|(b, _)| rank < b) {
                best = Some((rank, at));
            }
        };
        for (i, pair) in self.prefix.windows(2).enumerate() {
            offer(self.rank(&pair[0], &pair[1]), Lowest::Prefix(i));
        }
        let (first, last) = (&self.unit[0], &self.unit[self.unit.len() - 1]);
        if let Some(end) = self.prefix.last() {
            offer(self.rank(end, first), Lowest::PrefixEdge);
        }
        for pair in self.unit.windows(2) {
            offer(self.rank(&pair[0], &pair[1]), Lowest::Unit);
        }
        offer(self.rank(last, first), Lowest::Unit);
        if let Some(start) = self.suffix.first() {
            offer(self.rank(last, start), Lowest::SuffixEdge);
        }
        for (i, pair) in self.suffix.windows(2).enumerate() {
            offer(self.rank(&pair[0], &pair[1]), Lowest::Suffix(i));
        }
        best
    }

    /// Every copy of the unit scanned left to right for pairs of rank `rank`, the lowest in
    /// the sequence.
    fn scan(&self, rank: Rank) -> Scan {
        let unit = &self.unit;
        let p = unit.len();
        let mut out: Vec<Token> = Vec::with_capacity(p);
        // (index in `out` of each token made, the token after its pair before merging it).
        let mut made: Vec<(usize, Option<&Token>)> = Vec::new();
        let mut i = 0;
        while i < p {
            if i + 1 < p && self.rank(&unit[i], &unit[i + 1]) == rank {
                made.push((out.len(), unit.get(i + 2)));
                out.push([&unit[i][..], &unit[i + 1][..]].concat());
                i += 2;
            } else if i + 1 == p && self.rank(&unit[i], &unit[0]) == rank {
                return Scan::IntoNextCopy;
            } else {
                out.push(unit[i].clone());
                i += 1;
            }
        }
        // A pair a merge makes: the token before it (merged already) with it, and it with the
        // token after its pair (not merged yet). Where the copy meets what is around it, each
        // copy's neighbour is checked: the prefix's last token or the previous copy's, the
        // next copy's first or the suffix's.
        let below = |left: &[u8], right: &[u8]| self.rank(left, right) < rank;
        let before_first: Vec<&Token> = self.prefix.last().into_iter().chain(out.last()).collect();
        let after_last: Vec<&Token> = std::iter::once(&unit[0])
            .chain(self.suffix.first())
            .collect();
        for &(k, after) in &made {
            let token = &out[k];
            let lefts = if k > 0 {
                vec![&out[k - 1]]
            } else {
                before_first.clone()
            };
            let rights = after.map_or_else(|| after_last.clone(), |t| vec![t]);
            if lefts.iter().any(|l| below(l, token)) || rights.iter().any(|r| below(token, r)) {
                #[cfg(test)]
                BELOW.set(BELOW.get() + 1);
                return Scan::Below;
            }
        }
        Scan::Merged(out)
    }
}

/// Merges `tokens[i]` with `tokens[i + 1]`.
fn merge_at(tokens: &mut Vec<Token>, i: usize) {
    let right = tokens.remove(i + 1);
    tokens[i].extend(right);
}

/// tiktoken's merge of a short token sequence: rescan for the lowest pair, leftmost first.
fn merge_tokens(counter: &ExactCounter, mut tokens: Vec<Token>) -> usize {
    loop {
        let mut best: Option<(Rank, usize)> = None;
        for (i, pair) in tokens.windows(2).enumerate() {
            let rank = counter.rank(&pair.concat());
            if rank != Rank::MAX && best.is_none_or(|(b, _)| rank < b) {
                best = Some((rank, i));
            }
        }
        let Some((_, i)) = best else {
            return tokens.len();
        };
        merge_at(&mut tokens, i);
    }
}

#[cfg(test)]
mod tests {
    use rustc_hash::FxHashMap;

    use super::super::{shuffled_abcd_counter, xorshift, Encoding, ExactCounter};
    use super::*;

    /// tiktoken-rs over the same ranks, with a pattern that never splits: the reference merge.
    fn oracle(counter: &ExactCounter) -> tiktoken_rs::CoreBPE {
        let ranks = counter.ranks.clone().into_iter().collect();
        tiktoken_rs::CoreBPE::new(ranks, FxHashMap::default(), "(?s:.+)").unwrap()
    }

    /// `unit` repeated `copies` times, then the first `tail` characters of `unit`.
    fn periodic(unit: &str, copies: usize, tail: usize) -> String {
        let mut piece = unit.repeat(copies);
        piece.extend(unit.chars().take(tail));
        piece
    }

    /// The shortcut's answer, held to tiktoken's; `true` if it answered.
    fn check(counter: &ExactCounter, reference: &tiktoken_rs::CoreBPE, piece: &str) -> bool {
        let expected = reference.encode_ordinary(piece).len();
        let answer = count(counter, piece.as_bytes());
        if let Some(tokens) = answer {
            assert_eq!(tokens, expected, "{piece:?}");
        }
        assert_eq!(counter.merge_large(piece.as_bytes()), expected, "{piece:?}");
        answer.is_some()
    }

    /// One character repeated, of every kind: ASCII letters, digits, punctuation and spaces,
    /// two-, three- and four-byte characters (CJK, emoji, a combining mark, the last code
    /// point, characters whose continuation bytes repeat, as in U+2000 `e2 80 80`), every
    /// length around the piece threshold and the copies written out; the shortcut answers
    /// for all of them and its answer is tiktoken's.
    #[test]
    fn repeated_characters_agree_with_tiktoken() {
        let characters = [
            "a",
            "Z",
            "!",
            "9",
            " ",
            "\n",
            "\u{7f}",
            "\0",
            "é",
            "ß",
            "Ω",
            "\u{301}",
            "\u{80}",
            "中",
            "字",
            "ア",
            "한",
            "\u{2000}",
            "\u{fffd}",
            "\u{feff}",
            "😀",
            "𝒜",
            "\u{10ffff}",
            "\u{1f3fd}",
        ];
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let counter = encoding.counter();
            let reference = oracle(counter);
            for c in characters {
                for copies in [2 * FEW_COPIES, 33, 127, 128, 129, 1000, 4097] {
                    let piece = c.repeat(copies);
                    assert!(check(counter, &reference, &piece), "{c:?} x {copies}");
                }
            }
        }
    }

    /// Short patterns repeated (several characters, a character and a mark, flags, skin
    /// tones) with any tail, including patterns the shortcut gives up on: whatever it
    /// answers is tiktoken's.
    #[test]
    fn repeated_patterns_agree_with_tiktoken() {
        const ALPHABET: [&str; 14] = [
            "a",
            "b",
            "e",
            "t",
            "Q",
            "!",
            "=",
            "7",
            "é",
            "\u{301}",
            "字",
            "😀",
            "\u{1f3fd}",
            " ",
        ];
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let counter = encoding.counter();
            let reference = oracle(counter);
            let mut next = xorshift(0x2545_f491_4f6c_dd1d);
            let mut answered = 0;
            for round in 0..2000 {
                let unit: String = (0..=next() % 4)
                    .map(|_| ALPHABET[(next() % 14) as usize])
                    .collect();
                let copies = (next() % if round % 10 == 0 { 1000 } else { 200 }) as usize;
                let tail = (next() % 4) as usize;
                let piece = periodic(&unit, copies, tail);
                answered += usize::from(check(counter, &reference, &piece));
            }
            assert!(answered > 1000, "the shortcut answered {answered} of 2000");
        }
    }

    /// A vocabulary whose ranks ignore how its tokens are built (every string of up to four
    /// of `abcd`, ranked at random): merges often make pairs below the rank being merged,
    /// scans reach into the next copy, so every step of the shortcut, and its giving up, is
    /// taken. Whatever it answers is tiktoken's.
    #[test]
    fn repeated_patterns_out_of_rank_order_agree_with_tiktoken() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let counter = shuffled_abcd_counter(&mut next);
        let reference = oracle(&counter);
        let (mut answered, mut declined) = (0, 0);
        for round in 0..4000 {
            let unit: String = (0..=next() % 6)
                .map(|_| char::from(b"abcd"[(next() % 4) as usize]))
                .collect();
            let copies = (next() % if round % 10 == 0 { 1000 } else { 100 }) as usize;
            let piece = periodic(&unit, copies, (next() % 6) as usize);
            if check(&counter, &reference, &piece) {
                answered += 1;
            } else {
                declined += 1;
            }
        }
        assert!(
            answered > 500 && declined > 50,
            "{answered} answered, {declined} declined"
        );
    }

    /// Pieces that are not periodic are left to the general merge.
    #[test]
    fn aperiodic_pieces_are_declined() {
        let counter = Encoding::O200kBase.counter();
        for piece in [
            "abcdefghi".repeat(20),
            format!("{}b", "a".repeat(300)),
            "ab".repeat(7),
        ] {
            assert_eq!(count(counter, piece.as_bytes()), None, "{piece:?}");
        }
    }
}
