//! Token counting: exact BPE counts through tiktoken-rs (rank files compiled in) and the
//! whitespace-word heuristic of the design memlane grew out of.

use tiktoken_rs::CoreBPE;

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

    /// The shared tokenizer; built once per process on first use (this is the rank-file load).
    pub fn bpe(self) -> &'static CoreBPE {
        match self {
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        }
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
    encoding.bpe().count_ordinary(text)
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
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Below ~64 KiB a thread spawn costs more than it saves.
        if threads < 2 || texts.len() < 2 || total_bytes < 64 * 1024 {
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
    }

    #[test]
    fn heuristic_matches_python_split() {
        assert_eq!(heuristic_count("", 1.33), 0);
        assert_eq!(heuristic_count("   ", 1.33), 1);
        assert_eq!(heuristic_count("one two three", 1.33), 3);
        assert_eq!(heuristic_count("a\u{1c}b\u{a0}c", 1.0), 3);
    }

    #[test]
    fn long_piece_without_whitespace_is_not_quadratic() {
        let text = "a".repeat(1 << 20);
        let start = std::time::Instant::now();
        assert!(exact_count(&text, Encoding::O200kBase) > 0);
        assert!(start.elapsed().as_secs() < 10);
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
