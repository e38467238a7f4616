"""Start real database servers on loopback for the test suite.

Three servers are supported:

* PostgreSQL, from Debian's packages (``/usr/lib/postgresql/*/bin``), see
  :func:`start_postgres`.
* PostgreSQL 16 with pgvector, bundled by the ``pgserver`` wheel, see
  :func:`start_pgvector_postgres`.
* FerretDB v1.24.2 (MongoDB wire protocol) with its SQLite backend, see
  :func:`start_ferretdb`.

Debian's PostgreSQL and FerretDB are installed by ``scripts/install_servers.sh``,
pgserver by the test extra. Setting ``MEMLANE_TEST_POSTGRES_URL``,
``MEMLANE_TEST_PGVECTOR_URL`` or ``MEMLANE_TEST_MONGODB_URL`` makes the matching
function return that external server instead of starting one.

Every failure raises :class:`ServerError` (a ``RuntimeError``) with the reason
and, where a server was started, the tail of its log. Nothing is skipped
silently. Started processes are stopped by :meth:`Server.stop` and, as a
safety net, at interpreter exit (``atexit``) and, on Linux, when the process
that started them dies (``PR_SET_PDEATHSIG``).

This module uses the standard library only.

Example:
    >>> pg = start_postgres(tmp_path)  # doctest: +SKIP
    >>> pg.url  # doctest: +SKIP
    'postgresql://postgres@127.0.0.1:41234/memlane_test'
    >>> pg.restart()
    ... pg.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import IO, Any

__all__ = [
    "FERRETDB_VERSION",
    "MONGODB_URL_ENV",
    "PGVECTOR_URL_ENV",
    "POSTGRES_DB",
    "POSTGRES_ROLE",
    "POSTGRES_URL_ENV",
    "Server",
    "ServerError",
    "start_ferretdb",
    "start_pgvector_postgres",
    "start_postgres",
    "tools_bin_dir",
]

POSTGRES_URL_ENV = "MEMLANE_TEST_POSTGRES_URL"
"""Environment variable naming an external PostgreSQL server to use instead."""

MONGODB_URL_ENV = "MEMLANE_TEST_MONGODB_URL"
"""Environment variable naming an external MongoDB server to use instead."""

PGVECTOR_URL_ENV = "MEMLANE_TEST_PGVECTOR_URL"
"""Environment variable naming an external PostgreSQL server with pgvector to use instead."""

POSTGRES_DB = "memlane_test"
"""Database created in a started PostgreSQL server."""

POSTGRES_ROLE = "postgres"
"""Superuser role of a started PostgreSQL server (trust authentication)."""

FERRETDB_VERSION = "v1.24.2"
"""FerretDB version that ``scripts/install_servers.sh`` installs."""

PG_SYSTEM_USER = "memlane-pg"
"""Unprivileged OS user that runs PostgreSQL when the tests run as root."""

STARTUP_TIMEOUT = 30.0
"""Seconds to wait for a server to accept connections."""

STOP_TIMEOUT = 15.0
"""Seconds to wait for a graceful stop before killing."""

_LOG_TAIL_LINES = 40
_UNIX_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; ".s.PGSQL.NNNNN" is appended

_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """A database server could not be found, started, reached or stopped."""


def tools_bin_dir() -> Path:
    """Return the directory ``scripts/install_servers.sh`` installs tools into.

    Returns:
        ``${MEMLANE_TOOLS_DIR:-$HOME/.cache/memlane-tools}/bin``.
    """
    tools = os.environ.get("MEMLANE_TOOLS_DIR") or str(Path.home() / ".cache" / "memlane-tools")
    return Path(tools) / "bin"


# --------------------------------------------------------------------------
# Server objects
# --------------------------------------------------------------------------


class Server:
    """A database server the tests connect to.

    Instances come from :func:`start_postgres` or :func:`start_ferretdb`. An
    external server (given by environment variable) is only described: it is
    never stopped or restarted by this module.

    Attributes:
        kind: ``"postgres"`` or ``"mongodb"``.
        url: Connection URL for client libraries.
        host: Host name or address the server listens on.
        port: TCP port the server listens on.
        is_external: True when the server came from an environment variable.
    """

    def __init__(self, *, kind: str, url: str, host: str, port: int, is_external: bool) -> None:
        """Describe a server.

        Args:
            kind: ``"postgres"`` or ``"mongodb"``.
            url: Connection URL.
            host: Host name or address.
            port: TCP port.
            is_external: Whether the server is external (not started here).
        """
        self.kind = kind
        self.url = url
        self.host = host
        self.port = port
        self.is_external = is_external

    @property
    def is_running(self) -> bool:
        """Whether a server process started by this module is alive.

        Always True for an external server (its state is not tracked).
        """
        return True

    @property
    def log_path(self) -> Path | None:
        """Path of the server's log file, or None for an external server."""
        return None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """Return the last lines of the server log.

        Args:
            lines: How many lines to return.

        Returns:
            The log tail, or an explanatory placeholder when there is no log.
        """
        return "(external server: no log)"

    def start(self) -> None:
        """Start the server again after :meth:`stop`.

        Raises:
            ServerError: Always, for an external server.
        """
        raise ServerError(
            f"cannot start external {self.kind} server {self.url}: it is not managed here"
        )

    def stop(self) -> None:
        """Stop the server and wait for the process to exit.

        Does nothing for an external server or one already stopped.
        """

    def restart(self) -> None:
        """Stop the server, then start it on the same data directory and port.

        Raises:
            ServerError: For an external server, or if it fails to come back.
        """
        raise ServerError(
            f"cannot restart external {self.kind} server {self.url}: it is not managed here"
        )

    def __enter__(self) -> Server:
        """Return self; the server is already started."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop the server."""
        self.stop()

    def __repr__(self) -> str:
        """Return a debugging representation."""
        ext = " external" if self.is_external else ""
        return f"<{type(self).__name__}{ext} {self.kind} {self.url}>"


class _ManagedServer(Server):
    """A server process started and owned by this module."""

    _stop_signal: signal.Signals = signal.SIGTERM

    def __init__(self, *, kind: str, url: str, port: int, workdir: Path, log_file: Path) -> None:
        super().__init__(kind=kind, url=url, host="127.0.0.1", port=port, is_external=False)
        self.workdir = workdir
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        _register(self)

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path | None:
        return self._log_file

    @property
    def pid(self) -> int | None:
        """PID of the running server process, or None when stopped."""
        return self._proc.pid if self.is_running and self._proc is not None else None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _tail(self._log_file, lines)

    # Subclasses implement these.
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _popen_kwargs(self) -> dict[str, Any]:
        return {}

    def _wait_ready(self, deadline: float) -> None:
        raise NotImplementedError

    def _after_first_start(self) -> None:
        """Hook run once after the very first successful start."""

    def start(self) -> None:
        with self._lock:
            if self.is_running:
                return
            # Port may still be held briefly by the previous process' sockets;
            # both servers set SO_REUSEADDR, so a free-port check is enough.
            _wait_port_free(self.host, self.port, timeout=STOP_TIMEOUT)
            cmd = self._command()
            with open(self._log_file, "ab") as log:
                log.write(f"\n===== memlane: starting {' '.join(cmd)}\n".encode())
                log.flush()
                self._proc = _spawn(cmd, log, **self._popen_kwargs())
            deadline = time.monotonic() + STARTUP_TIMEOUT
            try:
                self._wait_ready(deadline)
            except BaseException:
                self._kill()
                raise

    def stop(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(self._stop_signal)
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self._kill()
                    raise ServerError(
                        f"{self.kind} server (pid {proc.pid}) did not stop within {STOP_TIMEOUT:.0f}s "
                        f"after {self._stop_signal.name}; killed it. Log tail ({self._log_file}):\n"
                        f"{self.log_tail()}"
                    ) from None
            self._proc = None

    def restart(self) -> None:
        with self._lock:
            self.stop()
            self.start()

    def _kill(self) -> None:
        proc = self._proc
        self._proc = None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT)

    def _fail(self, what: str) -> ServerError:
        """Build a ServerError carrying the log tail."""
        return ServerError(f"{what}\nServer log tail ({self._log_file}):\n{self.log_tail()}")

    def _check_alive(self) -> None:
        proc = self._proc
        if proc is None:
            raise self._fail(f"{self.kind} server was stopped while starting")
        rc = proc.poll()
        if rc is not None:
            raise self._fail(f"{self.kind} server exited with code {rc} while starting")


# --------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------


class _PostgresServer(_ManagedServer):
    _stop_signal = signal.SIGINT  # "fast" shutdown: disconnect clients, checkpoint

    def __init__(
        self,
        *,
        bindir: Path,
        data_dir: Path,
        socket_dir: str,
        port: int,
        workdir: Path,
        log_file: Path,
        run_as: _RunAs | None,
    ) -> None:
        url = f"postgresql://{POSTGRES_ROLE}@127.0.0.1:{port}/{POSTGRES_DB}"
        super().__init__(kind="postgres", url=url, port=port, workdir=workdir, log_file=log_file)
        self.bindir = bindir
        self.data_dir = data_dir
        self.user = POSTGRES_ROLE
        self.database = POSTGRES_DB
        self._socket_dir = socket_dir
        self._run_as = run_as

    def _command(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1",
            "-c", f"unix_socket_directories={self._socket_dir}",
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
            "-c", "max_connections=200",
            "-c", "logging_collector=off",
        ]  # fmt: skip

    def _popen_kwargs(self) -> dict[str, Any]:
        return _run_as_kwargs(self._run_as, cwd=self.data_dir.parent)

    def _wait_ready(self, deadline: float) -> None:
        pg_isready = str(self.bindir / "pg_isready")
        last = ""
        while True:
            self._check_alive()
            res = subprocess.run(
                [pg_isready, "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", POSTGRES_ROLE, "-d", "postgres",
                 "-t", "2"],
                env=_client_env(), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if res.returncode == 0:
                return
            last = f"pg_isready exit code {res.returncode} {res.stderr.strip()}"
            if time.monotonic() > deadline:
                raise self._fail(
                    f"postgres on 127.0.0.1:{self.port} did not accept connections within "
                    f"{STARTUP_TIMEOUT:.0f}s (last check: {last})"
                )
            time.sleep(0.1)

    def _after_first_start(self) -> None:
        res = subprocess.run(
            [str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", POSTGRES_ROLE,
             POSTGRES_DB],
            env=_client_env(), capture_output=True, text=True, check=False, timeout=STARTUP_TIMEOUT,
        )  # fmt: skip
        if res.returncode != 0:
            raise self._fail(
                f"createdb {POSTGRES_DB} failed (exit {res.returncode}): {res.stderr.strip()}"
            )


class _RunAs:
    """An unprivileged OS user to run a server as."""

    def __init__(self, name: str) -> None:
        pw = pwd.getpwnam(name)
        self.name = name
        self.uid = pw.pw_uid
        self.gid = pw.pw_gid
        self.gids = {pw.pw_gid, *os.getgrouplist(name, pw.pw_gid)}


def _postgres_bindir() -> Path:
    """Find the newest Debian PostgreSQL server binary directory.

    Returns:
        A directory holding ``postgres``, ``initdb``, ``pg_isready``, ``createdb``.

    Raises:
        ServerError: When no usable directory exists.
    """
    needed = ("postgres", "initdb", "pg_isready", "createdb")

    def version_key(p: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", Path(p).parent.name)) or (0,)

    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True):
        if all(os.access(os.path.join(cand, n), os.X_OK) for n in needed):
            return Path(cand)
    on_path = [shutil.which(n) for n in needed]
    if all(on_path):
        dirs = {str(Path(p).parent) for p in on_path if p}
        if len(dirs) == 1:
            return Path(dirs.pop())
    raise ServerError(
        "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin and PATH for "
        f"{', '.join(needed)}). Run scripts/install_servers.sh, or set {POSTGRES_URL_ENV}."
    )


def _ensure_pg_user() -> _RunAs:
    """Return the unprivileged user PostgreSQL runs as when we are root.

    Creates the system user ``memlane-pg`` if missing; falls back to
    ``nobody`` when it cannot be created.

    Raises:
        ServerError: When neither user is available.
    """
    try:
        return _RunAs(PG_SYSTEM_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    err = ""
    if os.access(useradd, os.X_OK):
        res = subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--comment", "memlane test PostgreSQL", PG_SYSTEM_USER],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        err = res.stderr.strip()
    else:
        err = "useradd not found"
    try:
        return _RunAs(PG_SYSTEM_USER)  # created now, or concurrently by another process
    except KeyError:
        pass
    try:
        return _RunAs("nobody")
    except KeyError:
        raise ServerError(
            f"running as root, and PostgreSQL refuses to run as root: could not create user "
            f"{PG_SYSTEM_USER!r} ({err}) and user 'nobody' does not exist"
        ) from None


def _can_traverse(path: Path, user: _RunAs) -> bool:
    """Whether ``user`` can reach ``path`` (search permission on every ancestor).

    Args:
        path: An existing absolute directory.
        user: The user to check for.

    Returns:
        True when every directory from ``/`` down to ``path`` is searchable.
    """
    for d in [path, *path.parents]:
        st = d.stat()
        if st.st_uid == user.uid:
            bit = 0o100
        elif st.st_gid in user.gids:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return False
    return True


def start_postgres(workdir: Path) -> Server:
    """Start a throwaway PostgreSQL server on 127.0.0.1, or return the external one.

    When ``MEMLANE_TEST_POSTGRES_URL`` is set, nothing is started and a Server
    describing that URL is returned (``is_external`` True).

    Otherwise a fresh cluster is initialised (``initdb``, trust auth,
    superuser role ``postgres``, UTF8, C locale, fsync off) and ``postgres``
    listens on a free port of 127.0.0.1 only, with its unix socket in the data
    area; database ``memlane_test`` is created. When the current process is
    root, the server runs as system user ``memlane-pg`` (created if missing;
    ``nobody`` as a fallback). The data area is a new ``workdir/postgres-*``
    directory unless that user cannot reach ``workdir`` (e.g. under pytest's
    0700 temp root), in which case a private ``memlane-pg-*`` directory under
    the system temp dir is used and removed at interpreter exit. The log is
    ``workdir/<data area name>.log``.

    Args:
        workdir: Existing directory for the data directory and log file.

    Returns:
        The server; its ``url`` is ``postgresql://postgres@127.0.0.1:PORT/memlane_test``.

    Raises:
        ServerError: If binaries are missing, initdb fails, or the server does
            not accept connections within 30 s (message includes the log tail).
    """
    external = os.environ.get(POSTGRES_URL_ENV)
    if external:
        return _external("postgres", external, default_port=5432)
    return _start_cluster(workdir, _postgres_bindir(), "start_postgres")


def start_pgvector_postgres(workdir: Path) -> Server:
    """Start a second, throwaway PostgreSQL server that has the ``vector`` extension.

    Debian's PostgreSQL packages have no pgvector; the ``pgserver`` wheel (the test
    extra) bundles PostgreSQL 16 with it. Its binaries run directly, as
    :func:`start_postgres` runs Debian's (same cluster settings, same user when root,
    a new ``workdir/postgres-*`` data area), so the suite can test PostgreSQLStore both
    with pgvector and without. The wheel bundles no other contrib extension (no
    ``pg_trgm``, no ``btree_gin``).

    When ``MEMLANE_TEST_PGVECTOR_URL`` is set, nothing is started and a Server describing
    that URL is returned (``is_external`` True).

    Args:
        workdir: Existing directory for the data directory and log file.

    Returns:
        The server; its ``url`` is ``postgresql://postgres@127.0.0.1:PORT/memlane_test``.

    Raises:
        ServerError: If pgserver is not installed or lacks pgvector, initdb fails, or the
            server does not accept connections within 30 s (with the log tail).
    """
    external = os.environ.get(PGVECTOR_URL_ENV)
    if external:
        return _external("postgres", external, default_port=5432)
    bindir = _pgserver_bindir()
    if os.geteuid() == 0:
        run_as = _ensure_pg_user()
        if not _can_traverse(bindir, run_as):
            bindir = _copy_install(bindir.parent, run_as)
    return _start_cluster(workdir, bindir, "start_pgvector_postgres")


def _copy_install(install: Path, run_as: _RunAs) -> Path:
    """A copy of pgserver's PostgreSQL that ``run_as`` can read and run; its ``bin``.

    The wheel's binaries live in the venv, which may sit under a home directory the server's
    unprivileged user cannot enter (``/root`` is 0700); Debian's live in ``/usr/lib``. The copy
    (about 30 MB: the install without its headers, and the libraries the wheel vendors beside
    the package, which the binaries' rpath finds at ``$ORIGIN/../../../pgserver.libs``) goes
    to a private temp dir, removed at interpreter exit.
    """
    base = Path(tempfile.mkdtemp(prefix="memlane-pginstall-"))
    _cleanup_dirs.append(base)
    base.chmod(0o755)
    copy = base / "pgserver" / "pginstall"
    shutil.copytree(install, copy, symlinks=True, ignore=shutil.ignore_patterns("include"))
    libs = install.parent.parent / "pgserver.libs"
    if libs.is_dir():
        shutil.copytree(libs, base / "pgserver.libs", symlinks=True)
    if not _can_traverse(copy / "bin", run_as):
        raise ServerError(f"user {run_as.name} cannot reach {copy} either")
    return copy / "bin"


def _pgserver_bindir() -> Path:
    """The ``bin`` directory of the PostgreSQL that the ``pgserver`` wheel bundles.

    Found without importing pgserver (its import sets up logging and a server manager).

    Raises:
        ServerError: pgserver is missing, or its PostgreSQL lacks a binary or pgvector.
    """
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the pgserver package (PostgreSQL with pgvector) is not installed: "
            f"pip install -e '.[test]', or set {PGVECTOR_URL_ENV}"
        )
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    bindir = install / "bin"
    needed = ("postgres", "initdb", "pg_isready", "createdb")
    missing = [n for n in needed if not os.access(bindir / n, os.X_OK)]
    control = install / "share" / "postgresql" / "extension" / "vector.control"
    if missing or not control.is_file():
        what = f"binaries {', '.join(missing)}" if missing else f"pgvector ({control})"
        raise ServerError(f"pgserver's PostgreSQL in {install} lacks {what}")
    return bindir


def _start_cluster(workdir: Path, bindir: Path, caller: str) -> Server:
    """A fresh cluster of the PostgreSQL in ``bindir``, started (see :func:`start_postgres`)."""
    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise ServerError(f"{caller}: workdir {workdir} is not a directory")
    run_as = _ensure_pg_user() if os.geteuid() == 0 else None

    if run_as is not None and not _can_traverse(workdir, run_as):
        base = Path(tempfile.mkdtemp(prefix="memlane-pg-"))
        _cleanup_dirs.append(base)
    else:
        base = Path(tempfile.mkdtemp(prefix="postgres-", dir=workdir))
    base.chmod(0o700)
    if run_as is not None:
        os.chown(base, run_as.uid, run_as.gid)
    data_dir = base / "data"
    socket_dir = base / "run"
    socket_dir.mkdir()
    if run_as is not None:
        os.chown(socket_dir, run_as.uid, run_as.gid)
    # Unix socket path length is limited; without a usable directory, TCP only.
    socket_dir_opt = str(socket_dir) if len(str(socket_dir)) <= _UNIX_SOCKET_PATH_MAX - 20 else ""
    log_file = workdir / f"{base.name}.log"

    initdb = [
        str(bindir / "initdb"), "-D", str(data_dir), "--auth=trust", f"--username={POSTGRES_ROLE}",
        "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions",
    ]  # fmt: skip
    res = subprocess.run(
        initdb,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        **_run_as_kwargs(run_as, cwd=base),
    )
    with open(log_file, "a", encoding="utf-8") as f:
        f.write(f"===== memlane: {' '.join(initdb)}\n{res.stdout}{res.stderr}")
    if res.returncode != 0:
        who = f" as user {run_as.name}" if run_as else ""
        raise ServerError(
            f"initdb{who} failed with exit code {res.returncode}:\n{res.stdout}{res.stderr}".rstrip()
        )

    server = _PostgresServer(
        bindir=bindir,
        data_dir=data_dir,
        socket_dir=socket_dir_opt,
        port=_free_port(),
        workdir=workdir,
        log_file=log_file,
        run_as=run_as,
    )
    server.start()
    try:
        server._after_first_start()
    except BaseException:
        server.stop()
        raise
    return server


# --------------------------------------------------------------------------
# FerretDB
# --------------------------------------------------------------------------


class _FerretDBServer(_ManagedServer):
    _stop_signal = signal.SIGTERM

    def __init__(
        self,
        *,
        binary: Path,
        data_dir: Path,
        state_dir: Path,
        port: int,
        workdir: Path,
        log_file: Path,
    ):
        super().__init__(kind="mongodb", url=f"mongodb://127.0.0.1:{port}/", port=port, workdir=workdir,
                         log_file=log_file)  # fmt: skip
        self.binary = binary
        self.data_dir = data_dir
        self.state_dir = state_dir

    def _command(self) -> list[str]:
        return [
            str(self.binary),
            "--handler=sqlite",
            f"--sqlite-url=file:{self.data_dir}/",
            f"--listen-addr=127.0.0.1:{self.port}",
            f"--state-dir={self.state_dir}",
            "--debug-addr=-",  # no metrics/pprof HTTP listener (default 127.0.0.1:8088 would collide)
            "--telemetry=disable",
            "--log-level=warn",
            "--log-format=text",
        ]

    def _popen_kwargs(self) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FERRETDB_")}
        env["DO_NOT_TRACK"] = "1"
        return {"cwd": self.state_dir, "env": env}

    def _wait_ready(self, deadline: float) -> None:
        last = ""
        while True:
            self._check_alive()
            try:
                _mongo_ping(self.host, self.port, timeout=2.0)
                return
            except (OSError, ServerError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise self._fail(
                    f"FerretDB on 127.0.0.1:{self.port} did not answer ping within {STARTUP_TIMEOUT:.0f}s "
                    f"(last error: {last})"
                )
            time.sleep(0.05)


def _ferretdb_binary() -> Path:
    """Find the FerretDB binary: tools dir first, then PATH.

    Raises:
        ServerError: When it is missing or is not the expected version.
    """
    cand = tools_bin_dir() / "ferretdb"
    found = str(cand) if os.access(cand, os.X_OK) else shutil.which("ferretdb")
    if not found:
        raise ServerError(
            f"ferretdb binary not found in {tools_bin_dir()} or PATH. Run scripts/install_servers.sh, "
            f"or set {MONGODB_URL_ENV}."
        )
    res = subprocess.run(
        [found, "--version"], capture_output=True, text=True, check=False, timeout=30
    )
    if res.returncode != 0:
        raise ServerError(
            f"{found} --version failed (exit {res.returncode}): {(res.stderr or res.stdout)[-2000:]}"
        )
    m = re.search(r"^version:\s*(\S+)", res.stdout, re.M)
    if not m or m.group(1) != FERRETDB_VERSION:
        got = m.group(1) if m else "unknown"
        raise ServerError(
            f"{found} is FerretDB {got}, expected {FERRETDB_VERSION}; re-run scripts/install_servers.sh"
        )
    return Path(found)


def start_ferretdb(workdir: Path) -> Server:
    """Start a throwaway FerretDB (SQLite backend) on 127.0.0.1, or return the external one.

    When ``MEMLANE_TEST_MONGODB_URL`` is set, nothing is started and a Server
    describing that URL is returned (``is_external`` True).

    Otherwise ``ferretdb`` from the tools dir (or PATH) runs with its SQLite
    backend under a new ``workdir/ferretdb-*/data`` (log:
    ``workdir/ferretdb-*.log``), listening on a free port of
    127.0.0.1, with telemetry and the debug HTTP listener disabled. Readiness
    is a real MongoDB ``ping`` command over the wire protocol.

    Args:
        workdir: Existing directory for the data directory and log file.

    Returns:
        The server; its ``url`` is ``mongodb://127.0.0.1:PORT/``.

    Raises:
        ServerError: If the binary is missing or the wrong version, or the
            server does not answer ping within 30 s (message includes the log tail).
    """
    external = os.environ.get(MONGODB_URL_ENV)
    if external:
        return _external("mongodb", external, default_port=27017)

    workdir = Path(workdir).resolve()
    if not workdir.is_dir():
        raise ServerError(f"start_ferretdb: workdir {workdir} is not a directory")
    binary = _ferretdb_binary()
    base = Path(tempfile.mkdtemp(prefix="ferretdb-", dir=workdir))
    data_dir = base / "data"
    state_dir = base / "state"
    data_dir.mkdir()
    state_dir.mkdir()
    server = _FerretDBServer(
        binary=binary,
        data_dir=data_dir,
        state_dir=state_dir,
        port=_free_port(),
        workdir=workdir,
        log_file=workdir / f"{base.name}.log",
    )
    server.start()
    return server


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _external(kind: str, url: str, *, default_port: int) -> Server:
    """Describe an external server from its URL (first host of a list)."""
    parts = urllib.parse.urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2].split(",")[0]
    try:
        first = urllib.parse.urlsplit(f"//{hostport}")
        host = first.hostname or "localhost"
        port = first.port or default_port
    except ValueError as exc:
        raise ServerError(f"cannot parse {kind} URL {url!r}: {exc}") from None
    return Server(kind=kind, url=url, host=host, port=port, is_external=True)


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port_free(host: str, port: int, *, timeout: float) -> None:
    """Wait until nothing listens on host:port (after a stop).

    Raises:
        ServerError: When the port is still taken after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"port {host}:{port} is still in use after {timeout:.0f}s: {exc}"
                    ) from None
        time.sleep(0.1)


def _client_env() -> dict[str, str]:
    """Environment for PostgreSQL client tools, without inherited PG* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _run_as_kwargs(run_as: _RunAs | None, *, cwd: Path) -> dict[str, Any]:
    """Popen keyword arguments that run a child as ``run_as`` (or as ourselves)."""
    env = _client_env()
    env["LC_ALL"] = "C"
    if run_as is None:
        return {"cwd": cwd, "env": env}
    env.update(HOME=str(cwd), USER=run_as.name, LOGNAME=run_as.name)
    return {"cwd": cwd, "env": env, "user": run_as.uid, "group": run_as.gid, "extra_groups": []}


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """In the child: get SIGTERM when the parent thread dies (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except Exception:  # noqa: BLE001, S110  # best effort: without prctl the atexit hook still stops servers
        pass


def _spawn(cmd: list[str], log: IO[bytes], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a server process with output to ``log``.

    Raises:
        ServerError: When the executable cannot be run.
    """
    # PDEATHSIG fires when the *thread* that forked exits, so only use it from
    # the main thread (a worker thread may end long before the tests do).
    preexec = _set_pdeathsig if threading.current_thread() is threading.main_thread() else None
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # keep Ctrl-C in the terminal from reaching the server directly
            preexec_fn=preexec,  # noqa: PLW1509  # only sets the parent-death signal, async-signal-safe
            **kwargs,
        )
    except OSError as exc:
        raise ServerError(f"cannot run {cmd[0]}: {exc}") from exc


def _tail(path: Path, lines: int) -> str:
    """Return the last ``lines`` lines of a text file, or a placeholder."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(data.splitlines()[-lines:]) or "(log is empty)"


# --- minimal MongoDB wire protocol: OP_MSG {ping: 1} ------------------------

_OP_MSG = 2013


def _bson_cstring(s: str) -> bytes:
    return s.encode() + b"\x00"


def _mongo_ping(host: str, port: int, *, timeout: float) -> None:
    """Send ``{ping: 1, $db: "admin"}`` as OP_MSG and check ``ok: 1``.

    Args:
        host: Server host.
        port: Server port.
        timeout: Socket timeout in seconds.

    Raises:
        OSError: On connection errors.
        ServerError: On an unexpected or failed reply.
    """
    body = (
        b"\x10" + _bson_cstring("ping") + struct.pack("<i", 1)
        + b"\x02" + _bson_cstring("$db") + struct.pack("<i", 6) + b"admin\x00"
    )  # fmt: skip
    doc = struct.pack("<i", len(body) + 5) + body + b"\x00"
    payload = struct.pack("<I", 0) + b"\x00" + doc
    header = struct.pack("<iiii", 16 + len(payload), 1, 0, _OP_MSG)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(header + payload)
        raw = _recv_exact(s, 16)
        length, _req, _resp, opcode = struct.unpack("<iiii", raw)
        if opcode != _OP_MSG or not 21 <= length <= 48 * 1024 * 1024:
            raise ServerError(f"unexpected ping reply header: length={length} opcode={opcode}")
        rest = _recv_exact(s, length - 16)
    if rest[4] != 0:
        raise ServerError("unexpected ping reply section kind")
    reply = _bson_top_level(rest[5:])
    ok = reply.get("ok")
    if ok != 1:
        raise ServerError(f"ping failed: {reply!r}")


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by server")
        buf += chunk
    return bytes(buf)


def _bson_top_level(doc: bytes) -> dict[str, object]:
    """Decode the scalar top-level fields of a BSON document (others as None)."""
    (size,) = struct.unpack_from("<i", doc, 0)
    out: dict[str, object] = {}
    i = 4
    fixed = {0x07: 12, 0x09: 8, 0x11: 8, 0x13: 16, 0x0A: 0, 0x06: 0, 0x7F: 0, 0xFF: 0}
    while i < size - 1:
        t = doc[i]
        end = doc.index(b"\x00", i + 1)
        name = doc[i + 1 : end].decode("utf-8", "replace")
        i = end + 1
        val: object = None
        if t == 0x01:
            (val,) = struct.unpack_from("<d", doc, i)
            i += 8
        elif t == 0x10:
            (val,) = struct.unpack_from("<i", doc, i)
            i += 4
        elif t == 0x12:
            (val,) = struct.unpack_from("<q", doc, i)
            i += 8
        elif t == 0x08:
            val = doc[i] == 1
            i += 1
        elif t in (0x02, 0x0D, 0x0E):
            (n,) = struct.unpack_from("<i", doc, i)
            val = doc[i + 4 : i + 4 + n - 1].decode("utf-8", "replace")
            i += 4 + n
        elif t in (0x03, 0x04):
            (n,) = struct.unpack_from("<i", doc, i)
            i += n
        elif t == 0x05:
            (n,) = struct.unpack_from("<i", doc, i)
            i += 5 + n
        elif t in fixed:
            i += fixed[t]
        else:  # rare types (regex, dbpointer, code w/ scope): stop decoding
            break
        out[name] = val
    return out


# --------------------------------------------------------------------------
# Cleanup safety net
# --------------------------------------------------------------------------

_servers: list[_ManagedServer] = []
_cleanup_dirs: list[Path] = []
_registry_lock = threading.Lock()


def _register(server: _ManagedServer) -> None:
    with _registry_lock:
        _servers.append(server)


@atexit.register
def _stop_all() -> None:
    """Stop every server started by this module, then remove private temp dirs."""
    with _registry_lock:
        servers = list(_servers)
        _servers.clear()
    for server in servers:
        try:
            server.stop()
        except Exception:  # noqa: BLE001  # whatever failed, the process must not outlive the run
            server._kill()
    for d in _cleanup_dirs:
        shutil.rmtree(d, ignore_errors=True)
