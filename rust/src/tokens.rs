//! Token counting: exact BPE counts through tiktoken-rs (rank files compiled in) and the
//! whitespace-word heuristic of the design memlane grew out of.

use std::sync::OnceLock;

use base64::{engine::general_purpose, Engine as _};
use regex::{Regex, RegexBuilder};
use rustc_hash::FxHashMap;
use tiktoken_rs::{CoreBPE, Rank};

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
                )
            }),
            Self::Cl100kBase => CL100K.get_or_init(|| {
                ExactCounter::new(
                    include_str!("../../python/memlane/_ranks/cl100k_base.tiktoken"),
                    CL100K_SPLIT,
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

/// Exact BPE counting: a DFA pre-tokenizer, direct rank lookups for pieces that are whole
/// tokens, and tiktoken-rs's byte-pair merge (its O(n log n) heap variant for long pieces) for
/// the rest.
pub struct ExactCounter {
    ranks: FxHashMap<Vec<u8>, Rank>,
    split: Regex,
    /// tiktoken-rs over the same ranks with a pattern that never splits: it BPE-merges one
    /// piece exactly as tiktoken does.
    merge: CoreBPE,
}

impl ExactCounter {
    fn new(rank_file: &str, split: &str) -> Self {
        let mut ranks = FxHashMap::default();
        for line in rank_file.lines().filter(|l| !l.is_empty()) {
            let (token, rank) = line.split_once(' ').expect("rank file line: token rank");
            let token = general_purpose::STANDARD
                .decode(token)
                .expect("base64 token");
            ranks.insert(token, rank.parse::<Rank>().expect("numeric rank"));
        }
        let merge = CoreBPE::new(ranks.clone(), FxHashMap::default(), "(?s:.+)")
            .expect("a pattern that never splits compiles");
        // The Unicode classes make the lazy DFA large: with the default cache it thrashes on
        // CJK text (rebuilt state after state, ~7x slower than tiktoken there).
        let split = RegexBuilder::new(split)
            .dfa_size_limit(64 << 20)
            .size_limit(64 << 20)
            .build()
            .expect("split pattern compiles");
        Self {
            ranks,
            split,
            merge,
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

    /// The pre-tokenizer's pieces of `text`, in order. Each search starts where the previous
    /// piece ended and the pieces tile the text, so splitting is one pass over it.
    fn pieces<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let mut pos = 0;
        std::iter::from_fn(move || {
            let m = self.split.find_at(text, pos)?;
            let end = Self::split_end(text, m.start(), m.end());
            pos = end;
            Some(&text[m.start()..end])
        })
    }

    /// Tokens in `text` (special-token strings count as plain text).
    pub fn count(&self, text: &str) -> usize {
        self.pieces(text)
            .map(|piece| {
                if self.ranks.contains_key(piece.as_bytes()) {
                    1
                } else {
                    self.merge.encode_ordinary(piece).len()
                }
            })
            .sum()
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

/// Python's `str.isspace`, which `str.split()` uses: Unicode White_Space plus the four
/// information separators U+001C..U+001F. Rust's `char::is_whitespace` lacks the latter, and
/// the heuristic must split exactly where the pure-Python twin does.
#[inline]
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Number of whitespace-separated words, as `len(text.split())` counts them.
pub fn word_count(text: &str) -> usize {
    text.split(is_py_space).filter(|w| !w.is_empty()).count()
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
    /// batch is large enough to pay for them. Results stay in input order.
    pub fn count_many(&self, texts: &[&str]) -> Vec<usize> {
        let total_bytes: usize = texts.iter().map(|t| t.len()).sum();
        // Below ~64 KiB a thread spawn costs more than it saves.
        if texts.len() < 2 || total_bytes < 64 * 1024 {
            return texts.iter().map(|t| self.count(t)).collect();
        }
        let threads = parallelism();
        if threads < 2 {
            return texts.iter().map(|t| self.count(t)).collect();
        }
        let mut out = vec![0usize; texts.len()];
        let chunk = texts.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for (src, dst) in texts.chunks(chunk).zip(out.chunks_mut(chunk)) {
                scope.spawn(move || {
                    for (t, slot) in src.iter().zip(dst.iter_mut()) {
                        *slot = self.count(t);
                    }
                });
            }
        });
        out
    }
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

    /// A megabyte without whitespace stays linear to split: the pieces tile the text (one
    /// search per piece, each starting where the last ended), and a run of one character class
    /// is one piece, merged once. tiktoken-rs merges pieces of 100 bytes or more with its
    /// O(n log n) heap, which `exact_counts_known_strings` and the Python differential tests
    /// hold to tiktoken's counts. No timing: a loaded machine makes wall-clock bounds flaky.
    #[test]
    fn long_pieces_are_split_in_one_pass() {
        let counter = Encoding::O200kBase.counter();
        for (text, expected_pieces) in [
            ("a".repeat(1 << 20), 1),
            ("!".repeat(1 << 20), 1),
            ("x7".repeat(1 << 19), 1 << 20),
        ] {
            let (mut end, mut pieces) = (0, 0);
            for piece in counter.pieces(&text) {
                assert_eq!(piece.as_ptr() as usize - text.as_ptr() as usize, end);
                assert!(!piece.is_empty());
                end += piece.len();
                pieces += 1;
            }
            assert_eq!((end, pieces), (text.len(), expected_pieces));
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

    use regex::Regex;

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
            if re.is_match(c.encode_utf8(&mut buf)) {
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
