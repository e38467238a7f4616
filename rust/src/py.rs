//! The only place that knows about Python: thin PyO3 wrappers over the plain Rust modules.
//! Every heavy call releases the GIL; argument errors match the pure-Python twin word for word.

use pyo3::exceptions::{
    PyMemoryError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{
    PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};
use rusqlite::types::Value;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::budget::{BudgetError, BudgetLedger};
use crate::store::memory::MemoryTable;
use crate::store::sqlite::{self, Row, SqliteTable};
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

/// A UTF-8 copy of a Python string, alive while it is counted.
///
/// `PyString::to_str` would be zero-copy, but for a non-ASCII string CPython keeps the UTF-8
/// form it builds attached to the string for good: every counted message would carry a second
/// copy of its text for as long as memory holds it. A temporary `bytes` is dropped after.
enum Utf8<'py> {
    Bytes(Bound<'py, PyBytes>),
    Owned(String),
}

impl Utf8<'_> {
    fn as_str(&self) -> &str {
        match self {
            Utf8::Bytes(bytes) => std::str::from_utf8(bytes.as_bytes()).unwrap_or_default(),
            Utf8::Owned(text) => text,
        }
    }
}

/// UTF-8 of a Python string. Lone surrogates cannot be UTF-8; like tiktoken, they are
/// replaced through a UTF-16 round trip (valid pairs joined, lone halves become U+FFFD).
fn text_of<'py>(obj: &Bound<'py, PyAny>, what: &dyn Fn() -> String) -> PyResult<Utf8<'py>> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{} must be str, not {}", what(), type_name(obj))))?;
    match s.encode_utf8() {
        Ok(bytes) => Ok(Utf8::Bytes(bytes)),
        Err(_) => {
            let fixed = s
                .call_method1("encode", ("utf-16", "surrogatepass"))?
                .call_method1("decode", ("utf-16", "replace"))?;
            Ok(Utf8::Owned(fixed.extract::<String>()?))
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
        let text = text.as_str();
        if text.len() > DETACH_BYTES {
            Ok(py.detach(|| self.mode.count(text)))
        } else {
            Ok(self.mode.count(text))
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
        let views: Vec<Utf8<'_>> = items
            .iter()
            .enumerate()
            .map(|(i, obj)| text_of(obj, &|| format!("texts[{i}]")))
            .collect::<PyResult<_>>()?;
        let refs: Vec<&str> = views.iter().map(Utf8::as_str).collect();
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

/// The guard of a mutex, unless an earlier call panicked while holding it: the state behind it
/// may be half-updated, so it is refused rather than used.
fn guard<'a, T>(
    lock: std::sync::LockResult<MutexGuard<'a, T>>,
    class: &str,
) -> PyResult<MutexGuard<'a, T>> {
    lock.map_err(|_| {
        PyRuntimeError::new_err(format!("{class} is unusable: an earlier call panicked"))
    })
}

// ------------------------------------------------------------------------- budget ledger

/// A token-count argument, classified without losing Python's unbounded ints.
enum Count {
    Negative,
    Fits(u64),
    /// At least 2**64.
    Huge,
}

fn count_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Count> {
    // bool is an int, and the twin accepts it as one.
    if !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be int, not {}",
            type_name(obj)
        )));
    }
    match obj.extract::<u64>() {
        Ok(value) => Ok(Count::Fits(value)),
        Err(_) if obj.lt(0)? => Ok(Count::Negative),
        Err(_) => Ok(Count::Huge),
    }
}

fn too_large(obj: &Bound<'_, PyAny>, name: &str) -> PyErr {
    PyOverflowError::new_err(format!("{name} must be < 2**64, got {}", repr(obj)))
}

fn negative_tokens(obj: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!("tokens must be >= 0, got {}", repr(obj)))
}

/// Token counts of a conversation's retained turns and the window that fits the budget.
#[pyclass(frozen, module = "memlane._core", name = "BudgetLedger")]
pub struct PyBudgetLedger {
    ledger: Mutex<BudgetLedger>,
}

impl PyBudgetLedger {
    fn ledger(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, BudgetLedger>> {
        guard(self.ledger.lock_py_attached(py), "BudgetLedger")
    }
}

#[pymethods]
impl PyBudgetLedger {
    #[new]
    fn new(max_tokens: &Bound<'_, PyAny>) -> PyResult<Self> {
        let max = match count_arg(max_tokens, "max_tokens")? {
            Count::Fits(value) => value,
            Count::Negative => 0,
            Count::Huge => return Err(too_large(max_tokens, "max_tokens")),
        };
        let ledger = BudgetLedger::new(max).map_err(|_| {
            PyValueError::new_err(format!("max_tokens must be > 0, got {}", repr(max_tokens)))
        })?;
        Ok(Self {
            ledger: Mutex::new(ledger),
        })
    }

    /// The budget.
    #[getter]
    fn max_tokens(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.max_tokens())
    }

    /// Sum of every retained turn's count.
    #[getter]
    fn total(&self, py: Python<'_>) -> PyResult<u128> {
        Ok(self.ledger(py)?.total())
    }

    /// Sum of the counts in the window (the summary excluded).
    #[getter]
    fn window_tokens(&self, py: Python<'_>) -> PyResult<u128> {
        Ok(self.ledger(py)?.window_tokens())
    }

    /// Tokens reserved for the summary (0 when it does not fit and is left out).
    #[getter]
    fn reserved(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.reserved())
    }

    /// Absolute index of the oldest retained turn.
    #[getter]
    fn offset(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.offset())
    }

    /// Absolute index of the oldest turn in the window (`end` when it is empty).
    #[getter]
    fn window_start(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.window_start())
    }

    /// Absolute index one past the newest turn.
    #[getter]
    fn end(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.end())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.ledger(py)?.len())
    }

    /// Appends the newest turn's count and slides the window.
    fn push(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        match count_arg(tokens, "tokens")? {
            Count::Fits(value) => {
                self.ledger(py)?.push(value);
                Ok(())
            }
            Count::Negative => Err(negative_tokens(tokens)),
            Count::Huge => Err(too_large(tokens, "tokens")),
        }
    }

    /// Evicts the `n` oldest turns; returns the tokens they held.
    fn pop_front(&self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<u128> {
        let count = count_arg(n, "n")?;
        let mut ledger = self.ledger(py)?;
        let outcome = match count {
            Count::Fits(value) => ledger.pop_front(usize::try_from(value).unwrap_or(usize::MAX)),
            Count::Negative | Count::Huge => Err(BudgetError::EvictTooMany {
                retained: ledger.len(),
            }),
        };
        outcome.map_err(|e| match e {
            BudgetError::EvictTooMany { retained } => {
                PyValueError::new_err(format!("cannot evict {} of {retained} turns", repr(n)))
            }
            BudgetError::NonPositiveMax => unreachable!("only the constructor checks the budget"),
        })
    }

    /// Reserves room for a summary of `tokens`; returns whether it is included.
    fn set_summary_tokens(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        let tokens = match count_arg(tokens, "tokens")? {
            Count::Negative => return Err(negative_tokens(tokens)),
            Count::Fits(value) => Some(value),
            Count::Huge => None,
        };
        Ok(self.ledger(py)?.set_summary_tokens(tokens))
    }
}

// ------------------------------------------------------------------------- memory table

/// A namespace, entry id or key as the memory table holds it: the UTF-8 bytes of the `str`.
/// Lone surrogates are legal in a Python `str` and make keys of their own, so they are kept
/// (encoded with `surrogatepass`) rather than replaced.
type Key = Box<[u8]>;

fn key_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Key> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{name} must be str, not {}", type_name(obj))))?;
    match s.to_str() {
        Ok(text) => Ok(text.as_bytes().into()),
        Err(_) => {
            let raw = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
            Ok(raw.cast::<PyBytes>()?.as_bytes().into())
        }
    }
}

fn key_str<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match std::str::from_utf8(key) {
        Ok(text) => Ok(PyString::new(py, text).into_any()),
        Err(_) => PyBytes::new(py, key).call_method1("decode", ("utf-8", "surrogatepass")),
    }
}

/// Entries per namespace with a key index; payloads are any Python objects, kept as saved.
#[pyclass(frozen, module = "memlane._core", name = "MemoryTable")]
pub struct PyMemoryTable {
    // Displaced payloads are handed back by the table and dropped only after this lock is
    // released: a payload's finaliser may run any Python code, this table included.
    table: Mutex<MemoryTable<Py<PyAny>, Key>>,
}

impl PyMemoryTable {
    fn table(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, MemoryTable<Py<PyAny>, Key>>> {
        guard(self.table.lock_py_attached(py), "MemoryTable")
    }
}

#[pymethods]
impl PyMemoryTable {
    #[new]
    fn new() -> Self {
        Self {
            table: Mutex::new(MemoryTable::new()),
        }
    }

    /// Inserts or replaces one entry.
    fn save(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        entry_id: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<()> {
        let namespace = key_arg(namespace, "namespace")?;
        let entry_id = key_arg(entry_id, "entry_id")?;
        let key = key.map(|k| key_arg(k, "key")).transpose()?;
        let displaced = self
            .table(py)?
            .save(namespace, entry_id, key, expires_at, payload);
        drop(displaced);
        Ok(())
    }

    /// Unexpired payloads of a namespace, in insertion order.
    fn load<'py>(
        &self,
        py: Python<'py>,
        namespace: &Bound<'py, PyAny>,
        now: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        let namespace = key_arg(namespace, "namespace")?;
        let payloads: Vec<Py<PyAny>> = self
            .table(py)?
            .load(&namespace, now)
            .map(|p| p.clone_ref(py))
            .collect();
        PyList::new(py, payloads)
    }

    /// The unexpired payload holding `key`, or `None`.
    fn load_by_key(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        now: f64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let namespace = key_arg(namespace, "namespace")?;
        let key = key_arg(key, "key")?;
        Ok(self
            .table(py)?
            .load_by_key(&namespace, &key, now)
            .map(|p| p.clone_ref(py)))
    }

    /// Removes an entry of this namespace; whether there was one.
    fn delete(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        entry_id: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let namespace = key_arg(namespace, "namespace")?;
        let entry_id = key_arg(entry_id, "entry_id")?;
        let removed = self.table(py)?.delete(&namespace, &entry_id);
        Ok(removed.is_some())
    }

    /// Removes every entry of a namespace (expired ones too); how many there were.
    fn clear(&self, py: Python<'_>, namespace: &Bound<'_, PyAny>) -> PyResult<usize> {
        let namespace = key_arg(namespace, "namespace")?;
        let removed = self.table(py)?.clear(&namespace);
        Ok(removed.len())
    }

    /// Removes expired entries everywhere; how many.
    fn cleanup_expired(&self, py: Python<'_>, now: f64) -> PyResult<usize> {
        let removed = self.table(py)?.cleanup_expired(now);
        Ok(removed.len())
    }

    /// Namespaces that hold at least one entry, in creation order.
    fn namespaces<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let names: Vec<Key> = self.table(py)?.namespaces().cloned().collect();
        let names = names
            .iter()
            .map(|n| key_str(py, n))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, names)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.table(py)?.len())
    }
}

// ------------------------------------------------------------------------- SQLite table

/// The name CPython gives a type in C (`tp_name`), which `sqlite3` puts in binding errors:
/// the bare name for builtins and classes defined in Python, `module.Name` for other
/// extension types.
fn c_type_name(obj: &Bound<'_, PyAny>) -> String {
    const HEAP_TYPE: u64 = 1 << 9;
    let ty = obj.get_type();
    let heap = ty
        .getattr("__flags__")
        .and_then(|f| f.extract::<u64>())
        .map_or(true, |f| f & HEAP_TYPE != 0);
    let name = if heap {
        ty.name()
    } else {
        ty.fully_qualified_name()
    };
    name.map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_owned())
}

fn sqlite3_error(py: Python<'_>, class: &str, message: String, code: Option<i32>) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let module = py.import("sqlite3")?;
        let exc = module.getattr(class)?.call1((message,))?;
        if let Some(code) = code {
            exc.setattr("sqlite_errorcode", code)?;
            exc.setattr("sqlite_errorname", error_name(&module, code)?)?;
        }
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|e| e)
}

/// Primary result code names. With their `_`-suffixed extended codes they are exactly the
/// error-code constants `sqlite3` exports (its authoriser constants reuse the same numbers,
/// so the names cannot be found by value alone).
const RESULT_CODE_NAMES: [&str; 31] = [
    "OK",
    "ERROR",
    "INTERNAL",
    "PERM",
    "ABORT",
    "BUSY",
    "LOCKED",
    "NOMEM",
    "READONLY",
    "INTERRUPT",
    "IOERR",
    "CORRUPT",
    "NOTFOUND",
    "FULL",
    "CANTOPEN",
    "PROTOCOL",
    "EMPTY",
    "SCHEMA",
    "TOOBIG",
    "CONSTRAINT",
    "MISMATCH",
    "MISUSE",
    "NOLFS",
    "AUTH",
    "FORMAT",
    "RANGE",
    "NOTADB",
    "NOTICE",
    "WARNING",
    "ROW",
    "DONE",
];

/// `sqlite_errorname` as `sqlite3` sets it: the constant's name, or "unknown".
fn error_name(sqlite3: &Bound<'_, PyModule>, code: i32) -> PyResult<String> {
    for name in sqlite3.dir()?.iter() {
        let name: String = name.extract()?;
        let Some(rest) = name.strip_prefix("SQLITE_") else {
            continue;
        };
        let is_error_code = RESULT_CODE_NAMES.iter().any(|primary| {
            rest.strip_prefix(primary)
                .is_some_and(|tail| tail.is_empty() || tail.starts_with('_'))
        });
        if is_error_code && sqlite3.getattr(name.as_str())?.extract::<i32>().ok() == Some(code) {
            return Ok(name);
        }
    }
    Ok("unknown".to_owned())
}

/// The exception Python's `sqlite3` raises for the same failure: same class (chosen by the
/// primary result code, as CPython does), same message, same `sqlite_errorcode`.
fn sqlite_error(py: Python<'_>, e: sqlite::Error) -> PyErr {
    use rusqlite::ffi;
    match e {
        sqlite::Error::Io(e) => e.into(),
        sqlite::Error::NotUtf8 { .. } => sqlite3_error(py, "OperationalError", e.to_string(), None),
        sqlite::Error::Sqlite(rusqlite::Error::SqliteFailure(code, message)) => {
            let class = match code.extended_code & 0xff {
                ffi::SQLITE_NOMEM => return PyMemoryError::new_err(()),
                ffi::SQLITE_INTERNAL | ffi::SQLITE_NOTFOUND => "InternalError",
                ffi::SQLITE_ERROR
                | ffi::SQLITE_PERM
                | ffi::SQLITE_ABORT
                | ffi::SQLITE_BUSY
                | ffi::SQLITE_LOCKED
                | ffi::SQLITE_READONLY
                | ffi::SQLITE_INTERRUPT
                | ffi::SQLITE_IOERR
                | ffi::SQLITE_FULL
                | ffi::SQLITE_CANTOPEN
                | ffi::SQLITE_PROTOCOL
                | ffi::SQLITE_EMPTY
                | ffi::SQLITE_SCHEMA => "OperationalError",
                ffi::SQLITE_TOOBIG => "DataError",
                ffi::SQLITE_CONSTRAINT | ffi::SQLITE_MISMATCH => "IntegrityError",
                ffi::SQLITE_MISUSE | ffi::SQLITE_RANGE => "InterfaceError",
                _ => "DatabaseError",
            };
            let message = message.unwrap_or_else(|| code.to_string());
            sqlite3_error(py, class, message, Some(code.extended_code))
        }
        sqlite::Error::Sqlite(other) => sqlite3_error(py, "DatabaseError", other.to_string(), None),
    }
}

/// A parameter bound as Python's `sqlite3` binds it: anything but an exact int, float, str or
/// bytearray goes through `sqlite3.adapt` first (so registered adapters apply), then the same
/// type checks and the same errors. `index` is its 1-based position in the statement.
fn bind(obj: &Bound<'_, PyAny>, index: usize) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    let exact = obj.is_exact_instance_of::<PyInt>()
        || obj.is_exact_instance_of::<PyFloat>()
        || obj.is_exact_instance_of::<PyString>()
        || obj.is_exact_instance_of::<PyByteArray>();
    let adapted = if exact {
        obj.clone()
    } else {
        let module = obj.py().import("sqlite3")?;
        module
            .getattr("adapt")?
            .call1((obj, module.getattr("PrepareProtocol")?, obj))?
    };
    if adapted.is_none() {
        Ok(Value::Null)
    } else if let Ok(int) = adapted.cast::<PyInt>() {
        int.extract::<i64>().map(Value::Integer).map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(obj.py()) {
                PyOverflowError::new_err("Python int too large to convert to SQLite INTEGER")
            } else {
                e
            }
        })
    } else if let Ok(float) = adapted.cast::<PyFloat>() {
        Ok(Value::Real(float.value()))
    } else if let Ok(text) = adapted.cast::<PyString>() {
        Ok(Value::Text(text.to_str()?.to_owned()))
    } else if let Ok(bytes) = adapted.cast::<PyBytes>() {
        Ok(Value::Blob(bytes.as_bytes().to_vec()))
    } else if let Ok(view) = PyMemoryView::from(&adapted) {
        let bytes = view.call_method0("tobytes")?;
        Ok(Value::Blob(bytes.cast::<PyBytes>()?.as_bytes().to_vec()))
    } else {
        Err(sqlite3_error(
            obj.py(),
            "ProgrammingError",
            format!(
                "Error binding parameter {index}: type '{}' is not supported",
                c_type_name(obj)
            ),
            None,
        ))
    }
}

/// Binds statement parameters in order; conversion errors are kept, to be raised in the
/// twin's order (after the closed check).
fn bind_all<const N: usize>(objs: [&Bound<'_, PyAny>; N]) -> [PyResult<Value>; N] {
    let mut index = 0;
    objs.map(|obj| {
        index += 1;
        bind(obj, index)
    })
}

/// One row of `save_many`, converted with the twin's statements in mind: its first failure
/// is the one Python would hit (indexing, then the key-holder delete, the move delete and
/// the upsert, each binding its parameters in order).
fn bind_row(
    namespace: &Bound<'_, PyAny>,
    row: &Bound<'_, PyAny>,
    ns_value: &mut Value,
) -> PyResult<Row> {
    let entry_id = row.get_item(0)?;
    let key = row.get_item(2)?;
    if !key.is_none() {
        bind(namespace, 1)?;
        bind(&key, 2)?;
        bind(&entry_id, 3)?;
    }
    bind(&entry_id, 1)?;
    bind(namespace, 2)?;
    let items = row.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    if items.len() != 8 {
        return Err(sqlite3_error(
            row.py(),
            "ProgrammingError",
            format!(
                "Incorrect number of bindings supplied. The current statement uses 9, and there are {} supplied.",
                items.len() + 1
            ),
            None,
        ));
    }
    *ns_value = bind(namespace, 1)?;
    let values = items
        .iter()
        .enumerate()
        .map(|(i, item)| bind(item, i + 2))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(values.try_into().expect("eight values for eight items"))
}

fn py_value(py: Python<'_>, value: Value) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Integer(i) => i.into_pyobject(py)?.into_any(),
        Value::Real(r) => PyFloat::new(py, r).into_any(),
        Value::Text(s) => PyString::new(py, &s).into_any(),
        Value::Blob(b) => PyBytes::new(py, &b).into_any(),
    })
}

fn py_row(py: Python<'_>, row: Row) -> PyResult<Bound<'_, PyTuple>> {
    let items = row
        .into_iter()
        .map(|v| py_value(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

/// Why an SQLite call failed, carried out of the GIL-free section.
enum Failure {
    Closed,
    Sql(sqlite::Error),
    Py(PyErr),
}

impl From<sqlite::Error> for Failure {
    fn from(e: sqlite::Error) -> Self {
        Self::Sql(e)
    }
}

impl Failure {
    fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            Self::Closed => PyValueError::new_err("SqliteTable is closed"),
            Self::Sql(e) => sqlite_error(py, e),
            Self::Py(e) => e,
        }
    }
}

/// Parameters converted under the GIL, in statement order; the first error, if any.
fn ready<const N: usize>(args: [PyResult<Value>; N]) -> Result<[Value; N], Failure> {
    let values = args
        .into_iter()
        .collect::<PyResult<Vec<_>>>()
        .map_err(Failure::Py)?;
    Ok(values
        .try_into()
        .unwrap_or_else(|_| unreachable!("N values for N arguments")))
}

/// The SQLite store: one connection, every call one transaction, the GIL released around
/// every SQLite call so that threads overlap.
#[pyclass(frozen, module = "memlane._core", name = "SqliteTable")]
pub struct PySqliteTable {
    table: Mutex<Option<SqliteTable>>,
}

impl PySqliteTable {
    /// Runs `op` on the open table with the GIL released. Arguments are converted before,
    /// under the GIL, but their errors surface inside `op`, after the closed check, which
    /// is the twin's order.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&SqliteTable) -> Result<R, Failure> + Send,
    ) -> PyResult<R> {
        py.detach(|| {
            let table = guard(self.table.lock(), "SqliteTable").map_err(Failure::Py)?;
            op(table.as_ref().ok_or(Failure::Closed)?)
        })
        .map_err(|f| f.into_pyerr(py))
    }

    fn save_batch<'py>(
        &self,
        py: Python<'py>,
        namespace: &Bound<'py, PyAny>,
        rows: impl IntoIterator<Item = PyResult<Bound<'py, PyAny>>>,
    ) -> PyResult<()> {
        let mut ns_value = Value::Null;
        let mut batch: Vec<Result<Row, Failure>> = Vec::new();
        for row in rows {
            let converted = row.and_then(|row| bind_row(namespace, &row, &mut ns_value));
            let failed = converted.is_err();
            batch.push(converted.map_err(Failure::Py));
            if failed {
                break;
            }
        }
        self.run(py, move |table| table.save_many(&ns_value, batch))
    }
}

#[pymethods]
impl PySqliteTable {
    #[new]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        if !path.eq(":memory:")? {
            // The twin's own call, so that a failure raises the same OSError subclass, errno
            // and directory name; `SqliteTable::open` then finds the directories in place.
            let kwargs = PyDict::new(py);
            kwargs.set_item("parents", true)?;
            kwargs.set_item("exist_ok", true)?;
            let parent = py
                .import("pathlib")?
                .getattr("Path")?
                .call1((path,))?
                .getattr("parent")?;
            parent.call_method("mkdir", (), Some(&kwargs))?;
        }
        let path: PathBuf = path.extract()?;
        let table = py
            .detach(|| SqliteTable::open(&path))
            .map_err(|e| sqlite_error(py, e))?;
        Ok(Self {
            table: Mutex::new(Some(table)),
        })
    }

    /// Upserts one row atomically.
    fn save(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        row: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.save_batch(py, namespace, [Ok(row.clone())])
    }

    /// Upserts rows in one transaction: all of them are written or none.
    fn save_many(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        match rows.try_iter() {
            Ok(iter) => self.save_batch(py, namespace, iter),
            // The twin begins the transaction before iterating: a closed table wins.
            Err(e) => self.save_batch(py, namespace, [Err(e)]),
        }
    }

    /// Unexpired rows of a namespace, in insertion order.
    fn load<'py>(
        &self,
        py: Python<'py>,
        namespace: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let args = bind_all([namespace, now]);
        let rows = self.run(py, move |table| {
            let [namespace, now] = ready(args)?;
            Ok(table.load(&namespace, &now)?)
        })?;
        let rows = rows
            .into_iter()
            .map(|row| py_row(py, row))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// The unexpired row holding `key`, or `None`.
    fn load_by_key<'py>(
        &self,
        py: Python<'py>,
        namespace: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let args = bind_all([namespace, key, now]);
        let row = self.run(py, move |table| {
            let [namespace, key, now] = ready(args)?;
            Ok(table.load_by_key(&namespace, &key, &now)?)
        })?;
        row.map(|row| py_row(py, row)).transpose()
    }

    /// Removes an entry of this namespace; whether there was one.
    fn delete(
        &self,
        py: Python<'_>,
        namespace: &Bound<'_, PyAny>,
        entry_id: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let args = bind_all([namespace, entry_id]);
        self.run(py, move |table| {
            let [namespace, entry_id] = ready(args)?;
            Ok(table.delete(&namespace, &entry_id)?)
        })
    }

    /// Removes every entry of a namespace; how many there were.
    fn clear(&self, py: Python<'_>, namespace: &Bound<'_, PyAny>) -> PyResult<usize> {
        let args = bind_all([namespace]);
        self.run(py, move |table| {
            let [namespace] = ready(args)?;
            Ok(table.clear(&namespace)?)
        })
    }

    /// Removes expired entries everywhere; how many.
    fn cleanup_expired(&self, py: Python<'_>, now: &Bound<'_, PyAny>) -> PyResult<usize> {
        let args = bind_all([now]);
        self.run(py, move |table| {
            let [now] = ready(args)?;
            Ok(table.cleanup_expired(&now)?)
        })
    }

    /// Namespaces that hold at least one entry, in order of their oldest entry.
    fn namespaces<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let names = self.run(py, |table| Ok(table.namespaces()?))?;
        let names = names
            .into_iter()
            .map(|v| py_value(py, v))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, names)
    }

    /// Closes the connection; closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let mut slot = guard(self.table.lock(), "SqliteTable").map_err(Failure::Py)?;
            if let Some(table) = slot.take() {
                if let Err((table, e)) = table.close() {
                    // Still open, as after a failed `sqlite3.Connection.close`.
                    *slot = Some(table);
                    return Err(Failure::Sql(e));
                }
            }
            Ok(())
        })
        .map_err(|f| f.into_pyerr(py))
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", crate::VERSION)?;
    m.add_class::<PyTokenEstimator>()?;
    m.add_class::<PyBudgetLedger>()?;
    m.add_class::<PyMemoryTable>()?;
    m.add_class::<PySqliteTable>()?;
    Ok(())
}
