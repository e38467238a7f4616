//! The only place that knows about Python: typed PyO3 wrappers over the plain Rust modules.
//!
//! Arguments arrive typed (`&str`, `u64`, `f64`, rows as tuples) and PyO3 rejects anything
//! else. Validation, defaults, reprs, pickling, surrogate repair and the mapping to memlane's
//! errors live once, in Python (`memlane.tokens`, `memlane.store`); these classes only do the
//! hot work, releasing the GIL around counting batches and SQLite I/O.

use std::sync::{LockResult, MutexGuard};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

mod budget;
mod entries;
mod memory_table;
mod message_json;
mod search_index;
mod sqlite_table;
mod tokens;
mod vector_index;

/// The guard of a mutex, unless an earlier call panicked while holding it: the state behind it
/// may be half-updated, so it is refused rather than used.
fn guard<'a, T>(lock: LockResult<MutexGuard<'a, T>>, class: &str) -> PyResult<MutexGuard<'a, T>> {
    lock.map_err(|_| {
        PyRuntimeError::new_err(format!("{class} is unusable: an earlier call panicked"))
    })
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", crate::VERSION)?;
    m.add(
        "ENTRY_FIELDS",
        pyo3::types::PyTuple::new(m.py(), entries::FIELDS)?,
    )?;
    m.add_class::<tokens::Encoder>()?;
    m.add_class::<budget::BudgetLedger>()?;
    m.add_class::<memory_table::MemoryTable>()?;
    m.add_class::<search_index::SearchIndex>()?;
    m.add_class::<sqlite_table::SqliteTable>()?;
    m.add_class::<vector_index::VectorIndex>()?;
    m.add_function(wrap_pyfunction!(message_json::write_turn, m)?)?;
    Ok(())
}
