"""Workload 7: long-term facts, memlane's LongTermMemory beside LangGraph's BaseStore.

Per backend kind and size (1,000 and 100,000 facts in one user's scope, plus 100 global
facts; ``--quick``: 500 and 2,000), interleaved in one run:

* ``remember``: ``remember(key, value, scope="user", scope_id=...)`` of a new key (status
  ``created``) against LangGraph's ``put(namespace, key, value)`` of a new key. The keys
  written in a repetition are deleted after it, off the clock, so the size stays put.
* ``get_fact`` hit: ``get_fact(key, user_id=...)`` of a key in the user scope against
  ``get((..., user), key)``.
* ``get_fact`` fall-through: a key held only by the global scope, asked with ``user_id``:
  memlane looks in the user scope, then in global; LangGraph does the same with two ``get``.
* ``recall(query="local time", user_id=...)`` (the fuzzy rule, facts seen from the user)
  against ``search`` of the user's namespace and the global one with
  ``filter={"topic": "local time"}`` (one fact in a hundred has it, and its key and value are
  what the fuzzy query matches). LangGraph's ``search(query=...)`` ranks only with an
  embedding index; without one the query is ignored (a diagnostic row shows what it returns).

Backends side by side: memlane's InMemoryStore (Rust path and pure-Python twin) against
LangGraph's ``InMemoryStore``; memlane's SQLiteStore (both paths) against LangGraph's
``SqliteStore`` (``langgraph-checkpoint-sqlite``) on a file in a temporary directory, as it
comes (``sqlite3.connect``'s defaults, autocommit) and with memlane's settings (WAL,
``synchronous=NORMAL``), the like-for-like reference. LangGraph is a reference here, not a
target: memlane's remember and get_fact are judged against the floor of the same durability
in workload 12.

Facts are filled with ``remember`` off the clock: LongTermMemory has no bulk path (the store's
``save_many`` writes entries, not facts); LangGraph's stores are filled with ``batch`` calls
of ``PutOp``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benches.bench_stores import PY_MEM, PY_SQL, RUST_MEM, RUST_SQL
from benches.harness import (
    Config,
    Row,
    Unavailable,
    WorkloadResult,
    _version,
    filesystem_of,
    fill_rows,
    find,
    fmt_ratio,
    fmt_time,
    implementation,
    interleave,
    judge,
    memlane_backend,
    profile,
)

LG_MEM = "LangGraph InMemoryStore"
LG_SQL = "LangGraph SqliteStore (defaults)"
LG_SQL_WAL = "LangGraph SqliteStore (WAL, synchronous=NORMAL)"
MEMORY_GROUP = [RUST_MEM, PY_MEM, LG_MEM]
SQLITE_GROUP = [RUST_SQL, PY_SQL, LG_SQL_WAL, LG_SQL]
MEMLANE = {RUST_MEM, PY_MEM, RUST_SQL, PY_SQL}
USER = "bench-user"
GLOBAL_FACTS = 100
FILL_CHUNK = 1_000
LARGE_RECALL_REPS = 3
QUERY = "local time"
SEARCH = "daylight saving"
# The facts about SEARCH: the same three at every size, so the search rows measure how an
# index's lookup grows with the facts held, not how many more facts match.
SEARCH_FACTS = (123, 456, 789)
TOPICS = ["weather", "music", "travel", "food", "work", "family", "sport", "books", "films"]
LIMIT = 10
OPS = ["remember", "get", "fallthrough", "recall", "search", "search_query"]
LABELS = {
    "remember": "remember a new fact (user scope) vs put",
    "get": "get_fact hit in the user scope vs get",
    "fallthrough": "get_fact falling through user → global vs two gets",
    "recall": f"recall(query={QUERY!r}) vs search with a filter",
    "search": f"search({SEARCH!r}), ranked (memlane only)",
    "search_query": f"LangGraph search(query={QUERY!r}) without an embedding index (diagnostic)",
}


def _fact(i: int) -> tuple[str, dict[str, Any], float]:
    """The ``i``-th user fact: key, value, confidence. One in a hundred is about local time."""
    if i % 100 == 7:
        return f"fact_{i:06d}_local_time", {"note": f"note {i}", "topic": QUERY}, 0.9
    if i in SEARCH_FACTS:
        return f"fact_{i:06d}", {"note": f"note {i}", "topic": SEARCH}, 0.7
    return f"fact_{i:06d}", {"note": f"note {i}", "topic": TOPICS[i % len(TOPICS)]}, 0.6


def _global(i: int) -> tuple[str, dict[str, Any]]:
    return f"global_{i:04d}", {"note": f"global note {i}", "topic": "world"}


def _matches(key: str, value: Any) -> bool:
    from memlane.longterm.fuzzy import fuzzy_match
    from memlane.longterm.model import render_value

    return fuzzy_match(QUERY, f"{key} {render_value(value)}")


class Contender:
    """One store holding ``n`` user facts and the global ones, and the operations on it."""

    def __init__(self, name: str, tmp: str, n: int) -> None:
        self.name, self.n = name, n
        self.created: list[str] = []
        self.memlane = name in MEMLANE
        self.rust = "Rust" in name
        self._conn: sqlite3.Connection | None = None
        if self.memlane:
            self._memlane_store(tmp)
        else:
            self._langgraph_store(tmp)

    # ------------------------------------------------------------------ set-up

    def _memlane_store(self, tmp: str) -> None:
        from memlane.longterm import LongTermMemory
        from memlane.store import InMemoryStore, SQLiteStore

        with memlane_backend(self.rust):
            store = (
                InMemoryStore()
                if "InMemory" in self.name
                else SQLiteStore(os.path.join(tmp, f"memlane-{time.monotonic_ns()}.sqlite3"))
            )
        got = implementation(store._table)
        if got != ("rust" if self.rust else "python"):
            raise RuntimeError(f"{self.name}: backend switch failed, got a {got} table")
        self.store: Any = store
        self.lt = LongTermMemory(store)
        remember = self.lt.remember
        for i in range(self.n):
            key, value, confidence = _fact(i)
            remember(key, value, scope="user", scope_id=USER, confidence=confidence)
        for i in range(GLOBAL_FACTS):
            remember(*_global(i))

    def _langgraph_store(self, tmp: str) -> None:
        try:
            from langgraph.store.base import PutOp
            from langgraph.store.memory import InMemoryStore
        except ImportError as exc:
            raise Unavailable(
                "langgraph is not installed (pip install -r benches/requirements.txt)"
            ) from exc
        if self.name == LG_MEM:
            self.store = InMemoryStore()
        else:
            try:
                from langgraph.store.sqlite import SqliteStore
            except ImportError as exc:
                raise Unavailable(
                    "langgraph-checkpoint-sqlite is not installed "
                    "(pip install -r benches/requirements.txt)"
                ) from exc
            path = os.path.join(tmp, f"langgraph-{time.monotonic_ns()}.sqlite3")
            # What SqliteStore.from_conn_string opens; a context manager would close it at once.
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            if self.name == LG_SQL_WAL:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
            self.store = SqliteStore(self._conn)
            self.store.setup()
        ops = [PutOp(self.user_ns, *_fact(i)[:2]) for i in range(self.n)]
        ops += [PutOp(self.global_ns, *_global(i)) for i in range(GLOBAL_FACTS)]
        # SqliteStore turns a batch's puts into one INSERT with 5 variables per item: one
        # batch of 100,000 fails with "too many SQL variables", so it is filled in chunks.
        for start in range(0, len(ops), FILL_CHUNK):
            self.store.batch(ops[start : start + FILL_CHUNK])

    user_ns = ("facts", "user", USER)
    global_ns = ("facts", "global")

    # ------------------------------------------------------------------ operations

    def ops(self, op: str, count: int, rng: random.Random, rep: int) -> Callable[[], int]:
        """A timed callable doing ``count`` operations; returns what it found, to keep it live."""
        if op == "remember":
            keys = [f"new_{rep}_{len(self.created) + i}" for i in range(count)]
            self.created += keys
            values = [{"note": f"new {k}", "topic": "weather"} for k in keys]
            pairs = list(zip(keys, values, strict=True))
            if self.memlane:
                remember = self.lt.remember
                return lambda: sum(
                    remember(k, v, scope="user", scope_id=USER).status == "created"
                    for k, v in pairs
                )
            put, ns = self.store.put, self.user_ns

            def put_all() -> int:
                for k, v in pairs:
                    put(ns, k, v)
                return len(pairs)

            return put_all
        if op in ("get", "fallthrough"):
            if op == "get":
                keys = [_fact(rng.randrange(self.n))[0] for _ in range(count)]
            else:
                keys = [_global(rng.randrange(GLOBAL_FACTS))[0] for _ in range(count)]
            if self.memlane:
                get_fact = self.lt.get_fact
                return lambda: sum(get_fact(k, user_id=USER) is not None for k in keys)
            get, user_ns, global_ns = self.store.get, self.user_ns, self.global_ns

            def get_all() -> int:
                found = 0
                for k in keys:
                    item = get(user_ns, k)
                    if item is None:
                        item = get(global_ns, k)
                    found += item is not None
                return found

            return get_all
        if op == "recall":
            if self.memlane:
                recall = self.lt.recall
                return lambda: sum(
                    len(recall(query=QUERY, user_id=USER, limit=LIMIT)) for _ in range(count)
                )
            search, user_ns, global_ns = self.store.search, self.user_ns, self.global_ns
            where = {"topic": QUERY}

            def search_all() -> int:
                found = 0
                for _ in range(count):
                    items = search(user_ns, filter=where, limit=LIMIT)
                    if len(items) < LIMIT:
                        items += search(global_ns, filter=where, limit=LIMIT - len(items))
                    found += len(items)
                return found

            return search_all
        if op == "search":
            if not self.memlane:
                raise Unavailable("LangGraph's BaseStore ranks only with an embedding index")
            search = self.lt.search
            return lambda: sum(
                len(search(SEARCH, user_id=USER, memory_type="facts", limit=LIMIT))
                for _ in range(count)
            )
        if op == "search_query":
            if self.memlane:
                raise Unavailable("LangGraph only")
            search, user_ns = self.store.search, self.user_ns
            return lambda: sum(len(search(user_ns, query=QUERY, limit=LIMIT)) for _ in range(count))
        raise ValueError(op)

    def forget_created(self) -> None:
        """Deletes the keys ``remember`` wrote, off the clock, so the size stays ``n``."""
        for key in self.created:
            if self.memlane:
                self.lt.forget(key, scope="user", scope_id=USER)
            else:
                self.store.delete(self.user_ns, key)
        self.created = []

    def answers(self, op: str) -> tuple[int, int]:
        """For the search rows: results returned, and how many match the query."""
        if self.memlane:
            facts = self.lt.recall(query=QUERY, user_id=USER, limit=LIMIT)
            return len(facts), sum(_matches(f.key, f.value) for f in facts)
        if op == "recall":
            items = self.store.search(self.user_ns, filter={"topic": QUERY}, limit=LIMIT)
        else:
            items = self.store.search(self.user_ns, query=QUERY, limit=LIMIT)
        return len(items), sum(_matches(i.key, i.value) for i in items)

    def close(self) -> None:
        close = getattr(self.store, "close", None) if self.memlane else None
        if close is not None:
            close()
        if self._conn is not None:
            self._conn.close()


def _calibrate(c: Contender, op: str, budget: float, max_ops: int) -> int:
    """How many operations fit in ``budget`` seconds: doubling probes until a quarter is used."""
    k = 1
    while True:
        fn = c.ops(op, k, random.Random(k), -1)
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        c.forget_created()
        if elapsed >= budget / 4 or k >= max_ops:
            return max(1, min(max_ops, int(k * budget / max(elapsed, 1e-9))))
        k *= 2


def case_name(op: str, n: int, kind: str) -> str:
    return f"{LABELS[op]}, {n:,} facts, {kind}"


def _measure_size(
    result: WorkloadResult,
    cfg: Config,
    n: int,
    large: bool,
    tmp: str,
    log: Callable[[str], None],
) -> dict[str, Contender]:
    budget = 0.03 if cfg.quick else 0.15
    max_ops = 2_000 if cfg.quick else 5_000
    contenders: dict[str, Contender] = {}
    unavailable: dict[str, str] = {}
    for name in MEMORY_GROUP + SQLITE_GROUP:
        log(f"  filling {name} with {n:,} facts")
        start = time.perf_counter()
        try:
            contenders[name] = Contender(name, tmp, n)
        except Unavailable as exc:
            unavailable[name] = f"unavailable: {exc}"
        except Exception as exc:  # noqa: BLE001 - one broken store must not hide the others
            unavailable[name] = f"error: {type(exc).__name__}: {exc}"
        log(f"    ({time.perf_counter() - start:.1f} s)")
    counts: dict[tuple[str, str], int] = {}
    for op in OPS:
        for kind, group, ref in (
            ("in memory", MEMORY_GROUP, RUST_MEM),
            ("SQLite", SQLITE_GROUP, RUST_SQL),
        ):
            names = [
                nm
                for nm in group
                if (op != "search_query" or nm not in MEMLANE) and (op != "search" or nm in MEMLANE)
            ]
            case = case_name(op, n, kind)
            log(f"  {case}")

            def rep_fn(name: str, op: str = op) -> Callable[[int], float]:
                def rep(r: int) -> float:
                    if name in unavailable:
                        raise Unavailable(unavailable[name].removeprefix("unavailable: "))
                    c = contenders[name]
                    if (name, op) not in counts:
                        counts[name, op] = _calibrate(c, op, budget, max_ops)
                    count = counts[name, op]
                    fn = c.ops(op, count, random.Random(cfg.seed * 31 + r), r)
                    gc.collect()
                    start = time.perf_counter()
                    fn()
                    elapsed = time.perf_counter() - start
                    c.forget_created()
                    return elapsed / count

                return rep

            # A recall over the large size takes seconds per call on memlane's scan: fewer
            # repetitions keep the full run within its time.
            reps = min(cfg.reps, LARGE_RECALL_REPS) if large and op == "recall" else cfg.reps
            samples, failed = interleave(reps, [(nm, rep_fn(nm)) for nm in names], log=log)
            failed.update({k: v for k, v in unavailable.items() if k in names})
            fill_rows(
                result.rows,
                samples,
                failed,
                case,
                "op",
                ref if op != "search_query" else names[0],
                throughput=_ops_per_second,
            )
            _check(result, contenders, op, case)
    return contenders


def _ops_per_second(seconds: float) -> str:
    return f"{1 / seconds:,.0f} ops/s" if seconds < 0.1 else f"{1 / seconds:.2g} ops/s"


def _check(result: WorkloadResult, contenders: dict[str, Contender], op: str, case: str) -> None:
    for row in result.rows:
        c = contenders.get(row.contender)
        if row.case != case or row.status != "ok" or c is None:
            continue
        if op == "search":
            hits = c.lt.search(SEARCH, user_id=USER, memory_type="facts", limit=LIMIT)
            about = sum(f.value.get("topic") == SEARCH for f in hits)
            row.check = f"{len(hits)} results, {about}/{len(SEARCH_FACTS)} facts about {SEARCH!r}"
        elif op in ("recall", "search_query"):
            got, matching = c.answers(op)
            row.check = f"{got} results, {matching} matching {QUERY!r}"
            if op == "search_query":
                row.check += " (the query is ignored without an index)"
        elif op in ("get", "fallthrough"):
            found = c.ops(op, 200, random.Random(5), 0)()
            row.check = f"{found}/200 found"
        else:
            row.check = "every key created" if c.memlane else "put returns None"


def _targets(result: WorkloadResult, sizes: tuple[int, int]) -> None:
    small, large = sizes
    for kind, ours, theirs in (
        ("in memory", RUST_MEM, LG_MEM),
        ("SQLite", RUST_SQL, LG_SQL_WAL),
    ):
        ratios: dict[str, float] = {}
        rows: list[Row | None] = []
        for op in ("remember", "get", "fallthrough"):
            for n in sizes:
                case = case_name(op, n, kind)
                row = find(result.rows, case, theirs)
                rows.append(row)
                if row and row.ratio:
                    ratios[f"{op} {n:,}"] = row.ratio
        if ratios:
            # A reference, not a target: issue 28 judges a conditional, history-keeping write
            # against the floor of the same durability (workload 12), not against a dict.
            result.notes.append(
                f"{kind}: {theirs} as a reference beside memlane ({ours}) — "
                + ", ".join(f"{k} {fmt_ratio(v)}" for k, v in ratios.items())
                + " of memlane's time (above 1x: memlane is faster). memlane's remember and "
                "get_fact are judged against the floor of the same durability in workload 12."
            )
    for kind, name in (("in memory", RUST_MEM), ("SQLite", RUST_SQL)):
        s = find(result.rows, case_name("search", small, kind), name)
        big = find(result.rows, case_name("search", large, kind), name)
        value = big.median_s / s.median_s if s and big and s.median_s and big.median_s else None
        if big and value is not None:
            big.check += f"; {value:.1f}x the {small:,}-fact time"
        judge(
            result,
            f"{name}: search at {large:,} facts within 3x of its {small:,}-fact time "
            "(an index, not a scan)",
            value,
            3,
            at_least=False,
            rows=[big],
            detail=(
                f"{fmt_time(s.median_s)} → {fmt_time(big.median_s)}"
                if s and big and value is not None
                else ""
            ),
        )


def _profile_misses(
    result: WorkloadResult, contenders: dict[str, Contender], n: int, log: Callable[[str], None]
) -> None:
    """cProfile of memlane's side of each missed target, on the large size."""
    for target in result.targets:
        if target.met is not False:
            continue
        if "PostgreSQL" in target.text:
            continue
        if "search" in target.text:
            name = target.text.split(":")[0]
            jobs = [(name, "search", 50)]
        else:
            name = RUST_MEM if target.text.startswith("in memory") else RUST_SQL
            jobs = [(name, "remember", 500), (name, "get", 2_000)]
        texts = []
        for nm, op, count in jobs:
            c = contenders.get(nm)
            if c is None:
                continue
            log(f"  profiling {count:,} {op} on {nm} at {n:,} facts")
            fn = c.ops(op, count, random.Random(1), -2)
            text = profile(fn, top=12)
            c.forget_created()
            texts.append(f"cProfile of {count:,} {op} on {nm}, {n:,} facts:\n{text}")
        if texts:
            result.profiles[target.text] = "\n\n".join(texts)


PG = "PostgreSQLStore"


def _postgres_search(
    result: WorkloadResult, cfg: Config, sizes: tuple[int, int], log: Callable[[str], None]
) -> None:
    """search on PostgreSQLStore at both sizes, its facts written with save_many off the clock.

    remember does one read and one conditional write per fact: filling 100,000 that way takes
    minutes on a server, so the facts are built as remember builds them and written in batches.
    """
    from benches.bench_stores import _Servers
    from memlane.longterm import Fact, FactScope, LongTermMemory
    from memlane.longterm.fact_plans import fact_entry
    from memlane.longterm.fact_scopes import fact_namespace

    servers = _Servers(start=not cfg.quick)
    medians: dict[int, float] = {}
    rows: list[Row | None] = []
    try:
        try:
            url = servers.url("postgres")
        except Unavailable as exc:
            judge(
                result,
                f"{PG}: search at {sizes[1]:,} facts within 3x of its {sizes[0]:,}-fact time",
                None,
                3,
                at_least=False,
                detail=str(exc),
            )
            return
        from memlane.stores import PostgreSQLStore

        for n in sizes:
            store = PostgreSQLStore(url, schema_name=f"bench_longterm_{n}_{time.monotonic_ns()}")
            try:
                log(f"  filling {PG} with {n:,} facts")
                user_ns = fact_namespace(FactScope.USER, USER)
                batch = []
                for i in range(n):
                    key, value, confidence = _fact(i)
                    fact = Fact(
                        key=key,
                        value=value,
                        scope=FactScope.USER,
                        scope_id=USER,
                        confidence=confidence,
                    )
                    batch.append(fact_entry(fact))
                    if len(batch) == FILL_CHUNK:
                        store.save_many(user_ns, batch)
                        batch = []
                if batch:
                    store.save_many(user_ns, batch)
                lt = LongTermMemory(store)
                case = case_name("search", n, "PostgreSQL")
                log(f"  {case}")
                count = 20 if cfg.quick else 50

                def rep(_: int, lt: LongTermMemory = lt, count: int = count) -> float:
                    start = time.perf_counter()
                    for _ in range(count):
                        lt.search(SEARCH, user_id=USER, memory_type="facts", limit=LIMIT)
                    return (time.perf_counter() - start) / count

                samples, failed = interleave(cfg.reps, [(PG, rep)], log=log)
                fill_rows(result.rows, samples, failed, case, "op", PG, throughput=_ops_per_second)
                row = find(result.rows, case, PG)
                found = lt.search(SEARCH, user_id=USER, memory_type="facts", limit=LIMIT)
                if row is not None:
                    row.check = f"{len(found)} results"
                    if row.median_s:
                        medians[n] = row.median_s
                rows.append(row)
            finally:
                with contextlib.suppress(Exception):
                    store.close()
    finally:
        servers.stop()
    small, large = sizes
    growth = medians[large] / medians[small] if small in medians and large in medians else None
    judge(
        result,
        f"{PG}: search at {large:,} facts within 3x of its {small:,}-fact time "
        "(an index, not a scan)",
        growth,
        3,
        at_least=False,
        rows=rows[-1:],
        detail=(
            f"{fmt_time(medians[small])} → {fmt_time(medians[large])}" if growth is not None else ""
        ),
    )


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "longterm",
        "7. Long-term facts: LongTermMemory beside LangGraph's BaseStore",
        quick=cfg.quick,
    )
    sizes = (500, 2_000) if cfg.quick else (1_000, 100_000)
    budget = 0.03 if cfg.quick else 0.15
    tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-longterm-")
    result.notes += [
        (
            f"Facts: at each size, n facts in one user's scope (keys fact_NNNNNN; values a note and a "
            f"topic; one in a hundred is about {QUERY!r} in its key and topic, confidence 0.9, the "
            f"others 0.6) and {GLOBAL_FACTS} global facts, filled off the clock (memlane with "
            "remember, one call per fact: LongTermMemory has no bulk path; LangGraph with batches of "
            f"{FILL_CHUNK:,} PutOp: one batch of 100,000 fails in SqliteStore with 'too many SQL "
            f"variables'). Sizes {sizes[0]:,} and {sizes[1]:,}"
            + (" (--quick)." if cfg.quick else ".")
        ),
        (
            f"Each repetition runs as many operations as fit in ≈{budget * 1e3:.0f} ms (at least one); "
            f"the median per-operation time over {cfg.reps} interleaved repetitions is reported "
            f"({min(cfg.reps, LARGE_RECALL_REPS)} for recall at {sizes[1]:,} facts, where one call takes seconds). "
            f"'vs memlane' is against {RUST_MEM} for the in-memory rows and {RUST_SQL} for the "
            "SQLite rows (above 1x: memlane's Rust path is faster)."
        ),
        (
            "remember does more than put: it reads the key, compares the value, keeps counts and "
            "history, and writes with a conditional save (save_if), so that racing writers land "
            "once; put overwrites. get_fact validates the stored fact into a pydantic model; get "
            "returns an Item around the stored dict."
        ),
        (
            f"recall(query={QUERY!r}) is the fuzzy pattern match (every word, in order): it loads "
            "every fact the user sees (user scope, then global), validates each into a Fact and "
            "applies the rule, so its time grows with the facts held. LangGraph's filtered search "
            "scans too (a Python loop over the namespace in memory; json_extract over the rows in "
            "SQLite) but returns the first 10 matches, unranked."
        ),
        (
            f"search({SEARCH!r}) is the ranked search, served by the store's index (an inverted "
            "index in memory, FTS5 in SQLite, tsvector in PostgreSQL): the same "
            f"{len(SEARCH_FACTS)} facts are about {SEARCH!r} at every size, so the rows show how "
            "the lookup grows with the facts held. A query whose words occur in a fixed share of "
            "the facts scores that share, as any index without dynamic pruning does. "
            f"{PG} is filled with save_many of the entries remember writes (off the clock) and "
            "runs on the server the benchmarks start (or MEMLANE_TEST_POSTGRES_URL); --quick "
            "starts no server."
        ),
        (
            "LangGraph's search(query=...) only ranks with an embedding index (index=... with an "
            "embedding model); without one both stores ignore the query and return the first 10 "
            "items of the namespace (the diagnostic row's check counts how many match)."
        ),
        (
            f"LangGraph SqliteStore runs in two set-ups: as it comes (sqlite3.connect's defaults as "
            "in SqliteStore.from_conn_string: rollback journal, synchronous=FULL, a transaction per "
            f"call) and with memlane's SQLiteStore settings (WAL, synchronous=NORMAL), which the "
            "put/get target is judged against. Files live in "
            f"{tempfile.gettempdir()} ({filesystem_of(tempfile.gettempdir())})."
        ),
        (
            f"Versions: langgraph {_version('langgraph')}, langgraph-checkpoint-sqlite "
            f"{_version('langgraph-checkpoint-sqlite')}."
        ),
        (
            "MongoDB is not in this workload: the FerretDB server the benchmarks start has no "
            "text index, so its search reads the namespace (the fallback), as FileStore's does."
        ),
    ]
    try:
        for n in sizes:
            large = n == sizes[1]
            contenders = _measure_size(result, cfg, n, large, tmp.name, log)
            try:
                if large:
                    _targets(result, sizes)
                    if cfg.profile:
                        _profile_misses(result, contenders, n, log)
            finally:
                for c in contenders.values():
                    with contextlib.suppress(Exception):
                        c.close()
        _postgres_search(result, cfg, sizes, log)
    finally:
        tmp.cleanup()
    twins = [r.ratio for r in result.rows if r.contender in (PY_MEM, PY_SQL) and r.ratio]
    if twins:
        result.notes.append(
            f"The pure-Python twin against the Rust path, over every case: {min(twins):.2f}x to "
            f"{max(twins):.2f}x of its time (above 1x: the twin is slower). The store calls are a "
            "small part of these operations: most of the time is spent above the store, in "
            "Python (see the profiles)."
        )
    return result
