//! The int8 pass of a mirror's search (see the parent module): which rows may be among the
//! best, found from the int8 copies with an error bound, split over the cores for a large
//! mirror.
//!
//! Invariants:
//! * A row is left out only when its upper bound is below the floor, the `limit`-th best lower
//!   bound of a set of rows: it then scores below at least `limit` rows and cannot be in the
//!   answer, so the exact rescoring of the rows kept gives the full scan's answer.
//! * Split into parts, each part's floor is the `limit`-th best lower bound of its own rows,
//!   at most that of all rows, so the highest of them is a floor for every row; the parts'
//!   rows are joined in row order, so the answer does not depend on the split.
//! * The integer estimate is exact (`code_dot`); only the error bound is approximate, and it
//!   is an upper bound (`crate::vectors::Quantized::bound`).

use std::ops::Range;

use super::Mirror;
use crate::vectors::{in_parts, Candidates, Quantized};

/// The exact dot product of a row's int8 codes with the query's, which the search widened to
/// i16 once.
///
/// Both hold codes within ±127 (`Quantized` clamps there), so the two products of a pair fit
/// one i16 (2 * 127^2 < 2^15): the kernel multiplies in 16-bit lanes, adds pairs in 16 bits and
/// widens once per pair, about two thirds of the work of widening every product to 32 bits
/// first (`crate::vectors::int_dot`). Blocks of 2^20: in a block each of the 16 i32 lanes adds
/// at most 2^15 pairs of at most 2^15, so the lanes are exact; blocks are added in i64.
fn code_dot(codes: &[i8], query: &[i16]) -> i64 {
    debug_assert_eq!(codes.len(), query.len());
    codes
        .chunks(1 << 20)
        .zip(query.chunks(1 << 20))
        .map(|(codes, query)| block_dot(codes, query))
        .sum()
}

/// One block of `code_dot`: chunks of 32 as 16 pairs (i, i + 16), the shape the compiler
/// turns into 16-bit multiplies without shuffles.
#[inline]
fn block_dot(codes: &[i8], query: &[i16]) -> i64 {
    let mut lanes = [0i32; 16];
    let mut chunks_c = codes.chunks_exact(32);
    let mut chunks_q = query.chunks_exact(32);
    for (c, q) in (&mut chunks_c).zip(&mut chunks_q) {
        for i in 0..16 {
            let pair = i16::from(c[i]) * q[i] + i16::from(c[16 + i]) * q[16 + i];
            lanes[i] += i32::from(pair);
        }
    }
    let tail: i64 = chunks_c
        .remainder()
        .iter()
        .zip(chunks_q.remainder())
        .map(|(&c, &q)| i64::from(c) * i64::from(q))
        .sum();
    lanes.iter().map(|&lane| i64::from(lane)).sum::<i64>() + tail
}

/// The int8 pass of one search over a mirror's rows.
pub(super) struct Prescan<'a> {
    pub(super) mirror: &'a Mirror,
    pub(super) wanted: &'a [u32],
    pub(super) query: &'a Quantized,
    /// The query's codes as i16 (see `code_dot`).
    pub(super) wide: &'a [i16],
    pub(super) query_norm: f64,
    pub(super) limit: usize,
    pub(super) min_importance: f64,
    pub(super) now: f64,
}

impl Prescan<'_> {
    /// The rows of `part` that may be in the answer, in row order, with the upper bounds of
    /// their scores, and the floor: the `limit`-th best lower bound among them. A row whose
    /// upper bound is below the floor scores below at least `limit` rows, so it cannot be in
    /// the answer.
    fn run(&self, part: Range<usize>) -> (Vec<(usize, f64)>, f64) {
        let mirror = self.mirror;
        let dims = mirror.dims;
        let q = self.query;
        let mut found = Candidates::new(self.limit);
        let codes = &mirror.codes[part.start * dims..part.end * dims];
        for (at, codes) in part.zip(codes.chunks_exact(dims)) {
            let row = &mirror.rows[at];
            if row.importance < self.min_importance
                || row.expires_at.is_some_and(|e| e <= self.now)
                || !self.wanted.contains(&row.namespace)
            {
                continue;
            }
            #[allow(clippy::cast_precision_loss)] // |sum| <= dims * 127^2 < 2^53: exact
            let estimate = code_dot(codes, self.wide) as f64 * mirror.scales[at] * q.scale;
            let (error, norm) = mirror.errors[at];
            found.offer(at, estimate, q.bound(error, norm, self.query_norm, dims));
        }
        found.finish()
    }

    /// `run` over every row, split into `parts` ranges scanned on as many threads
    /// (`crate::vectors::in_parts`).
    pub(super) fn run_in_parts(&self, parts: usize) -> (Vec<(usize, f64)>, f64) {
        in_parts(self.mirror.rows.len(), parts, |part| self.run(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_16_bit_kernel_is_the_exact_integer_dot_product() {
        // A xorshift stream: varied codes, the extremes most often (the largest pair sums).
        let mut state = 26u64;
        let mut code = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            match state % 5 {
                0 => 127i8,
                1 => -127,
                // 0..=252 shifted to -126..=126.
                _ => i8::try_from(i64::try_from(state % 253).unwrap_or(0) - 126).unwrap_or(0),
            }
        };
        for dims in [1usize, 15, 31, 32, 33, 64, 255, 256, 1000] {
            for _ in 0..20 {
                let a: Vec<i8> = (0..dims).map(|_| code()).collect();
                let b: Vec<i8> = (0..dims).map(|_| code()).collect();
                let wide: Vec<i16> = b.iter().map(|&c| i16::from(c)).collect();
                assert_eq!(
                    code_dot(&a, &wide),
                    crate::vectors::int_dot(&a, &b),
                    "{dims}"
                );
            }
        }
    }
}
