//! The ranks of the tokens of 3 to 12 bytes in one flat open-addressed table.
//!
//! Counting prose asks the rank of nearly every piece (" the", " answer"), and a conversation
//! turn counts its text between a store's commit and the next turn's Python, which leave
//! little of a 200,000-token map in the caches. A `HashMap<Vec<u8>, Rank>` lookup follows three
//! dependent loads there (the control bytes, the bucket, the key's heap bytes): each a cache
//! miss when cold. Here a token's bytes, length and rank are packed into one 16-byte slot,
//! found by linear probing, so a cold lookup costs about one miss. Exact by construction: a
//! slot answers only for the very bytes it packs.

use super::Rank;

/// Longest token the table holds: 8 bytes in the first word, 4 in the second.
pub const MAX_LEN: usize = 12;
const MIN_LEN: usize = 3;
/// The second word: bytes 8..12 (bits 0..32), the length (bits 32..36), the rank (40..64).
const KEY_HI_MASK: u64 = (1 << 40) - 1;
const RANK_SHIFT: u32 = 40;

pub struct ShortRanks {
    slots: Box<[[u64; 2]]>,
    mask: usize,
}

/// `bytes` (3 to 12 of them) packed as the table's key: the first 8 bytes, then the rest
/// with the length.
#[inline]
fn key(bytes: &[u8]) -> (u64, u64) {
    let mut buf = [0u8; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    let mut lo = [0u8; 8];
    lo.copy_from_slice(&buf[..8]);
    let mut hi = [0u8; 4];
    hi.copy_from_slice(&buf[8..12]);
    (
        u64::from_le_bytes(lo),
        u64::from(u32::from_le_bytes(hi)) | (bytes.len() as u64) << 32,
    )
}

#[inline]
fn slot_of(lo: u64, hi: u64, mask: usize) -> usize {
    let h = (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 32) as usize & mask
}

impl ShortRanks {
    /// The table of every `(token, rank)` whose token is 3 to 12 bytes long.
    ///
    /// # Panics
    /// A rank of 2^24 or more (both encodings stop under 201,000).
    pub fn new<'a>(tokens: impl Iterator<Item = (&'a [u8], Rank)> + Clone) -> Self {
        let count = tokens.clone().filter(|(t, _)| Self::holds(t.len())).count();
        // At most half full: a probe for a piece that is no token stops within a line or two.
        let size = (count * 2).next_power_of_two().max(16);
        let mut slots = vec![[0u64; 2]; size].into_boxed_slice();
        let mask = size - 1;
        for (token, rank) in tokens.filter(|(t, _)| Self::holds(t.len())) {
            assert!(rank < 1 << 24, "rank {rank} does not fit a short-rank slot");
            let (lo, hi) = key(token);
            let mut i = slot_of(lo, hi, mask);
            while slots[i][1] != 0 && !(slots[i][0] == lo && slots[i][1] & KEY_HI_MASK == hi) {
                i = (i + 1) & mask;
            }
            slots[i] = [lo, hi | u64::from(rank) << RANK_SHIFT];
        }
        Self { slots, mask }
    }

    /// Whether tokens of `len` bytes are in the table (and only in it answer for that length).
    #[inline]
    pub fn holds(len: usize) -> bool {
        (MIN_LEN..=MAX_LEN).contains(&len)
    }

    /// The rank of `bytes` (3 to 12 of them), `Rank::MAX` if it is no token.
    #[inline]
    pub fn get(&self, bytes: &[u8]) -> Rank {
        debug_assert!(Self::holds(bytes.len()));
        let (lo, hi) = key(bytes);
        let mut i = slot_of(lo, hi, self.mask);
        loop {
            let [slot_lo, slot_hi] = self.slots[i];
            if slot_hi & KEY_HI_MASK == hi && slot_lo == lo {
                return (slot_hi >> RANK_SHIFT) as Rank;
            }
            if slot_hi == 0 {
                return Rank::MAX; // a real slot's length is never 0
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_exactly_the_tokens_it_holds() {
        let tokens: Vec<(Vec<u8>, Rank)> = vec![
            (b"abc".to_vec(), 7),
            (b"abc\0".to_vec(), 8),
            (b"\0\0\0".to_vec(), 0),
            (b"twelve bytes".to_vec(), (1 << 24) - 1),
            (b"abcdefgh".to_vec(), 3),
            (b"abcdefghi".to_vec(), 4),
        ];
        let table = ShortRanks::new(tokens.iter().map(|(t, r)| (t.as_slice(), *r)));
        for (token, rank) in &tokens {
            assert_eq!(table.get(token), *rank);
        }
        for absent in [
            &b"abd"[..],
            b"ab\0",
            b"\0\0\0\0",
            b"abcdefg",
            b"twelve bytez",
        ] {
            assert_eq!(table.get(absent), Rank::MAX);
        }
        assert!(!ShortRanks::holds(2) && !ShortRanks::holds(13));
    }

    #[test]
    fn every_rank_file_token_of_its_lengths_is_found() {
        use super::super::Encoding;
        for encoding in [Encoding::Cl100kBase, Encoding::O200kBase] {
            let counter = encoding.counter();
            for (token, rank) in &counter.ranks {
                if ShortRanks::holds(token.len()) {
                    assert_eq!(counter.short.get(token), *rank, "{token:?}");
                }
            }
        }
    }
}
