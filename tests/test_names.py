"""Renamed names: the new ones work, the old ones still work and warn; every error is memlane's."""

from __future__ import annotations

import pytest

from memlane.errors import ConditionError, MemlaneError
from memlane.strategies import conditions
from memlane.strategies.conditions import ConditionError as FromConditions


class TestEveryErrorIsMemlanes:
    """memlane's exceptions share one base and keep the built-in callers catch."""

    def test_condition_error(self) -> None:
        assert FromConditions is ConditionError
        assert issubclass(ConditionError, MemlaneError)
        assert issubclass(ConditionError, ValueError)
        with pytest.raises(MemlaneError, match="nope"):
            conditions.compile_condition("nope(")

    def test_demo_error(self) -> None:
        from memlane.demo import DemoError

        assert issubclass(DemoError, MemlaneError)
