"""The Rust budget ledger against its pure-Python twin, and both against a brute-force oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memlane._pure.budget import BudgetLedger as PyBudgetLedger

from conftest import require_rust_core

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

    @rule(tokens=st.integers(-2, 25))
    def push(self, tokens: int) -> None:
        result = outcome(self.rust.push, tokens)
        assert result == outcome(self.py.push, tokens)
        if result[0] == "ok":
            self.retained.append(tokens)

    @rule(n=st.integers(-1, 8))
    def pop_front(self, n: int) -> None:
        result = outcome(self.rust.pop_front, n)
        assert result == outcome(self.py.pop_front, n)
        if result[0] == "ok":
            assert result[1] == sum(self.retained[:n])
            del self.retained[:n]

    @rule(tokens=st.integers(-1, 50))
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
                st.sampled_from(["push", "pop_front", "set_summary_tokens"]), st.integers(-3, 120)
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


class TestArgumentErrorsMatch:
    """Out-of-range arguments raise the same ValueError, with the same message, on both."""

    @pytest.mark.parametrize("max_tokens", [0, -1, -(2**70)])
    def test_non_positive_budget(self, max_tokens: int) -> None:
        core = require_rust_core()
        assert outcome(core.BudgetLedger, max_tokens) == outcome(PyBudgetLedger, max_tokens)

    @pytest.mark.parametrize(
        ("method", "arg"),
        [
            ("push", -1),
            ("push", -(2**70)),
            ("pop_front", -1),
            ("pop_front", 4),
            ("pop_front", 2**70),
            ("set_summary_tokens", -1),
            ("set_summary_tokens", 2**70),  # larger than any budget: left out, not an error
            ("push", True),  # bool is an int to both
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


class TestRustLedgerLimits:
    """The Rust ledger holds counts below 2**64 and rejects non-int counts with a TypeError."""

    def test_counts_beyond_u64_overflow(self) -> None:
        ledger = require_rust_core().BudgetLedger(10)
        with pytest.raises(
            OverflowError, match=r"^tokens must be < 2\*\*64, got 18446744073709551616$"
        ):
            ledger.push(2**64)
        with pytest.raises(OverflowError, match=r"^max_tokens must be < 2\*\*64"):
            require_rust_core().BudgetLedger(2**64)

    def test_sums_of_huge_counts_do_not_overflow(self) -> None:
        rust = require_rust_core().BudgetLedger(2**64 - 1)
        py = PyBudgetLedger(2**64 - 1)
        for ledger in (rust, py):
            for _ in range(3):
                ledger.push(2**64 - 1)
        assert state(rust) == state(py)
        assert rust.total == 3 * (2**64 - 1)

    @pytest.mark.parametrize("arg", [1.5, "3", None])
    def test_non_int_is_a_type_error(self, arg: object) -> None:
        ledger = require_rust_core().BudgetLedger(10)
        with pytest.raises(TypeError, match=f"^tokens must be int, not {type(arg).__name__}$"):
            ledger.push(arg)
