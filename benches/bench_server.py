"""Workload 10: ``memlane serve`` under load, on loopback, over a realistic SQLite store.

A store is filled (off the clock, by the code under test, in a child process): 60 users, 1,200
facts in every scope, 300 episodes, 40 procedures, 40 conversations of 30 turns and a
working-memory scope. ``memlane serve`` (uvicorn, the real command) then serves it, and 20
clients send 2,000 requests between them (200 and 50 with ``--quick``), each as soon as its
previous answer arrived:

* 40 % a page of the facts listing (random offset),
* 20 % the facts listing with ``?q=`` (a word from the corpus),
* 20 % one conversation's view,
* 20 % the ranked search API ``/api/v1/search/?q=``.

Reported: requests per second over the whole run, and the p50 and p99 latency of one request;
the check column counts the answers that were not 200 (there must be none). The clients run
in this process, on the same two cores as the server, so the figures are a floor.

Run on another checkout (the code before a change) with
``python -m benches.bench_server --tree /tmp/old``: the store is then filled and served by
that tree's ``memlane``. ``--per-request`` measures instead the CPU time one request of each
kind costs, through the application and Starlette's test client in one process (the best of
five rounds of ten): on a machine other work keeps busy, these figures move far less than
req/s and latencies do. ``--postgres URL`` (or ``--postgres start``, a throwaway server from
``tests/db_servers.py``) serves a PostgreSQL store instead, where reads wait on the network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from benches.harness import REPO, Config, Row, WorkloadResult, fmt_time

CLIENTS = 20
TOKEN = "bench-token"  # noqa: S105  # a throwaway token for a loopback server
MIX = (("facts", 0.4), ("facts_q", 0.2), ("conversation", 0.2), ("search", 0.2))

# Runs in the child, against the tree under test: only APIs every version has.
FILL = r"""
import json, random, sys
from datetime import UTC, datetime, timedelta
from memlane import MemoryManager, SQLiteStore, WorkingMemory

where, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
words = ("lisbon weather train budget hotel museum coffee vegetarian meeting deadline invoice "
         "report flight porto sintra beach dinner tickets timezone language").split()
if where.startswith("postgres"):
    from memlane.stores import PostgreSQLStore
    url, schema = where.rsplit("#", 1)
    store = PostgreSQLStore(url, schema_name=schema)
    store.initialize()
else:
    store = SQLiteStore(where)
manager = MemoryManager(store=store, long_term=True)
lt = manager.long_term
users = [lt.identify_user("telegram", str(1000 + n), display_name=f"user {n}") for n in range(60)]
for n in range(1200):
    key = f"{rng.choice(words)}_{n}"
    value = " ".join(rng.choice(words) for _ in range(8))
    kind = n % 4
    if kind == 0:
        lt.remember(key, value)
    elif kind == 1:
        lt.remember(key, value, scope="user", scope_id=rng.choice(users).id)
    elif kind == 2:
        lt.remember(key, {"text": value, "n": n}, scope="agent", scope_id=f"agent{n % 5}")
    else:
        lt.remember(key, value, scope="session", scope_id=f"s{n % 30}")
start = datetime(2026, 5, 1, tzinfo=UTC)
for n in range(300):
    lt.record_episode(agent_id=f"agent{n % 5}", trigger="user_message",
                      input=" ".join(rng.choice(words) for _ in range(10)), success=n % 7 != 0,
                      output=" ".join(rng.choice(words) for _ in range(12)),
                      user_id=rng.choice(users).id, started_at=start + timedelta(minutes=n),
                      ended_at=start + timedelta(minutes=n, seconds=5))
for n in range(40):
    lt.add_procedure(f"{rng.choice(words)} procedure {n}",
                     trigger_conditions={"goal_contains": [rng.choice(words)]},
                     procedure_type="tool_sequence", content=[rng.choice(words)])
conversations = []
for n in range(40):
    cid = manager.new_conversation()
    conversations.append(cid)
    for t in range(30):
        manager.add_turn(cid, " ".join(rng.choice(words) for _ in range(20)),
                         " ".join(rng.choice(words) for _ in range(40)))
working = WorkingMemory(store=store, scope_id="agent:travel")
for n in range(50):
    working.set(f"k{n}", rng.choice(words))
store.close()
print(json.dumps({"conversations": conversations, "words": words}))
"""


# Runs in the child, against the tree under test: CPU seconds per request of each kind.
PER_REQUEST = r"""
import json, sys, time
from memlane import MemoryManager, SQLiteStore
from memlane.server import create_app
from starlette.testclient import TestClient

where, cid, word = sys.argv[1], sys.argv[2], sys.argv[3]
store = SQLiteStore(where)
manager = MemoryManager(store=store, long_term=True)
client = TestClient(create_app(manager, token="t"), headers={"Authorization": "Bearer t"})
paths = {
    "facts": "/api/v1/facts/?limit=50&offset=600",
    "facts_q": f"/api/v1/facts/?q={word}&limit=50",
    "conversation": f"/api/v1/conversations/{cid}",
    "search": f"/api/v1/search/?q={word}+weather",
}
costs, failures = {}, {}
for kind, path in paths.items():
    status = client.get(path).status_code
    if status != 200:
        failures[kind] = status
    best = float("inf")
    for _ in range(5):
        began = time.process_time()
        for _ in range(10):
            client.get(path)
        best = min(best, (time.process_time() - began) / 10)
    costs[kind] = best
store.close()
print(json.dumps({"cpu_per_request": costs, "failures": failures}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(tree: Path, pure: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "python")}
    env.pop("MEMLANE_PURE_PYTHON", None)
    if pure:
        env["MEMLANE_PURE_PYTHON"] = "1"
    return env


def _fill(where: str, env: dict[str, str], seed: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", FILL, where, str(seed)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    filled: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return filled


def _serve(store: str, env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "memlane", "serve", "--store", store),
                *("--token", TOKEN, "--port", str(port), "--log-level", "warning"),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"memlane serve exited: {log.read_text(errors='replace')}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/v1/openapi.json", timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
        else:
            return process
    process.kill()
    raise RuntimeError("memlane serve did not start in 60 s")


def _requests(filled: dict[str, Any], count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    names = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    made = []
    for _ in range(count):
        kind = rng.choices(names, weights)[0]
        if kind == "facts":
            path = f"facts/?limit=50&offset={rng.randrange(0, 1150)}"
        elif kind == "facts_q":
            path = f"facts/?q={rng.choice(filled['words'])}&limit=50"
        elif kind == "conversation":
            path = f"conversations/{rng.choice(filled['conversations'])}"
        else:
            path = f"search/?q={rng.choice(filled['words'])}+{rng.choice(filled['words'])}"
        made.append((kind, path))
    return made


async def _drive(base: str, requests: list[tuple[str, str]]) -> dict[str, Any]:
    queue = list(reversed(requests))
    latencies: list[float] = []
    failures: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            kind, path = queue.pop()
            began = time.perf_counter()
            response = await http.get(base + path, headers=headers)
            latencies.append(time.perf_counter() - began)
            if response.status_code != 200:
                key = f"{kind} {response.status_code}"
                failures[key] = failures.get(key, 0) + 1

    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        await http.get(base + "facts/?limit=1", headers=headers)  # warm: first store load
        began = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(CLIENTS)))
        elapsed = time.perf_counter() - began
    ordered = sorted(latencies)
    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed,
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "failures": failures,
    }


def measure(
    tree: Path, *, pure: bool, count: int, seed: int, postgres: str | None = None
) -> dict[str, Any]:
    """Fills a store with ``tree``'s code, serves it with ``tree``'s ``memlane serve`` and
    drives ``count`` requests from :data:`CLIENTS` clients.

    Args:
        tree: The checkout whose ``python/`` is served.
        pure: Run the pure-Python twin.
        count: Requests in all.
        seed: Chooses the store's content and the requests.
        postgres: A PostgreSQL URL: the store is a fresh schema there instead of a SQLite
            file.

    Returns:
        ``requests``, ``seconds``, ``rps``, ``p50``, ``p99`` (seconds) and ``failures``.
    """
    env = _env(tree, pure)
    with tempfile.TemporaryDirectory(prefix="memlane-bench-server-") as place:
        if postgres is None:
            path = Path(place) / "store.sqlite3"
            where, store = str(path), f"sqlite:///{path}"
        else:
            schema = f"bench_server_{os.getpid()}_{time.monotonic_ns()}"
            env["MEMLANE_POSTGRES_SCHEMA"] = schema
            where, store = f"{postgres}#{schema}", postgres
        filled = _fill(where, env, seed)
        port = _free_port()
        process = _serve(store, env, port, Path(place) / "serve.log")
        try:
            requests = _requests(filled, count, seed)
            return asyncio.run(_drive(f"http://127.0.0.1:{port}/api/v1/", requests))
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure_per_request(tree: Path, *, pure: bool, seed: int) -> dict[str, Any]:
    """Fills a store with ``tree``'s code and measures, in a child running that code, the CPU
    seconds one request of each kind costs (``cpu_per_request``) and any answer that was not
    200 (``failures``)."""
    env = _env(tree, pure)
    with tempfile.TemporaryDirectory(prefix="memlane-bench-server-") as place:
        where = str(Path(place) / "store.sqlite3")
        filled = _fill(where, env, seed)
        done = subprocess.run(
            [sys.executable, "-c", PER_REQUEST, where, filled["conversations"][0], "lisbon"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    """The load test on this checkout, on the Rust path and on the pure-Python twin."""
    result = WorkloadResult(
        "server", "10. Server: memlane serve under 20 concurrent clients", quick=cfg.quick
    )
    count = {"rust": 200 if cfg.quick else 2000, "python": 50 if cfg.quick else 2000}
    for backend, pure in (("rust", False), ("python", True)):
        data = measure(REPO, pure=pure, count=count[backend], seed=cfg.seed)
        name = f"memlane serve ({'pure-Python twin' if pure else 'Rust'})"
        log(
            f"  {name}: {data['rps']:.1f} req/s, p50 {fmt_time(data['p50'])}, "
            f"p99 {fmt_time(data['p99'])}, failures {data['failures'] or 'none'}"
        )
        failed = sum(data["failures"].values())
        for case, value in (("p50 latency", data["p50"]), ("p99 latency", data["p99"])):
            result.rows.append(
                Row(
                    case=case,
                    contender=name,
                    unit="request",
                    median_s=value,
                    min_s=value,
                    max_s=value,
                    reps=1,
                    is_ref=not pure,
                    throughput=f"{data['rps']:.1f} req/s",
                    check=f"{data['requests']} requests, {failed} not 200",
                    status="ok" if not failed else f"error: {data['failures']}",
                )
            )
    result.notes.append(
        f"{CLIENTS} clients on loopback, mixed requests ({', '.join(f'{n} {w:.0%}' for n, w in MIX)}) "
        "against memlane serve over a 1,200-fact, 300-episode, 40x30-turn SQLite store; the "
        "clients share the machine's cores with the server."
    )
    return result


def _postgres(given: str, workdir: Path) -> tuple[str, Any]:
    """The URL to use and the server to stop: ``start`` runs tests/db_servers.py's."""
    if given != "start":
        return given, None
    import importlib.util

    spec = importlib.util.spec_from_file_location("_db_servers", REPO / "tests" / "db_servers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.start_postgres(workdir)
    return str(server.url), server


def main(argv: list[str] | None = None) -> int:
    """Runs the load test on one checkout and prints its figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benches.bench_server", description=__doc__)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to serve")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--pure", action="store_true", help="the pure-Python twin")
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="serve a PostgreSQL store at URL instead of SQLite ('start': start a throwaway one)",
    )
    parser.add_argument(
        "--per-request",
        action="store_true",
        help="CPU time per request of each kind, in one process, instead of the load test",
    )
    args = parser.parse_args(argv)
    if args.per_request:
        measured = measure_per_request(args.tree.resolve(), pure=args.pure, seed=args.seed)
        print(json.dumps(measured, indent=1))
        return 0
    with tempfile.TemporaryDirectory(prefix="memlane-bench-pg-") as workdir:
        url, server = (
            (None, None) if args.postgres is None else _postgres(args.postgres, Path(workdir))
        )
        try:
            data = measure(
                args.tree.resolve(),
                pure=args.pure,
                count=args.requests,
                seed=args.seed,
                postgres=url,
            )
        finally:
            if server is not None:
                server.stop()
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
