//! The only place that knows about Python: thin PyO3 wrappers over the plain Rust modules.
//! Every heavy call releases the GIL; argument errors match the pure-Python twin word for word.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::borrow::Cow;

use crate::tokens::{Encoding, Mode};

/// Texts longer than this are counted with the GIL released; below it the release costs
/// more than it frees.
const DETACH_BYTES: usize = 4096;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unrepresentable>".to_owned())
}

/// UTF-8 view of a Python string. Lone surrogates cannot be UTF-8; like tiktoken, they are
/// replaced through a UTF-16 round trip (valid pairs joined, lone halves become U+FFFD).
fn text_of<'a>(obj: &'a Bound<'_, PyAny>, what: &dyn Fn() -> String) -> PyResult<Cow<'a, str>> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{} must be str, not {}", what(), type_name(obj))))?;
    match s.to_str() {
        Ok(text) => Ok(Cow::Borrowed(text)),
        Err(_) => {
            let fixed = s
                .call_method1("encode", ("utf-16", "surrogatepass"))?
                .call_method1("decode", ("utf-16", "replace"))?;
            Ok(Cow::Owned(fixed.extract::<String>()?))
        }
    }
}

/// Counts tokens exactly (BPE) or by the whitespace-word heuristic.
#[pyclass(frozen, module = "memlane._core", name = "TokenEstimator")]
pub struct PyTokenEstimator {
    mode: Mode,
    encoding: Encoding,
    tokens_per_word: f64,
}

#[pymethods]
impl PyTokenEstimator {
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn new(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        // Parsed by hand so that an explicit `None` is rejected like any other bad value
        // rather than silently meaning "default".
        let (mut encoding_name, mut tokens_per_word, mut mode) = (None, None, None);
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs.iter() {
                match key.extract::<String>()?.as_str() {
                    "encoding_name" => encoding_name = Some(value),
                    "tokens_per_word" => tokens_per_word = Some(value),
                    "mode" => mode = Some(value),
                    other => {
                        return Err(PyTypeError::new_err(format!(
                            "TokenEstimator.__init__() got an unexpected keyword argument '{other}'"
                        )))
                    }
                }
            }
        }
        let (encoding_name, tokens_per_word, mode) =
            (encoding_name.as_ref(), tokens_per_word.as_ref(), mode.as_ref());
        let encoding = match encoding_name {
            None => Encoding::O200kBase,
            Some(obj) => obj
                .cast::<PyString>()
                .ok()
                .and_then(|s| s.to_str().ok().and_then(Encoding::from_name))
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "unknown encoding_name {}; valid: {}",
                        repr(obj),
                        Encoding::NAMES.map(|n| format!("'{n}'")).join(", ")
                    ))
                })?,
        };
        let tokens_per_word = match tokens_per_word {
            None => 1.33,
            Some(obj) => {
                let numeric = (obj.is_instance_of::<pyo3::types::PyInt>()
                    || obj.is_instance_of::<pyo3::types::PyFloat>())
                    && !obj.is_instance_of::<pyo3::types::PyBool>();
                let value = if numeric { obj.extract::<f64>().ok() } else { None };
                match value {
                    Some(v) if v.is_finite() && v > 0.0 => v,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "tokens_per_word must be a finite number > 0, got {}",
                            repr(obj)
                        )))
                    }
                }
            }
        };
        let exact = match mode {
            None => true,
            Some(obj) => match obj.cast::<PyString>().ok().and_then(|s| s.to_str().ok()) {
                Some("exact") => true,
                Some("heuristic") => false,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "unknown mode {}; valid: 'exact', 'heuristic'",
                        repr(obj)
                    )))
                }
            },
        };
        let mode = if exact {
            Mode::Exact(encoding)
        } else {
            Mode::Heuristic { tokens_per_word }
        };
        Ok(Self { mode, encoding, tokens_per_word })
    }

    /// Name of the BPE encoding used in exact mode.
    #[getter]
    fn encoding_name(&self) -> &'static str {
        self.encoding.name()
    }

    /// Tokens per whitespace-separated word in heuristic mode.
    #[getter]
    fn tokens_per_word(&self) -> f64 {
        self.tokens_per_word
    }

    /// `"exact"` or `"heuristic"`.
    #[getter]
    fn mode(&self) -> &'static str {
        match self.mode {
            Mode::Exact(_) => "exact",
            Mode::Heuristic { .. } => "heuristic",
        }
    }

    /// Number of tokens in `text`.
    fn estimate(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<usize> {
        let text = text_of(text, &|| "text".to_owned())?;
        if text.len() > DETACH_BYTES {
            let text: &str = &text;
            Ok(py.detach(|| self.mode.count(text)))
        } else {
            Ok(self.mode.count(&text))
        }
    }

    /// Token counts of a batch, in order; the GIL is released and the batch spread over cores.
    fn estimate_many(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
        if texts.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "texts must be an iterable of str, not str",
            ));
        }
        // Materialise first so borrowed UTF-8 views stay valid while the GIL is released.
        let items: Vec<Bound<'_, PyAny>> = texts
            .try_iter()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "texts must be an iterable of str, not {}",
                    type_name(texts)
                ))
            })?
            .collect::<PyResult<_>>()?;
        let views: Vec<Cow<'_, str>> = items
            .iter()
            .enumerate()
            .map(|(i, obj)| text_of(obj, &|| format!("texts[{i}]")))
            .collect::<PyResult<_>>()?;
        let refs: Vec<&str> = views.iter().map(|c| c.as_ref()).collect();
        Ok(py.detach(|| self.mode.count_many(&refs)))
    }

    /// Whether `text` fits in `max_tokens` tokens.
    fn fits(&self, py: Python<'_>, text: &Bound<'_, PyAny>, max_tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        let limit = check_int(max_tokens, "max_tokens")?;
        Ok(self.estimate(py, text)? as i128 <= limit as i128)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let tpw = pyo3::types::PyFloat::new(py, self.tokens_per_word);
        Ok(format!(
            "TokenEstimator(encoding_name='{}', tokens_per_word={}, mode='{}')",
            self.encoding.name(),
            repr(tpw.as_any()),
            self.mode()
        ))
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        // Keyword-only constructor: rebuild through a module-level helper.
        let py = slf.py();
        let me = slf.get();
        let rebuild = py.import("memlane.tokens")?.getattr("_rebuild_estimator")?;
        let args = PyTuple::new(py, [me.encoding.name().into_pyobject(py)?.into_any(), me.tokens_per_word.into_pyobject(py)?.into_any(), me.mode().into_pyobject(py)?.into_any()])?;
        Ok((rebuild, args))
    }
}

/// An integer argument (bool rejected), with the twin's message.
fn check_int(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<i64> {
    if obj.is_instance_of::<pyo3::types::PyBool>() || !obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be int, not {}",
            type_name(obj)
        )));
    }
    obj.extract::<i64>()
        .or_else(|_| Ok(if obj.gt(0)? { i64::MAX } else { i64::MIN }))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", crate::VERSION)?;
    m.add_class::<PyTokenEstimator>()?;
    Ok(())
}
