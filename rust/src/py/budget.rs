//! `BudgetLedger`: the conversation budget window, one mutex around the plain Rust ledger.

use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;

use super::guard;
use crate::budget::{self, BudgetError};

fn refused(e: BudgetError, what: impl std::fmt::Display) -> PyErr {
    // The twin's messages (`memlane/_pure/budget.py`).
    PyValueError::new_err(match e {
        BudgetError::NonPositiveMax => format!("max_tokens must be > 0, got {what}"),
        BudgetError::EvictTooMany { retained } => {
            format!("cannot evict {what} of {retained} turns")
        }
    })
}

/// Token counts of a conversation's retained turns and the window that fits the budget.
#[pyclass(frozen, module = "memlane._core")]
pub struct BudgetLedger {
    ledger: Mutex<budget::BudgetLedger>,
}

impl BudgetLedger {
    fn ledger(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, budget::BudgetLedger>> {
        guard(self.ledger.lock_py_attached(py), "BudgetLedger")
    }
}

#[pymethods]
impl BudgetLedger {
    #[new]
    fn new(max_tokens: u64) -> PyResult<Self> {
        let ledger = budget::BudgetLedger::new(max_tokens).map_err(|e| refused(e, max_tokens))?;
        Ok(Self {
            ledger: Mutex::new(ledger),
        })
    }

    #[getter]
    fn max_tokens(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.max_tokens())
    }

    #[getter]
    fn total(&self, py: Python<'_>) -> PyResult<u128> {
        Ok(self.ledger(py)?.total())
    }

    #[getter]
    fn window_tokens(&self, py: Python<'_>) -> PyResult<u128> {
        Ok(self.ledger(py)?.window_tokens())
    }

    #[getter]
    fn reserved(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.reserved())
    }

    #[getter]
    fn offset(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.offset())
    }

    #[getter]
    fn window_start(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.window_start())
    }

    #[getter]
    fn end(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.ledger(py)?.end())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.ledger(py)?.len())
    }

    fn push(&self, py: Python<'_>, tokens: u64) -> PyResult<()> {
        self.ledger(py)?.push(tokens);
        Ok(())
    }

    fn pop_front(&self, py: Python<'_>, n: usize) -> PyResult<u128> {
        self.ledger(py)?.pop_front(n).map_err(|e| refused(e, n))
    }

    fn set_summary_tokens(&self, py: Python<'_>, tokens: u64) -> PyResult<bool> {
        Ok(self.ledger(py)?.set_summary_tokens(tokens))
    }
}
