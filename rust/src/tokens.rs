//! Token counting: exact BPE counts (tiktoken's merge over rank files compiled in) and the
//! whitespace-word heuristic of the design memlane grew out of.

use std::sync::OnceLock;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use base64::{engine::general_purpose, Engine as _};
use regex_automata::meta::{self, Regex};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind};
use rustc_hash::FxHashMap;

mod periodic;

/// The BPE encodings memlane can count with. Both rank files are embedded in the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    O200kBase,
    Cl100kBase,
}

impl Encoding {
    /// Every valid name, sorted, as listed in error messages.
    pub const NAMES: [&'static str; 2] = ["cl100k_base", "o200k_base"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "o200k_base" => Some(Self::O200kBase),
            "cl100k_base" => Some(Self::Cl100kBase),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
        }
    }

    /// The shared counter; built once per process on first use (this is the rank-file load).
    pub fn counter(self) -> &'static ExactCounter {
        static O200K: OnceLock<ExactCounter> = OnceLock::new();
        static CL100K: OnceLock<ExactCounter> = OnceLock::new();
        match self {
            Self::O200kBase => O200K.get_or_init(|| {
                ExactCounter::new(
                    include_str!("../../python/memlane/_ranks/o200k_base.tiktoken"),
                    O200K_SPLIT,
                    0,
                    Some(o200k_ascii_end),
                )
            }),
            Self::Cl100kBase => CL100K.get_or_init(|| {
                ExactCounter::new(
                    include_str!("../../python/memlane/_ranks/cl100k_base.tiktoken"),
                    CL100K_SPLIT,
                    1,
                    None,
                )
            }),
        }
    }
}

// The encodings' pre-tokenizer patterns with the one look-around, `\s+(?!\S)`, replaced by
// `\s+` (and possessive quantifiers by greedy ones, which match identically here). That makes
// them plain `regex` patterns, run by its DFA instead of fancy-regex's backtracker; the
// look-ahead is restored exactly by `split_end` below. The hypothesis tests hold the result to
// OpenAI's tiktoken, which runs the original patterns.
const O200K_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+",
);
const CL100K_SPLIT: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s+$|\s*[\r\n]|\s+",
);

/// Where the o200k_base piece that starts at `b[pos]` ends (before `split_end`), if the bytes
/// that decide it are ASCII: `O200K_SPLIT` written out. In ASCII its classes are plain:
/// letters are A-Z (`Lu`) and a-z (`Ll`), numbers 0-9, `\s` is `\t\n\x0b\x0c\r` and space.
/// The alternatives are tried in the pattern's order, each as the regex's backtracking would
/// match it, reading every byte the regex's answer depends on (each run up to the byte that
/// ends it, the character after an optional first one, a contraction's letters). Any of those
/// not ASCII (a letter, number or space of another script could change the answer): `None`,
/// and the regex decides. `ascii_pieces_agree_with_the_regex` holds the result to the regex.
fn o200k_ascii_end(b: &[u8], pos: usize) -> Option<usize> {
    if *b.get(pos)? >= 0x80 {
        return None;
    }
    let foreign = std::cell::Cell::new(false);
    let byte = |i: usize| -> Option<u8> {
        let value = *b.get(i)?;
        if value >= 0x80 {
            foreign.set(true);
        }
        Some(value)
    };
    let upper = |i: usize| byte(i).is_some_and(|v| v.is_ascii_uppercase());
    let lower = |i: usize| byte(i).is_some_and(|v| v.is_ascii_lowercase());
    let letter = |i: usize| byte(i).is_some_and(|v| v.is_ascii_alphabetic());
    let digit = |i: usize| byte(i).is_some_and(|v| v.is_ascii_digit());
    let space =
        |i: usize| byte(i).is_some_and(|v| matches!(v, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' '));
    let line_break = |i: usize| byte(i).is_some_and(|v| matches!(v, b'\r' | b'\n'));
    // [^\s\p{L}\p{N}]
    let other =
        |i: usize| byte(i).is_some_and(|v| v < 0x80 && !v.is_ascii_alphanumeric()) && !space(i);
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)?
    let contraction = |i: usize| {
        if byte(i) != Some(b'\'') {
            return i;
        }
        let at = |k: usize| byte(i + k).map_or(0, |v| v.to_ascii_lowercase());
        match (at(1), at(2)) {
            (b's' | b't' | b'm' | b'd', _) => i + 2,
            (b'r' | b'v', b'e') | (b'l', b'l') => i + 3,
            _ => i,
        }
    };
    let end = 'end: {
        // 1 and 2: [^\r\n\p{L}\p{N}]?[Lu]*[Ll]+ and [^\r\n\p{L}\p{N}]?[Lu]+[Ll]*, each with
        // the contraction. The optional first character is taken whenever letters follow it.
        let letters = if letter(pos) {
            Some(pos)
        } else if !line_break(pos) && !digit(pos) && letter(pos + 1) {
            Some(pos + 1)
        } else {
            None
        };
        if let Some(start) = letters {
            let mut i = start;
            while upper(i) {
                i += 1;
            }
            // Lower-case letters after the capitals: the first alternative; none: the second
            // (its lower-case run is then empty too).
            while lower(i) {
                i += 1;
            }
            break 'end contraction(i);
        }
        // 3: \p{N}{1,3}
        if digit(pos) {
            let mut i = pos + 1;
            while i < pos + 3 && digit(i) {
                i += 1;
            }
            break 'end i;
        }
        // 4: ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let run = if byte(pos) == Some(b' ') && other(pos + 1) {
            Some(pos + 1)
        } else if other(pos) {
            Some(pos)
        } else {
            None
        };
        if let Some(mut i) = run {
            while other(i) {
                i += 1;
            }
            while byte(i).is_some_and(|v| matches!(v, b'\r' | b'\n' | b'/')) {
                i += 1;
            }
            break 'end i;
        }
        // 5: \s*[\r\n]+ (up to the last line break of the run of spaces), else 6: \s+.
        let mut i = pos;
        let mut last_break = None;
        while space(i) {
            if line_break(i) {
                last_break = Some(i);
            }
            i += 1;
        }
        last_break.map_or(i, |k| k + 1)
    };
    (!foreign.get()).then_some(end)
}

/// The written-out pre-tokenizer of an encoding: see [`o200k_ascii_end`].
type AsciiEnd = fn(&[u8], usize) -> Option<usize>;

/// A token's rank: its id, and its merge priority (lower merges first).
pub type Rank = u32;

/// A part's position in `ExactCounter::merge_large_with`; `NONE` marks "no previous part".
trait PartIndex: Copy + Ord {
    const NONE: Self;
    fn from_usize(i: usize) -> Self;
    fn get(self) -> usize;
}

impl PartIndex for u32 {
    const NONE: Self = u32::MAX;
    #[inline]
    fn from_usize(i: usize) -> Self {
        i as u32
    }
    #[inline]
    fn get(self) -> usize {
        self as usize
    }
}

impl PartIndex for usize {
    const NONE: Self = usize::MAX;
    #[inline]
    fn from_usize(i: usize) -> Self {
        i
    }
    #[inline]
    fn get(self) -> usize {
        self
    }
}

/// Pieces from this many bytes on are merged with a heap in O(n log n); shorter ones by
/// tiktoken's rescan, which is faster on the short pieces real text is made of.
const LARGE_PIECE: usize = 128;
/// Piece counts each thread remembers per encoding before it forgets them all: prose and
/// code repeat their words, so most pieces that are not whole tokens have been merged before.
const CACHE_ENTRIES: usize = 1 << 13;
/// `merge_large` packs a heap entry as rank << START_BITS | start: pieces up to 16 TiB, and
/// ranks below 2^20 (both encodings stop under 201,000), which `ExactCounter::new` checks.
const START_BITS: u32 = 44;
const START_MASK: u64 = (1 << START_BITS) - 1;
/// How many sorted entries ahead `merge_large` touches the part an entry will read.
const LOOKAHEAD: usize = 16;

thread_local! {
    /// Per-thread (so counting never locks) and per-encoding: piece bytes → token count. Only
    /// short pieces that are not whole tokens go in, and it is cleared when full, so it is
    /// exact by construction (a hit returns what the merge returned for the same bytes).
    static PIECE_COUNTS: [std::cell::RefCell<FxHashMap<Box<[u8]>, usize>>; 2] = Default::default();
    /// Per-thread and per-encoding: the pre-tokenizer's search state. A `regex::Regex` takes
    /// it from a shared pool on every search, which cost ~60 ns a piece, about as much as the
    /// search itself; here it is taken once per thread.
    static SPLIT_CACHES: [std::cell::RefCell<Option<meta::Cache>>; 2] = Default::default();
    /// Per-thread and per-encoding: the rank of two tokens merged, by their two ranks, in a
    /// direct-mapped table (a slot keeps the last pair that hashed to it). A long piece that
    /// repeats itself asks for the same few pairs merge after merge; answering from here
    /// spares hashing their bytes into the rank table. Exact by construction: a slot answers
    /// only for the pair of ranks it holds, whose bytes, and so whose rank, are fixed.
    static PAIR_RANKS: [std::cell::RefCell<Vec<(u64, Rank)>>; 2] = Default::default();
}

/// Slots of `PAIR_RANKS`: 2^13 of 16 bytes, 128 KiB a thread and encoding.
const PAIR_BITS: u32 = 13;

/// Exact BPE counting: a DFA pre-tokenizer, direct rank lookups for pieces that are whole
/// tokens, a per-thread cache of the other pieces, and tiktoken's byte-pair merge (lowest
/// rank first, leftmost among equal ranks) for the rest.
pub struct ExactCounter {
    ranks: FxHashMap<Vec<u8>, Rank>,
    /// The rank of every two-byte token, indexed by its bytes read big-endian, `Rank::MAX`
    /// where none: the first round of every merge looks up each adjacent byte pair, and a
    /// 256 KiB table answers that without hashing.
    pair_ranks: Box<[Rank]>,
    /// The rank of every one-byte token, `Rank::MAX` where none.
    byte_ranks: [Rank; 256],
    split: Regex,
    /// Which of the per-thread caches is this encoding's.
    cache_slot: usize,
    /// The pre-tokenizer written out for text that is all ASCII, where the encoding has one:
    /// where a piece that starts at a position ends (before `split_end`).
    ascii_end: Option<AsciiEnd>,
}

impl ExactCounter {
    fn new(rank_file: &str, split: &str, cache_slot: usize, ascii_end: Option<AsciiEnd>) -> Self {
        let mut ranks = FxHashMap::default();
        let mut pair_ranks = vec![Rank::MAX; 1 << 16].into_boxed_slice();
        let mut byte_ranks = [Rank::MAX; 256];
        for line in rank_file.lines().filter(|l| !l.is_empty()) {
            let (token, rank) = line.split_once(' ').expect("rank file line: token rank");
            let token = general_purpose::STANDARD
                .decode(token)
                .expect("base64 token");
            let rank = rank.parse::<Rank>().expect("numeric rank");
            assert!(
                rank < 1 << (64 - START_BITS),
                "rank {rank} does not fit a heap entry"
            );
            match token[..] {
                [a] => byte_ranks[usize::from(a)] = rank,
                [a, b] => pair_ranks[usize::from(a) << 8 | usize::from(b)] = rank,
                _ => {}
            }
            ranks.insert(token, rank);
        }
        // The Unicode classes make the lazy DFA large: with the default cache it thrashes on
        // CJK text (rebuilt state after state, ~7x slower than tiktoken there).
        // What `regex::RegexBuilder` configures (leftmost-first, UTF-8), with larger limits.
        let split = meta::Builder::new()
            .configure(
                meta::Config::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .utf8_empty(true)
                    .nfa_size_limit(Some(64 << 20))
                    .hybrid_cache_capacity(64 << 20),
            )
            .syntax(syntax::Config::new().utf8(true))
            .build(split)
            .expect("split pattern compiles");
        Self {
            ranks,
            pair_ranks,
            byte_ranks,
            split,
            cache_slot,
            ascii_end,
        }
    }

    /// The rank of `bytes` as one token, `Rank::MAX` if it is none.
    #[inline]
    fn rank(&self, bytes: &[u8]) -> Rank {
        if let [a, b] = *bytes {
            self.pair_ranks[usize::from(a) << 8 | usize::from(b)]
        } else {
            self.ranks.get(bytes).copied().unwrap_or(Rank::MAX)
        }
    }

    /// Where the piece matched at `start..end` really ends. A run of spaces and tabs (no line
    /// break) followed by a non-space gives its last character to the next piece, as
    /// `\s+(?!\S)` does in the original pattern; a single character stays (`\s` / `\s+`).
    #[inline]
    fn split_end(text: &str, start: usize, end: usize) -> usize {
        if end == text.len() {
            return end;
        }
        let piece = &text[start..end];
        let mut chars = piece.char_indices();
        let Some((_, first)) = chars.next() else {
            return end;
        };
        if !first.is_whitespace() || first == '\r' || first == '\n' {
            return end;
        }
        let mut last_start = 0;
        for (i, c) in chars {
            if !c.is_whitespace() || c == '\r' || c == '\n' {
                return end;
            }
            last_start = i;
        }
        if last_start == 0 {
            end // a single whitespace character
        } else {
            start + last_start
        }
    }

    /// The pre-tokenizer's pieces of `text`, in order: where the bytes that decide a piece
    /// are ASCII, by the encoding's written-out splitter (a regex search cost ~50 ns a piece,
    /// a quarter of counting prose), else by the regex.
    fn pieces<'t>(
        &'t self,
        text: &'t str,
        cache: &'t mut meta::Cache,
    ) -> impl Iterator<Item = &'t str> + 't {
        self.pieces_with(text, cache, self.ascii_end)
    }

    /// [`Self::pieces`] with the written-out splitter `ascii_end` (`None`: the regex alone).
    ///
    /// Each search starts where the previous piece ended and the pieces tile the text, so
    /// splitting is one pass over it. Every character starts a match (letters, numbers,
    /// spaces, line breaks and "anything else" each have an alternative), so the search is
    /// anchored where the last piece ended: the leftmost-first match an unanchored search
    /// would find starts there too, and the anchored one skips looking further. Were none to
    /// start there, the unanchored search runs, so the pieces are those of `find_at` in any
    /// case.
    fn pieces_with<'t>(
        &'t self,
        text: &'t str,
        cache: &'t mut meta::Cache,
        ascii_end: Option<AsciiEnd>,
    ) -> impl Iterator<Item = &'t str> + 't {
        let mut pos = 0;
        std::iter::from_fn(move || {
            let (start, end) = if let Some(end) = ascii_end.and_then(|f| f(text.as_bytes(), pos)) {
                (pos, end)
            } else {
                let input = Input::new(text).span(pos..text.len());
                let m = self
                    .split
                    .search_with(cache, &input.clone().anchored(Anchored::Yes))
                    .or_else(|| self.split.search_with(cache, &input))?;
                (m.start(), m.end())
            };
            let end = Self::split_end(text, start, end);
            pos = end;
            Some(&text[start..end])
        })
    }

    /// Tokens in `text` (special-token strings count as plain text).
    pub fn count(&self, text: &str) -> usize {
        SPLIT_CACHES.with(|splits| {
            let mut split = splits[self.cache_slot].borrow_mut();
            let split = split.get_or_insert_with(|| self.split.create_cache());
            PIECE_COUNTS.with(|caches| {
                let mut cache = caches[self.cache_slot].borrow_mut();
                self.pieces(text, split)
                    .map(|piece| self.count_piece(piece.as_bytes(), &mut cache))
                    .sum()
            })
        })
    }

    fn count_piece(&self, piece: &[u8], cache: &mut FxHashMap<Box<[u8]>, usize>) -> usize {
        // tiktoken takes a piece that is a token as it is, whatever its merge would give.
        if self.rank(piece) != Rank::MAX {
            return 1;
        }
        if piece.len() >= LARGE_PIECE {
            // One character or a short pattern repeated (the worst case of the heap merge:
            // every pair alike) is merged on one period; anything else by the heap.
            return periodic::count(self, piece).unwrap_or_else(|| self.merge_large(piece));
        }
        if let Some(&count) = cache.get(piece) {
            return count;
        }
        let count = self.merge_small(piece);
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(piece.into(), count);
        count
    }

    /// Tokens in one piece of fewer than `LARGE_PIECE` bytes, by tiktoken's own merge: rescan
    /// the pairs for the lowest rank (leftmost first), merge it, re-rank its two neighbours.
    fn merge_small(&self, piece: &[u8]) -> usize {
        debug_assert!(piece.len() < LARGE_PIECE);
        if piece.len() < 2 {
            return piece.len();
        }
        // parts[i] = (start of part i, rank of parts i and i + 1 merged); two sentinels.
        let mut parts = [(0usize, Rank::MAX); LARGE_PIECE + 1];
        let mut len = piece.len() + 1;
        for (i, part) in parts[..len].iter_mut().enumerate() {
            *part = (i, Rank::MAX);
        }
        for i in 0..piece.len() - 1 {
            parts[i].1 = self.rank(&piece[i..i + 2]);
        }
        // The rank of parts i, i + 1 merged once i + 1 has absorbed i + 2.
        let rank_after = |parts: &[(usize, Rank)], len: usize, i: usize| {
            if i + 3 < len {
                self.rank(&piece[parts[i].0..parts[i + 3].0])
            } else {
                Rank::MAX
            }
        };
        loop {
            let (mut min_rank, mut min_i) = (Rank::MAX, 0);
            for (i, &(_, rank)) in parts[..len - 1].iter().enumerate() {
                if rank < min_rank {
                    (min_rank, min_i) = (rank, i);
                }
            }
            if min_rank == Rank::MAX {
                return len - 1;
            }
            let i = min_i;
            if i > 0 {
                parts[i - 1].1 = rank_after(&parts, len, i - 1);
            }
            parts[i].1 = rank_after(&parts, len, i);
            parts.copy_within(i + 2..len, i + 1);
            len -= 1;
        }
    }

    /// Tokens in a piece of any length, merged in the same order as `merge_small` (lowest
    /// rank, then leftmost), without rescanning: O(n log n) at worst, which keeps a megabyte
    /// without whitespace from turning quadratic.
    ///
    /// Pending pairs wait in buckets, one per rank, and the ranks in a heap: a rank's bucket
    /// is sorted once when its turn comes and read in order, so a piece whose pairs share few
    /// ranks (one character repeated, a few letters) costs a sort and sequential reads instead
    /// of a heap operation per pair. A merge usually makes pairs of higher rank (a token is
    /// made after its parts); those join their buckets. One that makes a pair of lower rank
    /// than the bucket being read is merged at once (`low`), as the global order requires;
    /// none can make one of the same rank (see the loop).
    ///
    /// Entries are never removed; an entry is current iff its part's `rank` still holds its
    /// rank. Ranks are unique per byte string, so an equal rank at the same start is the same
    /// pair, and a merged-away part has `Rank::MAX`, which is never queued.
    ///
    /// Every part is a token, so the rank of two adjacent parts merged depends on their two
    /// token ranks only: `PAIR_RANKS` remembers it by those.
    fn merge_large(&self, piece: &[u8]) -> usize {
        if u32::try_from(piece.len()).is_ok_and(|n| n < u32::MAX) {
            self.merge_large_with::<u32>(piece)
        } else {
            self.merge_large_with::<usize>(piece)
        }
    }

    /// `merge_large` with part links of type `I`: `u32` halves the memory the merge of any
    /// piece under 4 GiB waits on; `usize` takes the rest.
    fn merge_large_with<I: PartIndex>(&self, piece: &[u8]) -> usize {
        let n = piece.len();
        if n < 2 {
            return n;
        }
        PAIR_RANKS.with(|tables| {
            let mut pairs = tables[self.cache_slot].borrow_mut();
            if pairs.is_empty() {
                *pairs = vec![(u64::MAX, Rank::MAX); 1 << PAIR_BITS];
            }
            self.merge_large_in::<I>(piece, &mut pairs)
        })
    }

    /// `merge_large_with` given this thread's table of pair ranks.
    fn merge_large_in<I: PartIndex>(&self, piece: &[u8], pairs: &mut [(u64, Rank)]) -> usize {
        let mut merge = LargeMerge::<I>::new(self, piece, pairs);
        let mut buckets = Buckets::default();
        for (i, part) in merge.parts.iter().enumerate() {
            if part.rank != Rank::MAX {
                buckets.push(part.rank, I::from_usize(i));
            }
        }
        let mut low: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
        let key = |rank: Rank, start: usize| u64::from(rank) << START_BITS | start as u64;
        while let Some((rank, mut starts)) = buckets.pop() {
            starts.sort_unstable();
            for (cursor, &start) in starts.iter().enumerate() {
                // Half the entries are stale by their turn: reading the part a few entries
                // ahead starts its cache miss early (a safe prefetch).
                if let Some(&ahead) = starts.get(cursor + LOOKAHEAD) {
                    std::hint::black_box(merge.parts[ahead.get()].rank);
                }
                let start = start.get();
                if merge.parts[start].rank != rank {
                    continue;
                }
                let mut made = merge.at(start);
                loop {
                    for (made_rank, at) in made.into_iter().flatten() {
                        // Every pair a merge makes holds the token it made, and those below
                        // `rank` hold this merge's token: longer than the pair of `rank`, so
                        // never it. Only the global order decides between the two kinds.
                        debug_assert_ne!(made_rank, rank);
                        if made_rank < rank {
                            #[cfg(test)]
                            tests::BELOW_THE_RANK_READ
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            low.push(Reverse(key(made_rank, at)));
                        } else {
                            buckets.push(made_rank, I::from_usize(at));
                        }
                    }
                    // What a merge made below the current rank goes first, lowest first.
                    made = loop {
                        let Some(Reverse(entry)) = low.pop() else {
                            break [None, None];
                        };
                        let at = (entry & START_MASK) as usize;
                        if merge.parts[at].rank == (entry >> START_BITS) as Rank {
                            break merge.at(at);
                        }
                    };
                    if made == [None, None] && low.is_empty() {
                        break;
                    }
                }
            }
            buckets.give_back(starts);
        }
        merge.count
    }
}

/// The pending pairs of `merge_large`, by rank: the ranks that have any in a heap, their
/// starts in slots whose buffers are reused once read, and the two ranks queued last
/// remembered without hashing (a merge queues two pairs, and a long run of one pattern
/// queues the same two ranks merge after merge).
struct Buckets<I> {
    slots: Vec<Vec<I>>,
    free: Vec<usize>,
    spare: Vec<Vec<I>>,
    index: FxHashMap<Rank, usize>,
    ranks: BinaryHeap<Reverse<Rank>>,
    recent: [(Rank, usize); 2],
}

impl<I> Default for Buckets<I> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            index: FxHashMap::default(),
            ranks: BinaryHeap::new(),
            recent: [(Rank::MAX, 0); 2],
        }
    }
}

impl<I> Buckets<I> {
    /// Queues the pair of rank `rank` (never `Rank::MAX`) at `start`.
    #[inline]
    fn push(&mut self, rank: Rank, start: I) {
        let slot = if self.recent[0].0 == rank {
            self.recent[0].1
        } else if self.recent[1].0 == rank {
            self.recent.swap(0, 1);
            self.recent[0].1
        } else {
            let slot = match self.index.entry(rank) {
                std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let buffer = self.spare.pop().unwrap_or_default();
                    let slot = if let Some(slot) = self.free.pop() {
                        self.slots[slot] = buffer;
                        slot
                    } else {
                        self.slots.push(buffer);
                        self.slots.len() - 1
                    };
                    self.ranks.push(Reverse(rank));
                    *e.insert(slot)
                }
            };
            self.recent = [(rank, slot), self.recent[0]];
            slot
        };
        self.slots[slot].push(start);
    }

    /// The lowest rank with pairs queued, and their starts (hand the buffer back with
    /// `give_back`).
    fn pop(&mut self) -> Option<(Rank, Vec<I>)> {
        let Reverse(rank) = self.ranks.pop()?;
        let slot = self.index.remove(&rank)?;
        for recent in &mut self.recent {
            if recent.0 == rank {
                *recent = (Rank::MAX, 0);
            }
        }
        self.free.push(slot);
        Some((rank, std::mem::take(&mut self.slots[slot])))
    }

    /// A buffer `pop` gave out, read to the end: its allocation serves the next new rank.
    fn give_back(&mut self, mut starts: Vec<I>) {
        starts.clear();
        self.spare.push(starts);
    }
}

/// A part of a piece being merged: a token, linked to its neighbours.
#[derive(Clone, Copy)]
struct Part<I> {
    next: I,
    prev: I,
    /// Rank of this part merged with the next, `Rank::MAX` if none (or merged away).
    rank: Rank,
    /// This part's own rank (`Rank::MAX` for a byte that is no token).
    token: Rank,
}

/// The state of one `merge_large_with`: the parts, the token count, the pair ranks seen.
struct LargeMerge<'a, I> {
    counter: &'a ExactCounter,
    piece: &'a [u8],
    parts: Vec<Part<I>>,
    count: usize,
    pairs: &'a mut [(u64, Rank)],
}

impl<'a, I: PartIndex> LargeMerge<'a, I> {
    fn new(counter: &'a ExactCounter, piece: &'a [u8], pairs: &'a mut [(u64, Rank)]) -> Self {
        let n = piece.len();
        let parts = (0..n)
            .map(|i| Part {
                next: I::from_usize(i + 1),
                prev: if i == 0 {
                    I::NONE
                } else {
                    I::from_usize(i - 1)
                },
                rank: if i + 1 < n {
                    counter.rank(&piece[i..i + 2])
                } else {
                    Rank::MAX
                },
                token: counter.byte_ranks[usize::from(piece[i])],
            })
            .collect();
        Self {
            counter,
            piece,
            parts,
            count: n,
            pairs,
        }
    }

    /// The rank of parts `left` (starting at `from`) and `right` (ending before `to`) merged.
    #[inline]
    fn pair(&mut self, left: Rank, right: Rank, from: usize, to: usize) -> Rank {
        let bytes = &self.piece[from..to];
        if left == Rank::MAX || right == Rank::MAX {
            return self.counter.rank(bytes);
        }
        let key = u64::from(left) << 32 | u64::from(right);
        // Fibonacci hashing: the top bits of the product index the table.
        let slot =
            &mut self.pairs[(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - PAIR_BITS)) as usize];
        if slot.0 != key {
            *slot = (key, self.counter.rank(bytes));
        }
        slot.1
    }

    /// Merges the current pair at `start` with its next part; returns the pairs it makes
    /// (rank, start): the merged part with its next, its previous part with it.
    #[inline]
    fn at(&mut self, start: usize) -> [Option<(Rank, usize)>; 2] {
        let n = self.piece.len();
        let token = self.parts[start].rank;
        let mid = self.parts[start].next.get();
        let end = self.parts[mid].next.get();
        self.parts[mid].rank = Rank::MAX;
        self.count -= 1;
        self.parts[start].next = I::from_usize(end);
        self.parts[start].token = token;
        let mut made = [None, None];
        self.parts[start].rank = if end < n {
            self.parts[end].prev = I::from_usize(start);
            let (right, to) = (self.parts[end].token, self.parts[end].next.get());
            self.pair(token, right, start, to)
        } else {
            Rank::MAX
        };
        if self.parts[start].rank != Rank::MAX {
            made[0] = Some((self.parts[start].rank, start));
        }
        let before = self.parts[start].prev;
        if before != I::NONE {
            let before = before.get();
            let left = self.parts[before].token;
            let rank = self.pair(left, token, before, end);
            self.parts[before].rank = rank;
            if rank != Rank::MAX {
                made[1] = Some((rank, before));
            }
        }
        made
    }
}

/// How a count is produced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Real BPE token counts.
    Exact(Encoding),
    /// Whitespace-separated words times a factor, at least 1 for non-empty text.
    Heuristic { tokens_per_word: f64 },
}

/// The ASCII bytes Python's `str.isspace` accepts: `\t\n\x0b\x0c\r`, the four information
/// separators U+001C..U+001F (which Rust's `char::is_whitespace` lacks) and the space.
const ASCII_SPACE: [bool; 128] = {
    let mut table = [false; 128];
    let mut b = 0x09;
    while b <= 0x0d {
        table[b] = true;
        b += 1;
    }
    let mut b = 0x1c;
    while b <= 0x20 {
        table[b] = true;
        b += 1;
    }
    table
};

/// Whether the non-ASCII character whose UTF-8 starts at `bytes[0]` is one `str.isspace`
/// accepts: U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
/// Each starts with C2, E1, E2 or E3, so every other lead byte is decided by itself.
#[inline]
fn is_py_space_at(bytes: &[u8]) -> bool {
    match *bytes {
        [0xc2, 0x85 | 0xa0, ..]
        | [0xe1, 0x9a, 0x80, ..]
        | [0xe2, 0x81, 0x9f, ..]
        | [0xe3, 0x80, 0x80, ..] => true,
        [0xe2, 0x80, third, ..] => third <= 0x8a || matches!(third, 0xa8 | 0xa9 | 0xaf),
        _ => false,
    }
}

/// Number of whitespace-separated words, as `len(text.split())` counts them.
///
/// Splitting on a `char` predicate decoded every character and cost ~1.1 ns a byte, more than
/// the rest of a heuristic turn. Here eight ASCII bytes at a time are classified in one `u64`
/// (each byte's top bit says "letter") and a word is a letter whose predecessor is a space;
/// other bytes go one by one, where a UTF-8 continuation byte belongs to the character its
/// lead byte already classified.
pub fn word_count(text: &str) -> usize {
    const TOP: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // The top bit of each (ASCII) byte of `x + at_least(n)` is set where the byte is >= n.
    const fn at_least(n: u64) -> u64 {
        (0x80 - n) * ONES
    }
    let bytes = text.as_bytes();
    let mut words = 0;
    let mut in_word = false;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        if x & TOP == 0 {
            let ge = |n: u64| x + at_least(n);
            // Spaces are 0x09..=0x0d and 0x1c..=0x20.
            let spaces = (ge(0x09) & !ge(0x0e)) | (ge(0x1c) & !ge(0x21));
            let letters = !spaces & TOP;
            let after_letter = (letters << 8) | (u64::from(in_word) << 7);
            words += (letters & !after_letter).count_ones() as usize;
            in_word = letters >> 63 == 1;
        } else {
            count_bytes(bytes, at, at + 8, &mut words, &mut in_word);
        }
        at += 8;
    }
    count_bytes(bytes, at, bytes.len(), &mut words, &mut in_word);
    words
}

/// [`word_count`] over `bytes[from..to]` one byte at a time, carrying its state.
#[inline]
fn count_bytes(bytes: &[u8], from: usize, to: usize, words: &mut usize, in_word: &mut bool) {
    for i in from..to {
        let b = bytes[i];
        let space = if b < 0x80 {
            ASCII_SPACE[usize::from(b)]
        } else if b < 0xc0 {
            continue;
        } else {
            is_py_space_at(&bytes[i..])
        };
        *words += usize::from(!space && !*in_word);
        *in_word = !space;
    }
}

/// The heuristic count: `max(1, int(words * tokens_per_word))` for non-empty text, else 0.
pub fn heuristic_count(text: &str, tokens_per_word: f64) -> usize {
    if text.is_empty() {
        return 0;
    }
    let estimate = (word_count(text) as f64 * tokens_per_word) as usize;
    estimate.max(1)
}

/// Exact token count of `text` under `encoding`, special-token strings treated as plain text.
pub fn exact_count(text: &str, encoding: Encoding) -> usize {
    if text.is_empty() {
        return 0;
    }
    encoding.counter().count(text)
}

/// Cores available to this process, read once: `available_parallelism` consults cgroup files
/// on every call, which costs more than counting a short message.
fn parallelism() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

impl Mode {
    pub fn count(&self, text: &str) -> usize {
        match *self {
            Mode::Exact(encoding) => exact_count(text, encoding),
            Mode::Heuristic { tokens_per_word } => heuristic_count(text, tokens_per_word),
        }
    }

    /// Counts a batch, splitting it across up to `available_parallelism` threads when the
    /// batch is large enough to pay for them (`batch.rs`). Results stay in input order.
    pub fn count_many(&self, texts: &[&str]) -> Vec<usize> {
        let total_bytes: usize = texts.iter().map(|t| t.len()).sum();
        // Below ~64 KiB handing work to other threads costs more than it saves.
        if texts.len() < 2 || total_bytes < 64 * 1024 {
            return texts.iter().map(|t| self.count(t)).collect();
        }
        let threads = parallelism();
        if threads < 2 {
            return texts.iter().map(|t| self.count(t)).collect();
        }
        crate::batch::count_many(*self, texts, threads)
    }
}

/// A xorshift stream for the tests' generated cases.
#[cfg(test)]
fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// A counter over a vocabulary whose ranks ignore how its tokens are built: the 256 bytes,
/// then every string of two to four of `abcd` ranked in an order shuffled by `next`. Its
/// merges often make pairs below the rank being merged, which o200k_base and cl100k_base
/// rarely do, so the tests of the merge and of the periodic shortcut reach every step.
#[cfg(test)]
fn shuffled_abcd_counter(next: &mut impl FnMut() -> u64) -> ExactCounter {
    use std::fmt::Write as _;

    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let mut words: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..4 {
        words = words
            .iter()
            .flat_map(|w| b"abcd".iter().map(move |&c| [w.as_slice(), &[c]].concat()))
            .collect();
        tokens.extend(words.iter().filter(|w| w.len() >= 2).cloned());
    }
    let mut multi: Vec<Vec<u8>> = tokens.split_off(256);
    for i in (1..multi.len()).rev() {
        multi.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    tokens.extend(multi);
    let mut rank_file = String::new();
    for (rank, token) in tokens.iter().enumerate() {
        let token = general_purpose::STANDARD.encode(token);
        writeln!(rank_file, "{token} {rank}").unwrap();
    }
    ExactCounter::new(&rank_file, "(?s:.+)", 0, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_counts_known_strings() {
        assert_eq!(exact_count("", Encoding::O200kBase), 0);
        assert_eq!(exact_count("hello world", Encoding::O200kBase), 2);
        assert_eq!(exact_count("hello world", Encoding::Cl100kBase), 2);
        assert_eq!(exact_count("<|endoftext|>", Encoding::Cl100kBase), 7);
        assert_eq!(exact_count(&"a".repeat(5000), Encoding::O200kBase), 625);
    }

    #[test]
    fn heuristic_matches_python_split() {
        assert_eq!(heuristic_count("", 1.33), 0);
        assert_eq!(heuristic_count("   ", 1.33), 1);
        assert_eq!(heuristic_count("one two three", 1.33), 3);
        assert_eq!(heuristic_count("a\u{1c}b\u{a0}c", 1.0), 3);
    }

    #[test]
    fn word_count_splits_on_every_character_python_does() {
        // Every code point between two letters, against the char-by-char definition.
        let splits = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
        for c in (0..=0x10_ffff_u32).filter_map(char::from_u32) {
            let text = format!("a{c}b");
            assert_eq!(
                word_count(&text),
                if splits(c) { 2 } else { 1 },
                "U+{:04X}",
                c as u32
            );
            let alone = c.to_string();
            assert_eq!(
                word_count(&alone),
                usize::from(!splits(c)),
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn word_count_agrees_across_eight_byte_runs() {
        // Long random texts, so ASCII runs take the eight-bytes-at-once path and meet
        // multi-byte characters at every offset.
        let reference = |text: &str| {
            text.split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
                .filter(|w| !w.is_empty())
                .count()
        };
        let alphabet = [
            " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x1b", "\x7f", "!", "a", "Z",
            "~", "\u{85}", "\u{a0}", "\u{a1}", "\u{1680}", "\u{2000}", "\u{200b}", "\u{2028}",
            "\u{202f}", "\u{205f}", "\u{3000}", "\u{3001}", "é", "中", "😀",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 80) as usize;
            let mut text = String::new();
            let mut pick = state;
            for _ in 0..len {
                pick = pick.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                // Mostly letters and ASCII spaces, so long ASCII runs are common.
                let index = (pick >> 33) as usize % (alphabet.len() * 3);
                text.push_str(
                    alphabet[if index < alphabet.len() {
                        index
                    } else {
                        index % 14
                    }],
                );
            }
            assert_eq!(word_count(&text), reference(&text), "{text:?}");
        }
    }

    /// A megabyte without whitespace stays linear to split: the pieces tile the text (one
    /// search per piece, each starting where the last ended), and a run of one character class
    /// is one piece, merged once by the O(n log n) heap (`merges_agree_with_tiktoken`). No
    /// timing: a loaded machine makes wall-clock bounds flaky.
    #[test]
    fn long_pieces_are_split_in_one_pass() {
        let counter = Encoding::O200kBase.counter();
        for (text, expected_pieces) in [
            ("a".repeat(1 << 20), 1),
            ("!".repeat(1 << 20), 1),
            ("x7".repeat(1 << 19), 1 << 20),
        ] {
            let (mut end, mut pieces) = (0, 0);
            let mut cache = counter.split.create_cache();
            for piece in counter.pieces(&text, &mut cache) {
                assert_eq!(piece.as_ptr() as usize - text.as_ptr() as usize, end);
                assert!(!piece.is_empty());
                end += piece.len();
                pieces += 1;
            }
            assert_eq!((end, pieces), (text.len(), expected_pieces));
        }
    }

    /// The written-out ASCII pre-tokenizer against the regex, over random texts whose
    /// alphabet favours what the pattern turns on: case, contractions, digits, every kind of
    /// space and line break, slashes, other characters, and non-ASCII characters of every
    /// class next to them (letters, marks, numbers, spaces, the long s that `(?i)s` matches).
    #[test]
    fn ascii_pieces_agree_with_the_regex() {
        let counter = Encoding::O200kBase.counter();
        assert!(
            counter.ascii_end.is_some(),
            "o200k_base has the ASCII splitter"
        );
        let mut fast_cache = counter.split.create_cache();
        let mut cache = counter.split.create_cache();
        let favoured: Vec<char> = "aAbZsStTrReEvVmMlLdD'''09 \t\n\r\x0b\x0c\x1c\x00\x7f/!.-_\"{}"
            .chars()
            .collect();
        let foreign: Vec<char> = "é中\u{a0}\u{2028}\u{3000}ſ\u{212a}\u{300}٣Ǆ😀\u{85}"
            .chars()
            .collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..300_000 {
            let len = (next() % if round % 10 == 0 { 200 } else { 24 }) as usize;
            let with_foreign = round % 2 == 0;
            let text: String = (0..len)
                .map(|_| {
                    let r = next();
                    let k = (r >> 20) as usize;
                    match r % 16 {
                        // Any ASCII character now and then, in half the texts a foreign one.
                        0 | 1 => char::from((r >> 20) as u8 & 0x7f),
                        2 if with_foreign => foreign[k % foreign.len()],
                        _ => favoured[k % favoured.len()],
                    }
                })
                .collect();
            let fast: Vec<&str> = counter.pieces(&text, &mut fast_cache).collect();
            let regex: Vec<&str> = counter.pieces_with(&text, &mut cache, None).collect();
            assert_eq!(fast, regex, "{text:?}");
        }
    }

    /// tiktoken-rs over the same ranks with a pattern that never splits: the reference
    /// merge of one piece.
    fn oracle(encoding: Encoding) -> tiktoken_rs::CoreBPE {
        let counter = encoding.counter();
        let ranks = counter.ranks.clone().into_iter().collect();
        tiktoken_rs::CoreBPE::new(ranks, FxHashMap::default(), "(?s:.+)").unwrap()
    }

    /// A deterministic stream of pieces: random bytes of the kinds real text and the worst
    /// case are made of (ASCII letters, punctuation, digits, multi-byte UTF-8), every length.
    fn pieces_for_merge(seed: u64, count: usize, max_len: usize) -> Vec<String> {
        const ALPHABET: [&str; 16] = [
            "a", "e", "t", "s", "in", "er", "Q", "z", "!", "=", "7", " ", "é", "字", "😀",
            "\u{301}",
        ];
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..count)
            .map(|_| {
                let len = (next() as usize) % max_len + 1;
                (0..len).map(|_| ALPHABET[(next() % 16) as usize]).collect()
            })
            .collect()
    }

    /// How often `merge_large` made a pair below the rank it was reading: the path that
    /// keeps tiktoken's order when ranks do not follow how tokens are built.
    pub(super) static BELOW_THE_RANK_READ: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    #[test]
    fn merges_agree_with_tiktoken() {
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let counter = encoding.counter();
            let reference = oracle(encoding);
            let long = "abcdefghijklmnopqrstuvwxyz".repeat(40);
            let mut pieces = pieces_for_merge(7, 3000, 60);
            pieces.extend(pieces_for_merge(11, 40, 2000));
            pieces.extend(["a".repeat(3000), "!".repeat(999), "ab".repeat(700), long]);
            // The two worst cases of the benchmarks, shorter: random letters, and prose
            // letters without spaces (words that repeat, with pairs merged out of order).
            let mut state = 0x2545_f491_4f6c_dd1d_u64;
            let letters: String = (0..20_000)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from(b'a' + (state % 26) as u8)
                })
                .collect();
            pieces.push(letters);
            pieces.push("thequickbrownfoxjumpsoverthelazydogwhilethecatsleeps".repeat(200));
            for piece in &pieces {
                let expected = reference.encode_ordinary(piece).len();
                let bytes = piece.as_bytes();
                assert_eq!(counter.merge_large(bytes), expected, "{piece:?}");
                assert_eq!(
                    counter.merge_large_with::<usize>(bytes),
                    expected,
                    "{piece:?}"
                );
                if bytes.len() < LARGE_PIECE {
                    assert_eq!(counter.merge_small(bytes), expected, "{piece:?}");
                }
            }
        }
    }

    /// A vocabulary whose ranks ignore how its tokens are built (every string of up to four
    /// of `abcd`, ranked at random): merges often make pairs below the rank being read, which
    /// o200k_base and cl100k_base rarely do. The merge must still follow tiktoken's order.
    #[test]
    fn merges_out_of_rank_order_agree_with_tiktoken() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let counter = shuffled_abcd_counter(&mut next);
        let ranks = counter.ranks.clone().into_iter().collect();
        let reference = tiktoken_rs::CoreBPE::new(ranks, FxHashMap::default(), "(?s:.+)").unwrap();
        let ordering = std::sync::atomic::Ordering::Relaxed;
        let before = BELOW_THE_RANK_READ.load(ordering);
        for round in 0..400 {
            let len = LARGE_PIECE + (next() as usize) % if round % 10 == 0 { 5000 } else { 400 };
            let piece: String = (0..len)
                .map(|_| char::from(b"abcd"[(next() % 4) as usize]))
                .collect();
            let expected = reference.encode_ordinary(&piece).len();
            assert_eq!(counter.merge_large(piece.as_bytes()), expected, "{piece:?}");
        }
        assert!(
            BELOW_THE_RANK_READ.load(ordering) > before,
            "no merge made a pair below the rank being read"
        );
    }

    /// The cache answers what the merge answers, also after it has been cleared for being full
    /// (three times the capacity of distinct pieces, each counted twice).
    #[test]
    fn piece_cache_is_exact_after_eviction() {
        let counter = Encoding::O200kBase.counter();
        let pieces = pieces_for_merge(3, 3 * CACHE_ENTRIES, 30);
        let mut cache = FxHashMap::default();
        for _ in 0..2 {
            for piece in &pieces {
                let bytes = piece.as_bytes();
                let expected = if counter.rank(bytes) == Rank::MAX {
                    counter.merge_small(bytes)
                } else {
                    1
                };
                assert_eq!(counter.count_piece(bytes, &mut cache), expected);
                assert!(cache.len() <= CACHE_ENTRIES);
            }
        }
    }

    #[test]
    fn count_many_keeps_order() {
        let texts: Vec<String> = (0..2000).map(|i| "word ".repeat(i % 50 + 1)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mode = Mode::Exact(Encoding::O200kBase);
        let expected: Vec<usize> = refs.iter().map(|t| mode.count(t)).collect();
        assert_eq!(mode.count_many(&refs), expected);
    }
}

/// The Unicode classes the split patterns use, as the `regex` crate defines them. The
/// pure-Python twin spells its patterns with these exact ranges (generated into
/// `python/memlane/_pure/unicode_classes.py`) so that both paths agree on every code point,
/// including ones a newer Unicode version than this crate's has assigned since.
#[cfg(test)]
mod unicode_classes {
    use std::fmt::Write as _;

    use regex_automata::meta::Regex;

    const CLASSES: [(&str, &str); 9] = [
        ("L", r"\p{L}"),
        ("Lu", r"\p{Lu}"),
        ("Lt", r"\p{Lt}"),
        ("Lm", r"\p{Lm}"),
        ("Lo", r"\p{Lo}"),
        ("Ll", r"\p{Ll}"),
        ("M", r"\p{M}"),
        ("N", r"\p{N}"),
        ("S", r"\s"),
    ];
    const TABLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/python/memlane/_pure/unicode_classes.py"
    );

    fn ranges(expr: &str) -> Vec<(u32, u32)> {
        let re = Regex::new(&format!(r"\A{expr}\z")).unwrap();
        let mut out: Vec<(u32, u32)> = Vec::new();
        let mut buf = [0u8; 4];
        for cp in 0..=0x10_FFFFu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            if re.is_match(&*c.encode_utf8(&mut buf)) {
                match out.last_mut() {
                    Some(last) if last.1 + 1 == cp => last.1 = cp,
                    _ => out.push((cp, cp)),
                }
            }
        }
        out
    }

    fn render() -> String {
        let mut text = String::from(
            "\"\"\"Unicode classes of the token split patterns, exactly as the Rust `regex` crate defines them.\n\n\
             Generated by `MEMLANE_WRITE_UNICODE_TABLE=1 cargo test --lib unicode_classes`; a Rust test fails when\n\
             this file and the crate disagree. Each class is a tuple of inclusive code-point ranges.\n\"\"\"\n\n",
        );
        text.push_str("CLASSES: dict[str, tuple[tuple[int, int], ...]] = {\n");
        for (name, expr) in CLASSES {
            writeln!(text, "    {name:?}: (").unwrap();
            for chunk in ranges(expr).chunks(6) {
                let items: Vec<String> = chunk
                    .iter()
                    .map(|(a, b)| format!("(0x{a:X}, 0x{b:X})"))
                    .collect();
                writeln!(text, "        {},", items.join(", ")).unwrap();
            }
            text.push_str("    ),\n");
        }
        text.push_str("}\n");
        text
    }

    #[test]
    fn python_table_matches_regex_crate() {
        let expected = render();
        if std::env::var_os("MEMLANE_WRITE_UNICODE_TABLE").is_some() {
            std::fs::write(TABLE, &expected).unwrap();
        }
        let committed = std::fs::read_to_string(TABLE).unwrap_or_default();
        assert!(
            committed == expected,
            "{TABLE} is stale: regenerate it (see its docstring)"
        );
    }
}
