"""The Rust budget ledger against its pure-Python twin, and both against a brute-force oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from conftest import require_rust_core
from memlane._pure.budget import BudgetLedger as PyBudgetLedger

PROPERTIES = ("max_tokens", "total", "window_tokens", "reserved", "offset", "window_start", "end")


def outcome(call: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """The result of a call, or the class and message of what it raised."""
    try:
        return ("ok", call(*args))
    except Exception as exc:  # noqa: BLE001 - the point is to compare any failure
        return ("raised", type(exc), str(exc))


def state(ledger: Any) -> dict[str, int]:
    return {name: getattr(ledger, name) for name in PROPERTIES} | {"len": len(ledger)}


def longest_fitting_suffix(counts: list[int], limit: int) -> int:
    """Index into ``counts`` where the longest suffix summing to at most ``limit`` starts."""
    for start in range(len(counts) + 1):
        if sum(counts[start:]) <= limit:
            return start
    raise AssertionError("the empty suffix always fits")


class BudgetLedgerMachine(RuleBasedStateMachine):
    """Drives the Rust and Python ledgers with the same operations and a model of the turns."""

    def __init__(self) -> None:
        super().__init__()
        self.core = require_rust_core()
        self.retained: list[int] = []

    @initialize(max_tokens=st.integers(1, 40))
    def create(self, max_tokens: int) -> None:
        self.rust = self.core.BudgetLedger(max_tokens)
        self.py = PyBudgetLedger(max_tokens)

    @rule(tokens=st.integers(0, 25))
    def push(self, tokens: int) -> None:
        result = outcome(self.rust.push, tokens)
        assert result == outcome(self.py.push, tokens)
        if result[0] == "ok":
            self.retained.append(tokens)

    @rule(n=st.integers(0, 8))
    def pop_front(self, n: int) -> None:
        result = outcome(self.rust.pop_front, n)
        assert result == outcome(self.py.pop_front, n)
        if result[0] == "ok":
            assert result[1] == sum(self.retained[:n])
            del self.retained[:n]

    @rule(tokens=st.integers(0, 50))
    def set_summary_tokens(self, tokens: int) -> None:
        assert outcome(self.rust.set_summary_tokens, tokens) == outcome(
            self.py.set_summary_tokens, tokens
        )

    @invariant()
    def same_state(self) -> None:
        assert state(self.rust) == state(self.py)

    @invariant()
    def window_is_the_longest_fitting_suffix(self) -> None:
        ledger = self.rust
        limit = ledger.max_tokens - ledger.reserved
        start = longest_fitting_suffix(self.retained, limit)
        assert ledger.window_start == ledger.offset + start
        assert ledger.window_tokens == sum(self.retained[start:])
        assert ledger.window_tokens + ledger.reserved <= ledger.max_tokens
        assert ledger.total == sum(self.retained)
        assert ledger.end == ledger.offset + len(self.retained)


class TestLedgersAgreeOnAnyOperationSequence(BudgetLedgerMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust and Python ledgers agree after every operation, and the window is the oracle's."""


class TestLedgersAgreeOnOperationLists:
    """Replaying a generated list of operations leaves both ledgers in the same state at every step."""

    @given(
        max_tokens=st.integers(1, 100),
        ops=st.lists(
            st.tuples(
                st.sampled_from(["push", "pop_front", "set_summary_tokens"]), st.integers(0, 120)
            ),
            max_size=60,
        ),
    )
    def test_every_step_matches(self, max_tokens: int, ops: list[tuple[str, int]]) -> None:
        rust = require_rust_core().BudgetLedger(max_tokens)
        py = PyBudgetLedger(max_tokens)
        for name, arg in ops:
            assert outcome(getattr(rust, name), arg) == outcome(getattr(py, name), arg)
            assert state(rust) == state(py)


class TestRefusalsMatch:
    """The ledger's own rules refuse the same calls on both, with the same ValueError."""

    def test_zero_budget(self) -> None:
        core = require_rust_core()
        assert outcome(core.BudgetLedger, 0) == outcome(PyBudgetLedger, 0)
        assert outcome(PyBudgetLedger, 0)[1:] == (ValueError, "max_tokens must be > 0, got 0")

    @pytest.mark.parametrize(
        ("method", "arg"),
        [
            ("pop_front", 3),  # more than the two retained turns
            ("pop_front", 2**63),
            ("set_summary_tokens", 2**63),  # larger than any budget: left out, not an error
        ],
    )
    def test_same_outcome(self, method: str, arg: int) -> None:
        ledgers = [require_rust_core().BudgetLedger(10), PyBudgetLedger(10)]
        results = []
        for ledger in ledgers:
            ledger.push(3)
            ledger.push(4)
            results.append((outcome(getattr(ledger, method), arg), state(ledger)))
        assert results[0] == results[1]


class TestRustLedgerIsTyped:
    """The Rust ledger holds counts below 2**64 exactly; what its types cannot hold is refused."""

    def test_sums_of_huge_counts_do_not_overflow(self) -> None:
        rust = require_rust_core().BudgetLedger(2**64 - 1)
        py = PyBudgetLedger(2**64 - 1)
        for ledger in (rust, py):
            for _ in range(3):
                ledger.push(2**64 - 1)
        assert state(rust) == state(py)
        assert rust.total == 3 * (2**64 - 1)

    @pytest.mark.parametrize(
        ("arg", "error"),
        [(-1, OverflowError), (2**64, OverflowError), (1.5, TypeError), ("3", TypeError)],
    )
    def test_counts_outside_u64_are_refused_not_truncated(
        self, arg: object, error: type[Exception]
    ) -> None:
        ledger = require_rust_core().BudgetLedger(10)
        with pytest.raises(error):
            ledger.push(arg)
        assert len(ledger) == 0
