//! `Encoder`: the counting engine behind `memlane.tokens.TokenEstimator`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::tokens::{Encoding, Mode};

/// Texts longer than this are counted with the GIL released; below it the release costs
/// more than it frees.
const DETACH_BYTES: usize = 4096;

/// A temporary UTF-8 copy of a Python string, dropped after counting.
///
/// Extracting `&str` would be zero-copy, but for a non-ASCII string CPython keeps the UTF-8
/// form it builds attached to the string for good: every counted message would carry a second
/// copy of its text for as long as memory holds it. A lone surrogate cannot be UTF-8 and
/// raises `UnicodeEncodeError`; the Python caller repairs the text and counts it again.
fn utf8<'py>(text: &Bound<'py, PyString>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    text.encode_utf8()
}

fn as_str<'a>(bytes: &'a Bound<'_, pyo3::types::PyBytes>) -> &'a str {
    // CPython's UTF-8 encoder only produces valid UTF-8.
    std::str::from_utf8(bytes.as_bytes()).unwrap_or_default()
}

/// Counts tokens with one BPE encoding, or by the whitespace-word heuristic.
#[pyclass(frozen, module = "memlane._core")]
pub struct Encoder {
    mode: Mode,
}

#[pymethods]
impl Encoder {
    /// Exact BPE counts with the named encoding.
    #[staticmethod]
    fn exact(encoding_name: &str) -> PyResult<Self> {
        let encoding = Encoding::from_name(encoding_name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown encoding {encoding_name:?}")))?;
        Ok(Self {
            mode: Mode::Exact(encoding),
        })
    }

    /// Whitespace-separated words times `tokens_per_word`, at least 1 for non-empty text.
    #[staticmethod]
    fn heuristic(tokens_per_word: f64) -> Self {
        Self {
            mode: Mode::Heuristic { tokens_per_word },
        }
    }

    /// Number of tokens in `text`.
    fn count(&self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<usize> {
        let bytes = utf8(text)?;
        let text = as_str(&bytes);
        Ok(if text.len() > DETACH_BYTES {
            py.detach(|| self.mode.count(text))
        } else {
            self.mode.count(text)
        })
    }

    /// Token counts of a batch, in order, spread over the cores with the GIL released; a
    /// batch of at most `DETACH_BYTES` in all (a turn's messages) is counted with the GIL
    /// held, as `count` does: releasing it costs more than the counting.
    fn count_many(&self, py: Python<'_>, texts: Vec<Bound<'_, PyString>>) -> PyResult<Vec<usize>> {
        let copies = texts.iter().map(utf8).collect::<PyResult<Vec<_>>>()?;
        let refs: Vec<&str> = copies.iter().map(as_str).collect();
        let total: usize = refs.iter().map(|t| t.len()).sum();
        Ok(if total > DETACH_BYTES {
            py.detach(|| self.mode.count_many(&refs))
        } else {
            self.mode.count_many(&refs)
        })
    }
}
