"""Shared fixtures: both backends side by side, hypothesis profiles, the tiktoken oracle."""

from __future__ import annotations

import asyncio
import inspect
import os
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import db_servers
from memlane import _backend
from memlane._backend import rust_core

settings.register_profile(
    "memlane",
    deadline=None,
    max_examples=int(os.environ.get("MEMLANE_HYPOTHESIS_EXAMPLES", "200")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("memlane")

# ================================================================= the two passes of the suite
# scripts/test.sh runs pytest twice: on the Rust path, then with MEMLANE_PURE_PYTHON=1. A test
# that takes ``impl`` selects each implementation itself, and a test marked ``twins`` builds
# both side by side, so either checks the same thing whatever the process chose; the Rust pass
# runs it, and the pure pass (given IMPL_TESTS_RAN) leaves it out. Everything else runs in both
# passes, each time on the process's backend.

IMPL_TESTS_RAN = "--impl-tests-ran"
"""Option of the pure pass: the ``impl`` and ``twins`` tests ran on both in the Rust pass."""

ONE_WORKER_FILES = frozenset({"test_wheels.py", "test_server_browser.py"})
"""Files whose session- or module-scoped fixture is costly (wheels built with cargo in the one
target dir, Chromium launched): under pytest-xdist each worker is a session of its own, so
each of these files runs whole on one worker."""

_LEFT_OUT = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds :data:`IMPL_TESTS_RAN`."""
    parser.addoption(
        IMPL_TESTS_RAN,
        action="store_true",
        help=(
            "with MEMLANE_PURE_PYTHON=1: leave out the tests that take the impl fixture or are "
            "marked twins, which the Rust pass ran on both implementations (scripts/test.sh)"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    """Refuses :data:`IMPL_TESTS_RAN` where nothing else would have run the ``impl`` tests.

    On the Rust path the option would drop them from the only pass that runs them; without
    the extension, no Rust pass could have run their Rust half.
    """
    config.stash[_LEFT_OUT] = 0
    if not config.getoption(IMPL_TESTS_RAN):
        return
    if _backend.BACKEND != "python":
        raise pytest.UsageError(f"{IMPL_TESTS_RAN} is for the MEMLANE_PURE_PYTHON=1 pass only")
    if rust_core() is None:
        raise pytest.UsageError(
            f"{IMPL_TESTS_RAN}: memlane._core cannot be imported, so no Rust pass ran the impl "
            "tests; build it (pip install -e .) or drop the option"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n`` (``--dist load``): each test is its own unit, but each of
    :data:`ONE_WORKER_FILES` is one unit, run whole by one worker.

    A scheduler of our own rather than ``xdist_group`` marks with ``--dist loadgroup``:
    xdist 3.8 groups by rewriting node ids, which pytest 9.2 ignores (pytest-xdist#1386), so
    the groups are silently lost.
    """
    if config.getoption("dist") != "load":
        return None  # an explicit --dist keeps its own meaning
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]  # no py.typed

    def unit(nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return path if path.rsplit("/", 1)[-1] in ONE_WORKER_FILES else nodeid

    scheduler = LoadScopeScheduling(config, log)
    # _split_scope is loadscope's one hook: --dist loadfile is the same class overriding it.
    scheduler._split_scope = unit
    return scheduler


def _runs_both_twins(item: pytest.Item) -> bool:
    """Whether the test checks both implementations whatever the process's backend: it takes
    ``impl``, or it is marked ``twins`` (it builds the Rust class and the twin itself)."""
    return (
        "impl" in getattr(item, "fixturenames", ()) or item.get_closest_marker("twins") is not None
    )


@pytest.hookimpl(trylast=True)  # after -k and -m: count only what the selection kept
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves out the ``impl`` and ``twins`` tests under :data:`IMPL_TESTS_RAN`."""
    if config.getoption(IMPL_TESTS_RAN):
        ran = [item for item in items if _runs_both_twins(item)]
        if ran:
            config.hook.pytest_deselected(items=ran)
            left_out = set(map(id, ran))
            items[:] = [item for item in items if id(item) not in left_out]
        config.stash[_LEFT_OUT] = len(ran)
        workeroutput = getattr(config, "workeroutput", None)  # set on an xdist worker
        if workeroutput is not None:
            workeroutput["impl_tests_left_out"] = len(ran)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: what the workers left out (each collects the whole selection)."""
    left_out = getattr(node, "workeroutput", {}).get("impl_tests_left_out", 0)
    node.config.stash[_LEFT_OUT] = max(node.config.stash[_LEFT_OUT], left_out)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A pure pass whose whole selection takes ``impl`` ran nothing by design, not by mistake.

    The Rust pass ran those tests (and fails by itself if the selection is empty there).
    """
    left_out = session.config.stash[_LEFT_OUT]
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and left_out:
        session.exitstatus = pytest.ExitCode.OK


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Says how many tests the pure pass left to the Rust pass."""
    if terminalreporter.config.getoption(IMPL_TESTS_RAN):
        left_out = terminalreporter.config.stash[_LEFT_OUT]
        terminalreporter.write_line(
            f"{IMPL_TESTS_RAN}: {left_out} tests taking impl or marked twins left out; the Rust "
            "pass ran them on both implementations"
        )


SYNC_METHODS = [
    "save",
    "save_many",
    "load",
    "load_by_key",
    "delete",
    "clear",
    "namespaces",
    "cleanup_expired",
    "initialize",
    "close",
]
"""Every store's sync methods; each has an ``async_`` twin (the one method set of all stores)."""

CONDITIONAL_METHODS = ["save_if", "load_range"]
"""What every memlane store adds for hosts sharing it (:class:`memlane.stores.ConditionalStore`)."""


async def drop_server_place(kind: str, url: str, name: str) -> None:
    """Drops what a test made on a shared server: PostgreSQL schema or MongoDB collection ``name``."""
    if kind == "postgres":
        import asyncpg

        con = await asyncpg.connect(url)
        try:
            await con.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await con.close()
        return
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(url)
    try:
        await client["memlane"].drop_collection(name)
    finally:
        await client.close()


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


@pytest.fixture(scope="session", params=["rust", "python"])
def impl(request: pytest.FixtureRequest) -> _backend.Implementation:
    """Each implementation in turn, for the whole session (multidict's ``impl`` fixture).

    A test that asks for it builds its stores, ledgers and conversations with that
    implementation (the autouse fixture below selects it around the test); the Rust run fails
    loudly if there is no extension.
    """
    if request.param == "rust":
        require_rust_core()
    return _backend.implementation(request.param)


@pytest.fixture
def backend(impl: _backend.Implementation) -> str:
    """The name of the test's implementation (``impl``), for tests that pick twins by name."""
    return impl.name


@pytest.fixture(autouse=True)
def _select_impl(request: pytest.FixtureRequest) -> Iterator[None]:
    """Selects the test's ``impl`` (if it asks for one) only for the duration of that test."""
    if "impl" not in request.fixturenames:
        yield
        return
    chosen: _backend.Implementation = request.getfixturevalue("impl")
    with _backend.use(chosen.name):
        yield


@pytest.fixture(autouse=True)
def _close_the_loop_run_sync_leaves(request: pytest.FixtureRequest) -> Iterator[None]:
    """pydantic-ai's run_sync leaves its event loop open for reuse; a sync test closes it.

    Otherwise the unclosed loop's ResourceWarning fails a later, unrelated test under
    ``filterwarnings = error``.
    """
    yield
    if inspect.iscoroutinefunction(request.function):
        return
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()
    except RuntimeError:  # none left
        return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)


# ============================================================================ database servers
# Session-scoped real servers for the network-store tests (test_database_stores.py,
# test_config.py, test_multiprocess.py). Started on loopback on first use and stopped at the
# end of the run; MEMLANE_TEST_POSTGRES_URL / MEMLANE_TEST_MONGODB_URL select external
# servers instead. A server that cannot start fails the tests that need it, with the reason:
# these tests never skip.


def _start_server(kind: str, start: object, workdir: object) -> db_servers.Server:
    try:
        return start(workdir)  # type: ignore[operator, no-any-return]
    except db_servers.ServerError as exc:
        pytest.fail(
            f"the {kind} test server could not start (run scripts/install_servers.sh, or set "
            f"{db_servers.POSTGRES_URL_ENV if kind == 'PostgreSQL' else db_servers.MONGODB_URL_ENV}"
            f"):\n{exc}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def postgres_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[db_servers.Server]:
    """A PostgreSQL server for the whole run (started here unless one is given)."""
    server = _start_server("PostgreSQL", db_servers.start_postgres, tmp_path_factory.mktemp("pg"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongodb_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[db_servers.Server]:
    """A MongoDB-wire server (FerretDB unless one is given) for the whole run."""
    server = _start_server("MongoDB", db_servers.start_ferretdb, tmp_path_factory.mktemp("mongo"))
    yield server
    server.stop()
