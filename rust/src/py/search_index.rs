//! `SearchIndex`: the inverted index behind `InMemoryStore.search`; payloads are any Python
//! objects.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::PyString;

use super::guard;
use super::memory_table::Key;
use crate::store::search;

type Index = search::SearchIndex<Py<PyAny>, Key>;

/// Searchable entries with term postings; terms arrive already split by Python's tokenizer.
#[pyclass(frozen, module = "memlane._core")]
pub struct SearchIndex {
    // Displaced payloads are handed back by the index and dropped only after this lock is
    // released: a payload's finaliser may run any Python code, this index included.
    index: Mutex<Index>,
}

impl SearchIndex {
    fn index(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Index>> {
        guard(self.index.lock_py_attached(py), "SearchIndex")
    }
}

#[pymethods]
impl SearchIndex {
    #[new]
    fn new() -> Self {
        Self {
            index: Mutex::new(Index::new()),
        }
    }

    #[allow(clippy::too_many_arguments)] // one argument per field of the document
    fn upsert(
        &self,
        py: Python<'_>,
        entry_id: Key,
        namespace: Key,
        terms: Vec<String>,
        importance: f64,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<()> {
        let replaced = self
            .index(py)?
            .upsert(entry_id, namespace, terms, importance, expires_at, payload);
        drop(replaced);
        Ok(())
    }

    /// `upsert` of `text`'s terms when the index splits it itself (an ASCII text: see
    /// `search::ascii_terms`); whether it did. `False` changes nothing: the caller splits the
    /// text and calls `upsert`.
    #[allow(clippy::too_many_arguments)] // upsert's, with the text for its terms
    fn upsert_text(
        &self,
        py: Python<'_>,
        entry_id: Key,
        namespace: Key,
        text: Bound<'_, PyString>,
        importance: f64,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<bool> {
        // A text with a lone surrogate has no UTF-8 form: not ASCII either, so the caller's.
        let Some(terms) = text.to_str().ok().and_then(search::ascii_terms) else {
            return Ok(false);
        };
        let replaced = self
            .index(py)?
            .upsert(entry_id, namespace, terms, importance, expires_at, payload);
        drop(replaced);
        Ok(true)
    }

    /// The terms `upsert_text` indexes `text` by, or `None` when it leaves `text` to the caller.
    #[staticmethod]
    fn ascii_terms(text: Bound<'_, PyString>) -> Option<Vec<String>> {
        text.to_str().ok().and_then(search::ascii_terms)
    }

    fn remove(&self, py: Python<'_>, entry_id: Key) -> PyResult<bool> {
        let removed = self.index(py)?.remove(&entry_id);
        Ok(removed.is_some())
    }

    fn clear(&self, py: Python<'_>, namespace: Key) -> PyResult<usize> {
        let removed = self.index(py)?.clear(&namespace);
        Ok(removed.len())
    }

    fn cleanup_expired(&self, py: Python<'_>, now: f64) -> PyResult<usize> {
        let removed = self.index(py)?.cleanup_expired(now);
        Ok(removed.len())
    }

    fn search(
        &self,
        py: Python<'_>,
        namespaces: Vec<Key>,
        terms: Vec<String>,
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> PyResult<Vec<(Py<PyAny>, f64)>> {
        let mut index = self.index(py)?;
        let index = &mut *index;
        // Scoring a common term reads a long posting list: other threads run meanwhile. The
        // payloads are only borrowed there; their references are taken once the GIL is back.
        let found = py.detach(|| index.search(&namespaces, &terms, limit, min_importance, now));
        Ok(found
            .into_iter()
            .map(|(payload, score)| (payload.clone_ref(py), score))
            .collect())
    }

    #[getter]
    fn visited(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.index(py)?.visited())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.index(py)?.len())
    }
}
