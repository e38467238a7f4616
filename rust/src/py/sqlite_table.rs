//! `SqliteTable`: the SQLite store, one connection behind a mutex, the GIL released around
//! every SQLite call.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyList, PyTuple};
use pyo3::Borrowed;

use super::entries::Kit;
use super::guard;
use crate::store::sqlite::{self, Row};

pyo3::import_exception!(sqlite3, DatabaseError);
pyo3::import_exception!(sqlite3, IntegrityError);
pyo3::import_exception!(sqlite3, OperationalError);

/// The exception the twin raises for the same failure, with SQLite's message: constraint
/// violations are `sqlite3.IntegrityError`, corrupt files and values of the wrong type
/// `sqlite3.DatabaseError`, anything else SQLite refuses (locked, unable to open, I/O, ...)
/// `sqlite3.OperationalError`. A directory that cannot be created is `OSError(errno,
/// strerror, directory)`, which Python turns into the errno's subclass (`FileExistsError`,
/// `PermissionError`, ...) as `Path.mkdir` does. Mapping them to memlane's errors is the
/// Python store's job, once for both implementations.
fn sqlite_error(e: sqlite::Error) -> PyErr {
    use rusqlite::ErrorCode;
    match e {
        sqlite::Error::Io { directory, source } => match source.raw_os_error() {
            Some(errno) => {
                let message = source.to_string();
                let strerror = message
                    .strip_suffix(&format!(" (os error {errno})"))
                    .unwrap_or(&message)
                    .to_owned();
                PyOSError::new_err((errno, strerror, directory.into_os_string()))
            }
            None => source.into(),
        },
        sqlite::Error::Sqlite(rusqlite::Error::SqliteFailure(failure, message)) => {
            let message = message.unwrap_or_else(|| failure.to_string());
            match failure.code {
                ErrorCode::ConstraintViolation => IntegrityError::new_err(message),
                ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                    DatabaseError::new_err(message)
                }
                _ => OperationalError::new_err(message),
            }
        }
        sqlite::Error::Sqlite(other) => DatabaseError::new_err(other.to_string()),
        sqlite::Error::NotAStore(message) => DatabaseError::new_err(message),
        sqlite::Error::Outdated => OperationalError::new_err(sqlite::OUTDATED),
    }
}

/// A row as `(entry_id, scope, key, content, metadata, created_at, expires_at, importance,
/// version)`.
///
/// Extracted by hand rather than derived: the derive turns a field's error into a
/// `TypeError`, while a `str` with a lone surrogate must raise `UnicodeEncodeError`, as the
/// twin's `sqlite3` does.
impl<'a, 'py> FromPyObject<'a, 'py> for Row {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let (entry_id, scope, key, content, metadata, created_at, expires_at, importance, version) =
            obj.extract()?;
        Ok(Self {
            entry_id,
            scope,
            key,
            content,
            metadata,
            created_at,
            expires_at,
            importance,
            version,
        })
    }
}

impl<'py> IntoPyObject<'py> for Row {
    type Target = PyTuple;
    type Output = Bound<'py, PyTuple>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.entry_id,
            self.scope,
            self.key,
            self.content,
            self.metadata,
            self.created_at,
            self.expires_at,
            self.importance,
            self.version,
        )
            .into_pyobject(py)
    }
}

/// Why a call failed, carried out of the GIL-free section.
enum Failure {
    Closed,
    Poisoned(PyErr),
    Sql(sqlite::Error),
}

impl From<sqlite::Error> for Failure {
    fn from(e: sqlite::Error) -> Self {
        Self::Sql(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Closed => PyValueError::new_err("SqliteTable is closed"),
            Failure::Poisoned(e) => e,
            Failure::Sql(e) => sqlite_error(e),
        }
    }
}

/// `kit.entries(rows)`, without reading the kit when there are no rows: the coherence check of a
/// turn reads the empty range after the log's head, and a miss needs no entry kit.
fn entries<'py>(
    kit: &Bound<'py, PyTuple>,
    rows: &sqlite::Packed,
) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    if rows.is_empty() {
        return Ok((PyList::empty(kit.py()), Vec::new()));
    }
    Kit::new(kit)?.entries(rows)
}

/// The SQLite store: one connection, every call one transaction.
#[pyclass(frozen, module = "memlane._core")]
pub struct SqliteTable {
    table: Mutex<Option<sqlite::SqliteTable>>,
}

impl SqliteTable {
    /// Runs `op` on the open table with the GIL released, so that threads overlap.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        op: impl FnOnce(&sqlite::SqliteTable) -> Result<R, sqlite::Error> + Send,
    ) -> PyResult<R> {
        Ok(py.detach(|| {
            let table = guard(self.table.lock(), "SqliteTable").map_err(Failure::Poisoned)?;
            Ok::<_, Failure>(op(table.as_ref().ok_or(Failure::Closed)?)?)
        })?)
    }
}

#[pymethods]
impl SqliteTable {
    #[new]
    #[pyo3(signature = (path, read_only = false))]
    fn new(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<Self> {
        let table = py
            .detach(|| {
                if read_only {
                    sqlite::SqliteTable::open_read_only(&path)
                } else {
                    sqlite::SqliteTable::open(&path)
                }
            })
            .map_err(sqlite_error)?;
        Ok(Self {
            table: Mutex::new(Some(table)),
        })
    }

    fn save(&self, py: Python<'_>, namespace: &str, row: Row) -> PyResult<()> {
        self.run(py, |table| table.save(namespace, &row))
    }

    fn save_many(&self, py: Python<'_>, namespace: &str, rows: Vec<Row>) -> PyResult<()> {
        self.run(py, |table| table.save_many(namespace, &rows))
    }

    fn save_if(
        &self,
        py: Python<'_>,
        namespace: &str,
        row: Row,
        expected_version: Option<i64>,
        now: f64,
    ) -> PyResult<bool> {
        self.run(py, |table| {
            table.save_if(namespace, &row, expected_version, now)
        })
    }

    fn save_if_many(
        &self,
        py: Python<'_>,
        ops: Vec<(String, Row, Option<i64>, f64)>,
    ) -> PyResult<Vec<bool>> {
        self.run(py, |table| table.save_if_many(&ops))
    }

    fn load_range(
        &self,
        py: Python<'_>,
        namespace: &str,
        start: &str,
        stop: &str,
        now: f64,
    ) -> PyResult<Vec<Row>> {
        self.run(py, |table| table.load_range(namespace, start, stop, now))
    }

    fn load(&self, py: Python<'_>, namespace: &str, now: f64) -> PyResult<Vec<Row>> {
        self.run(py, |table| table.load(namespace, now))
    }

    fn load_by_key(
        &self,
        py: Python<'_>,
        namespace: &str,
        key: &str,
        now: f64,
    ) -> PyResult<Option<Row>> {
        self.run(py, |table| table.load_by_key(namespace, key, now))
    }

    fn load_content_by_key(
        &self,
        py: Python<'_>,
        namespace: &str,
        key: &str,
        now: f64,
    ) -> PyResult<Option<(String, i64, String)>> {
        self.run(py, |table| table.load_content_by_key(namespace, key, now))
    }

    /// `load` as `(items, odd)`: `MemoryEntry` objects built from the rows (see
    /// `entries.rs`), except at the indices in `odd`, which hold rows for `row_to_entry`.
    fn load_entries<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        now: f64,
        kit: &Bound<'py, PyTuple>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let rows = self.run(py, |table| table.load_packed(namespace, now))?;
        entries(kit, &rows)
    }

    /// `load_range` as `(items, odd)`, as `load_entries`.
    fn load_range_entries<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        start: &str,
        stop: &str,
        now: f64,
        kit: &Bound<'py, PyTuple>,
    ) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
        let rows = self.run(py, |table| {
            table.load_range_packed(namespace, start, stop, now)
        })?;
        entries(kit, &rows)
    }

    /// `load_by_key` as a `MemoryEntry`, or the row (a tuple) for `row_to_entry`, or `None`.
    fn load_by_key_entry<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        key: &str,
        now: f64,
        kit: &Bound<'py, PyTuple>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.run(py, |table| table.load_by_key(namespace, key, now))? {
            Some(row) => Ok(Some(Kit::new(kit)?.entry_or_row(row)?)),
            None => Ok(None),
        }
    }

    fn search(
        &self,
        py: Python<'_>,
        namespaces: Vec<String>,
        terms: Vec<String>,
        limit: i64,
        min_importance: f64,
        now: f64,
    ) -> PyResult<Vec<(Row, f64)>> {
        self.run(py, |table| {
            table.search(&namespaces, &terms, limit, min_importance, now)
        })
    }

    fn search_texts(
        &self,
        py: Python<'_>,
        namespace: &str,
        entry_ids: Vec<String>,
        now: f64,
    ) -> PyResult<Vec<(String, String)>> {
        self.run(py, |table| table.search_texts(namespace, &entry_ids, now))
    }

    fn save_vectors(
        &self,
        py: Python<'_>,
        namespace: &str,
        model: &str,
        dims: i64,
        items: Vec<(String, String, String, PyBackedBytes)>,
        now: f64,
    ) -> PyResult<usize> {
        self.run(py, |table| {
            table.save_vectors(namespace, model, dims, &items, now)
        })
    }

    #[allow(clippy::too_many_arguments)] // the search's arguments, each typed
    fn vector_search(
        &self,
        py: Python<'_>,
        namespaces: Vec<String>,
        model: &str,
        query: Vec<f32>,
        limit: usize,
        min_importance: f64,
        now: f64,
    ) -> PyResult<Vec<(Row, f64)>> {
        self.run(py, |table| {
            table.vector_search(&namespaces, model, &query, limit, min_importance, now)
        })
    }

    fn missing_vectors(
        &self,
        py: Python<'_>,
        namespaces: Vec<String>,
        model: &str,
        limit: i64,
        now: f64,
    ) -> PyResult<Vec<Row>> {
        self.run(py, |table| {
            table.missing_vectors(&namespaces, model, limit, now)
        })
    }

    fn delete(&self, py: Python<'_>, namespace: &str, entry_id: &str) -> PyResult<bool> {
        self.run(py, |table| table.delete(namespace, entry_id))
    }

    fn delete_many(
        &self,
        py: Python<'_>,
        namespace: &str,
        entry_ids: Vec<String>,
    ) -> PyResult<Vec<String>> {
        self.run(py, |table| table.delete_many(namespace, &entry_ids))
    }

    fn clear(&self, py: Python<'_>, namespace: &str) -> PyResult<usize> {
        self.run(py, |table| table.clear(namespace))
    }

    fn cleanup_expired(&self, py: Python<'_>, now: f64) -> PyResult<usize> {
        self.run(py, |table| table.cleanup_expired(now))
    }

    fn namespaces(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.run(py, sqlite::SqliteTable::namespaces)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| {
            let mut slot = guard(self.table.lock(), "SqliteTable").map_err(Failure::Poisoned)?;
            if let Some(table) = slot.take() {
                if let Err((table, e)) = table.close() {
                    // Still open, as after a failed `sqlite3.Connection.close`.
                    *slot = Some(table);
                    return Err(Failure::Sql(e));
                }
            }
            Ok(())
        })?)
    }
}
