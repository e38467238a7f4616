"""Shared fixtures: both backends side by side, hypothesis profiles, the tiktoken oracle."""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

from memlane._backend import rust_core

settings.register_profile(
    "memlane",
    deadline=None,
    max_examples=int(os.environ.get("MEMLANE_HYPOTHESIS_EXAMPLES", "200")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("memlane")


def require_rust_core() -> ModuleType:
    """The extension, which differential tests need on both passes of the suite.

    A missing extension is a failure, not a skip: the whole point of those tests is to
    compare it with the twin. Only the pure-wheel smoke run opts out, explicitly.
    """
    core = rust_core()
    if core is None:
        if os.environ.get("MEMLANE_ALLOW_NO_EXTENSION") == "1":
            pytest.skip("pure-Python wheel smoke run: no extension by design")
        pytest.fail("memlane._core cannot be imported; build it (pip install -e .)")
    return core


@pytest.fixture(params=["rust", "python"])
def backend(request: pytest.FixtureRequest) -> str:
    """Runs a test once per implementation; the Rust run fails loudly if there is none."""
    if request.param == "rust":
        require_rust_core()
    return str(request.param)
