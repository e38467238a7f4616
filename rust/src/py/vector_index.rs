//! `VectorIndex`: the exact nearest-vector index behind `InMemoryStore.vector_search`;
//! payloads are any Python objects.

use std::sync::{Mutex, MutexGuard};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;

use super::guard;
use super::memory_table::Key;
use crate::vectors::{self, Meta};

type Index = vectors::VectorIndex<Py<PyAny>, Key>;

/// A vector as Python hands it over. A float32 buffer (`array("f")`, a numpy row) is copied
/// in one pass: a bulk ingest's 256 floats a vector, read one Python float at a time, cost
/// more than the index's whole insert.
#[derive(FromPyObject)]
enum Floats {
    Buffer(PyBuffer<f32>),
    Items(Vec<f32>),
}

impl Floats {
    fn into_vec(self, py: Python<'_>) -> PyResult<Vec<f32>> {
        match self {
            Floats::Buffer(buffer) => buffer.to_vec(py),
            Floats::Items(items) => Ok(items),
        }
    }
}

/// Entries' unit vectors grouped by (model, dimensions), scored by exact dot products.
#[pyclass(frozen, module = "memlane._core")]
pub struct VectorIndex {
    // Displaced payloads are dropped only after this lock is released: a payload's finaliser
    // may run any Python code, this index included.
    index: Mutex<Index>,
}

impl VectorIndex {
    fn index(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Index>> {
        guard(self.index.lock_py_attached(py), "VectorIndex")
    }
}

#[pymethods]
impl VectorIndex {
    #[new]
    fn new() -> Self {
        Self {
            index: Mutex::new(Index::new()),
        }
    }

    #[allow(clippy::too_many_arguments)] // one argument per field of the row
    fn upsert(
        &self,
        py: Python<'_>,
        entry_id: Key,
        namespace: Key,
        model: &str,
        digest: String,
        vector: Floats,
        importance: f64,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<()> {
        let vector = vector.into_vec(py)?;
        let meta = Meta {
            namespace,
            digest,
            importance,
            expires_at,
            payload,
        };
        let displaced = self.index(py)?.upsert(entry_id, model, &vector, meta);
        drop(displaced);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // one argument per field of the row
    fn refresh(
        &self,
        py: Python<'_>,
        entry_id: Key,
        namespace: Key,
        digest: String,
        importance: f64,
        expires_at: Option<f64>,
        payload: Py<PyAny>,
    ) -> PyResult<bool> {
        let meta = Meta {
            namespace,
            digest,
            importance,
            expires_at,
            payload,
        };
        let outcome = self.index(py)?.refresh(&entry_id, meta);
        Ok(matches!(outcome, Ok((_, true))))
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

    fn model_of(&self, py: Python<'_>, entry_id: Key) -> PyResult<Option<String>> {
        Ok(self.index(py)?.model_of(&entry_id).map(str::to_owned))
    }

    #[allow(clippy::too_many_arguments)] // the search's arguments, each typed
    fn search(
        &self,
        py: Python<'_>,
        namespaces: Vec<Key>,
        model: &str,
        query: Vec<f32>,
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> PyResult<Vec<(Py<PyAny>, f64)>> {
        let index = self.index(py)?;
        let index = &*index;
        // A scan of every row of the model: other threads run meanwhile. The payloads are
        // only borrowed there; their references are taken once the GIL is back.
        let found =
            py.detach(|| index.search(&namespaces, model, &query, limit, min_importance, now));
        Ok(found
            .into_iter()
            .map(|(payload, score)| (payload.clone_ref(py), score))
            .collect())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.index(py)?.len())
    }
}
