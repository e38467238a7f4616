//! `MemoryTable`: entries per namespace in process memory; payloads are any Python objects.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyString};
use pyo3::Borrowed;

use super::guard;
use crate::store::memory;

/// A namespace, entry id or key: the exact `str`, held as its UTF-8 bytes.
///
/// A lone surrogate is legal in a Python `str` and the public stores accept it, so such a
/// string is kept byte-exact (UTF-8 with `surrogatepass`) instead of being refused: it makes
/// a key of its own, as in a dict.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Box<[u8]>);

impl<'a, 'py> FromPyObject<'a, 'py> for Key {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let text = obj.cast::<PyString>()?;
        if let Ok(utf8) = text.to_str() {
            return Ok(Self(utf8.as_bytes().into()));
        }
        let raw = text.call_method1("encode", ("utf-8", "surrogatepass"))?;
        Ok(Self(raw.cast::<PyBytes>()?.as_bytes().into()))
    }
}

impl<'py> IntoPyObject<'py> for &Key {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => Ok(PyString::new(py, text).into_any()),
            Err(_) => PyBytes::new(py, &self.0).call_method1("decode", ("utf-8", "surrogatepass")),
        }
    }
}

type Table = memory::MemoryTable<Py<PyAny>, Key>;

/// Entries per namespace with a key index; payloads are kept as the objects saved.
#[pyclass(frozen, module = "memlane._core")]
pub struct MemoryTable {
    // Displaced payloads are handed back by the table and dropped only after this lock is
    // released: a payload's finaliser may run any Python code, this table included.
    table: Mutex<Table>,
}

impl MemoryTable {
    fn table(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Table>> {
        guard(self.table.lock_py_attached(py), "MemoryTable")
    }
}

#[pymethods]
impl MemoryTable {
    #[new]
    fn new() -> Self {
        Self {
            table: Mutex::new(Table::new()),
        }
    }

    fn save(
        &self,
        py: Python<'_>,
        namespace: Key,
        entry_id: Key,
        key: Option<Key>,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<()> {
        let displaced = self
            .table(py)?
            .save(namespace, entry_id, key, expires_at, payload);
        drop(displaced);
        Ok(())
    }

    fn load(&self, py: Python<'_>, namespace: Key, now: f64) -> PyResult<Vec<Py<PyAny>>> {
        let table = self.table(py)?;
        Ok(table
            .load(&namespace, now)
            .map(|p| p.clone_ref(py))
            .collect())
    }

    fn load_by_key(
        &self,
        py: Python<'_>,
        namespace: Key,
        key: Key,
        now: f64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let table = self.table(py)?;
        Ok(table
            .load_by_key(&namespace, &key, now)
            .map(|p| p.clone_ref(py)))
    }

    fn load_by_id(
        &self,
        py: Python<'_>,
        namespace: Key,
        entry_id: Key,
        now: f64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let table = self.table(py)?;
        Ok(table
            .load_by_id(&namespace, &entry_id, now)
            .map(|p| p.clone_ref(py)))
    }

    fn delete(&self, py: Python<'_>, namespace: Key, entry_id: Key) -> PyResult<bool> {
        let removed = self.table(py)?.delete(&namespace, &entry_id);
        Ok(removed.is_some())
    }

    fn clear(&self, py: Python<'_>, namespace: Key) -> PyResult<usize> {
        let removed = self.table(py)?.clear(&namespace);
        Ok(removed.len())
    }

    fn cleanup_expired(&self, py: Python<'_>, now: f64) -> PyResult<usize> {
        let removed = self.table(py)?.cleanup_expired(now);
        Ok(removed.len())
    }

    fn namespaces<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let names: Vec<Key> = self.table(py)?.namespaces().cloned().collect();
        names.iter().map(|name| name.into_pyobject(py)).collect()
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.table(py)?.len())
    }
}
