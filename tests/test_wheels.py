"""Distributions: each artefact installs into a clean venv and works from there, not the tree.

Each pass of the suite checks one wheel, built once per session by scripts/build_wheels.sh: the
Rust pass the binary wheel (installed and run with cargo and rustc off PATH), the
MEMLANE_PURE_PYTHON=1 pass the pure-Python twin. Run as a script, it checks artefacts that were
already built, which is how the release workflow tests every wheel and the sdist:

    python tests/test_wheels.py dist/memlane-*.whl dist/memlane-*.tar.gz
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "memlane"
# Mirrors memlane._backend, which a script-mode run cannot import: no memlane is installed there.
PURE_PASS = os.environ.get("MEMLANE_PURE_PYTHON", "").strip().lower() in {"1", "true", "yes", "on"}
# The part of the suite that runs against every installed artefact: it needs no servers, and
# its differential tests prove the installed extension and twin agree with tiktoken.
SUITE_SUBSET = ["test_tokens.py"]
# What each extra must bring in directly (name[extras], canonical), and what resolving [all]
# must then install.
EXTRAS = {
    "postgres": {"asyncpg"},
    "mongodb": {"pymongo"},
    "motor": {"motor"},
    "llm": {"pydantic-ai-slim[anthropic,openai]"},
    "server": {"starlette", "uvicorn"},
}
EXTRAS["all"] = set().union(*EXTRAS.values())
ALL_INSTALLS = {
    "asyncpg",
    "pymongo",
    "motor",
    "pydantic-ai-slim",
    "openai",
    "anthropic",
    "starlette",
    "uvicorn",
}

# Runs inside the fresh venv (packaging comes with pytest): the direct requirements of each extra
# named in argv, following a self-reference such as memlane[postgres,...] into its extras.
EXTRA_REQUIREMENTS = r"""
import json, sys
from importlib.metadata import requires
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

reqs = [Requirement(r) for r in requires("memlane") or []]

def direct(extra):
    out = set()
    for r in reqs:
        if r.marker is None or not r.marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(r.name) == "memlane":
            out = out.union(*map(direct, r.extras))
        else:
            out.add(canonicalize_name(r.name) + (f"[{','.join(sorted(r.extras))}]" if r.extras else ""))
    return out

print(json.dumps({extra: sorted(direct(extra)) for extra in sys.argv[1:]}))
"""

# Runs inside the fresh venv, from a scratch cwd: argv[1] is the backend memlane must pick,
# argv[2] "no-rust" when cargo and rustc must be out of sight.
SMOKE = r"""
import importlib.metadata, shutil, subprocess, sys, sysconfig
from pathlib import Path

import memlane
from memlane.tokens import PyTokenEstimator

expected = sys.argv[1]
installed = Path(memlane.__file__).resolve()
site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
assert any(installed.is_relative_to(s) for s in site), f"memlane imported from {installed}"
assert memlane.BACKEND == expected, f"BACKEND is {memlane.BACKEND!r}, wanted {expected!r}"
assert memlane.__version__ == importlib.metadata.version("memlane") != "0.0.0"
if expected == "rust":
    from memlane import _core
    assert _core.__version__ == memlane.__version__, (_core.__version__, memlane.__version__)
if sys.argv[2] == "no-rust":
    assert shutil.which("cargo") is None and shutil.which("rustc") is None, "Rust is on PATH"

# The twin ships in every wheel and reads the bundled rank files; the active class may be Rust.
for cls in {memlane.TokenEstimator, PyTokenEstimator}:
    assert cls().estimate("hello world") == 2, cls
    assert cls(encoding_name="cl100k_base").estimate("hello world") == 2, cls

script = Path(sys.executable).with_name("memlane.exe" if sys.platform == "win32" else "memlane")
out = subprocess.run(
    [str(script), "tokens", "-"], input="hello world", capture_output=True, text=True, check=True
).stdout
assert "tokens:     2" in out and f"backend:    {expected}" in out, out
print("smoke ok:", memlane.BACKEND, memlane.__version__, installed.parent)
"""


@dataclass(frozen=True)
class Artefact:
    """A built distribution and what installing it must give."""

    path: Path

    @property
    def kind(self) -> str:
        """``"binary"``, ``"pure"`` or ``"sdist"``, read from the file name."""
        if self.path.name.endswith(".tar.gz"):
            return "sdist"
        return "pure" if self.path.name.endswith("-py3-none-any.whl") else "binary"

    @property
    def backend(self) -> str:
        """The ``memlane.BACKEND`` an install of this artefact must report."""
        return "python" if self.kind == "pure" else "rust"

    @property
    def hide_rust(self) -> bool:
        """A binary wheel must install and run where no Rust toolchain exists."""
        return self.kind == "binary"


class Venv:
    """A fresh virtual environment whose processes see neither the source tree nor the env
    switches of the outer suite, and, when ``hide_rust``, no cargo or rustc on PATH."""

    def __init__(self, where: Path, *, hide_rust: bool) -> None:
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
        scripts = where / ("Scripts" if sys.platform == "win32" else "bin")
        self.python = scripts / ("python.exe" if sys.platform == "win32" else "python")
        drop = ("MEMLANE_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        if hide_rust:
            env["PATH"] = os.pathsep.join(
                d
                for d in env.get("PATH", "").split(os.pathsep)
                if not any(shutil.which(tool, path=d) for tool in ("cargo", "rustc"))
            )
        self.env = env

    def run(self, *args: str | Path, cwd: Path, **env: str) -> str:
        """Runs the venv's python with ``args``; fails with the output if it exits non-zero."""
        proc = subprocess.run(
            [str(self.python), *map(str, args)],
            check=False,  # the assertion below shows the output, which CalledProcessError hides
            cwd=cwd,
            env={**self.env, **env},
            capture_output=True,
            text=True,
        )
        shown = "python -c SCRIPT" if args[0] == "-c" else f"python {args[0]} {args[1]}"
        assert proc.returncode == 0, (
            f"{shown} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
        return proc.stdout


def build(kinds: list[str], out: Path) -> list[Artefact]:
    """Runs scripts/build_wheels.sh, with this interpreter (and its maturin) as the builder."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    for kind in kinds:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_wheels.sh"), kind, str(out)],
            check=False,
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"build_wheels.sh {kind} failed:\n{proc.stdout}\n{proc.stderr}"
        print("\n".join(line for line in proc.stdout.splitlines() if " bytes " in line))
    return [Artefact(p) for p in sorted(out.iterdir()) if p.is_file()]


def source_files() -> set[str]:
    """The package files a wheel must hold: the source package less anything built."""
    built = re.compile(r"(^|/)__pycache__/|\.(py[co]|so|pyd|dylib)$")
    names = {
        "memlane/" + p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*") if p.is_file()
    }
    return {n for n in names if not built.search(n)}


def check_contents(artefact: Artefact) -> None:
    """Right name and tags; the package, stubs and rank files; no tests, caches or build output."""
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["version"]
    ranks = {f"memlane/_ranks/{p.name}" for p in (PACKAGE / "_ranks").glob("*.tiktoken")}
    assert ranks, "no rank files in the source tree"
    if artefact.kind == "sdist":
        assert artefact.path.name == f"memlane-{version}.tar.gz"
        with tarfile.open(artefact.path) as tar:
            names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        required = {
            "PKG-INFO",
            "README.md",
            "pyproject.toml",
            "Cargo.toml",
            "Cargo.lock",
            "rust/src/lib.rs",
        }
        required |= {f"python/{n}" for n in ranks | {"memlane/_core.pyi", "memlane/py.typed"}}
        assert required <= names, f"missing from the sdist: {sorted(required - names)}"
        stray = r"(^|/)(__pycache__|target|\.venv|\.hypothesis|\.pytest_cache)/|\.(py[co]|so|pyd)$"
        junk = [n for n in names if re.search(stray, n)]
        assert not junk, f"build output in the sdist: {junk}"
        return

    tags = artefact.path.name.removeprefix(f"memlane-{version}-").removesuffix(".whl")
    with zipfile.ZipFile(artefact.path) as whl:
        names = {n for n in whl.namelist() if not n.endswith("/")}
    package = {n for n in names if not n.startswith(f"memlane-{version}.dist-info/")}
    junk = [n for n in names if re.search(r"__pycache__|\.py[co]$|^tests/|/tests/|^target/", n)]
    assert not junk, f"build or test files in the wheel: {junk}"
    assert ranks | {"memlane/_core.pyi", "memlane/py.typed"} <= package
    if artefact.kind == "pure":
        assert tags == "py3-none-any", artefact.path.name
        extension: set[str] = set()
    else:
        # One abi3 wheel serves every CPython >= 3.11; a bare linux tag would not be installable.
        assert tags.startswith("cp311-abi3-"), artefact.path.name
        assert "-linux_" not in tags, artefact.path.name
        extension = {n for n in package if re.fullmatch(r"memlane/_core\.(abi3\.so|pyd)", n)}
        assert len(extension) == 1, sorted(package)
    assert package - extension == source_files(), "wheel and python/memlane differ"


def install(artefact: Artefact, where: Path, **env: str) -> Venv:
    """A fresh venv holding the artefact with the test extra; the binary wheel without Rust."""
    venv_ = Venv(where, hide_rust=artefact.hide_rust)
    venv_.run("-m", "pip", "install", "--quiet", f"{artefact.path}[test]", cwd=where, **env)
    return venv_


def smoke(env: Venv, artefact: Artefact, cwd: Path) -> None:
    """Imports from site-packages on the expected backend; counts; the console script runs."""
    rust = "no-rust" if artefact.hide_rust else "any"
    print(env.run("-c", SMOKE, artefact.backend, rust, cwd=cwd).strip())


def run_suite_subset(env: Venv, artefact: Artefact, cwd: Path) -> None:
    """The token tests, copied out of the tree, pass against the installed package."""
    shutil.copy(ROOT / "pyproject.toml", cwd)  # the suite's strict pytest settings
    (cwd / "tests").mkdir()
    for path in (ROOT / "tests").glob("*.py"):
        if path.name in SUITE_SUBSET or not path.name.startswith("test_"):
            shutil.copy(path, cwd / "tests")
    switches = {"MEMLANE_HYPOTHESIS_EXAMPLES": "10"}
    if artefact.kind == "pure":
        switches["MEMLANE_ALLOW_NO_EXTENSION"] = "1"  # the Rust side of each comparison is absent
    out = env.run(
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        cwd,
        "-q",
        "-m",
        "not slow",
        *(f"tests/{name}" for name in SUITE_SUBSET),
        cwd=cwd,
        **switches,
    )
    print(out.strip().splitlines()[-1])


def check_extras(env: Venv, artefact: Artefact, cwd: Path) -> None:
    """The metadata declares every extra with its packages, and the whole set resolves."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert EXTRAS.keys() <= declared.keys()
    metadata = env.run(
        "-c", "import importlib.metadata as m; print(m.metadata('memlane'))", cwd=cwd
    )
    provided = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.MULTILINE))
    assert provided == declared.keys(), (provided, declared.keys())
    direct = json.loads(env.run("-c", EXTRA_REQUIREMENTS, *EXTRAS, cwd=cwd))
    for extra, packages in EXTRAS.items():
        assert packages <= set(direct[extra]), f"[{extra}] requires {direct[extra]}"
    # One resolution of [all] proves every extra resolves; one per extra would triple the time.
    report = cwd / "all.json"
    env.run(
        "-m",
        "pip",
        "install",
        "--quiet",
        "--dry-run",
        "--ignore-installed",
        "--report",
        report,
        f"{artefact.path}[all]",
        cwd=cwd,
    )
    resolved = {
        item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]
    }
    assert resolved >= ALL_INSTALLS, f"[all] lacks {sorted(ALL_INSTALLS - resolved)}"


# The pytest side: one artefact per pass, built and installed once per session.


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Artefact]:
    """The pure pass builds the twin; the Rust pass everything, as pip must pick between wheels."""
    kinds = ["pure"] if PURE_PASS else ["binary", "pure", "sdist"]
    artefacts = build(kinds, tmp_path_factory.mktemp("dist"))
    assert sorted(a.kind for a in artefacts) == sorted(kinds), artefacts
    return {a.kind: a for a in artefacts}


@pytest.fixture(scope="session")
def artefact(built: dict[str, Artefact]) -> Artefact:
    """The wheel this pass is about."""
    return built["pure" if PURE_PASS else "binary"]


@pytest.fixture(scope="session")
def installed(artefact: Artefact, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh venv with the wheel of this pass installed."""
    return install(artefact, tmp_path_factory.mktemp("venv"))


class TestWheelContents:
    """The wheel is the package with its stubs and rank files, and holds nothing else."""

    def test_contents(self, artefact: Artefact) -> None:
        check_contents(artefact)


class TestInstalledWheel:
    """Installed in a clean venv, the wheel works from site-packages on its own backend."""

    def test_smoke(self, installed: Venv, artefact: Artefact, tmp_path: Path) -> None:
        smoke(installed, artefact, tmp_path)

    def test_suite_subset(self, installed: Venv, artefact: Artefact, tmp_path: Path) -> None:
        run_suite_subset(installed, artefact, tmp_path)

    def test_extras_resolve(self, installed: Venv, artefact: Artefact, tmp_path: Path) -> None:
        check_extras(installed, artefact, tmp_path)


if not PURE_PASS:
    # Needs both wheels, so it belongs to the pass that builds both; defining it only there
    # keeps the other pass free of skips.

    class TestPipChoosesTheWheel:
        """With both wheels on offer pip takes the binary one where it fits, else the twin."""

        @pytest.mark.parametrize(
            ("platform", "kind"),
            [(None, "binary"), ("macosx_11_0_arm64", "pure"), ("win_arm64", "pure")],
        )
        def test_choice(
            self,
            built: dict[str, Artefact],
            installed: Venv,
            tmp_path: Path,
            platform: str | None,
            kind: str,
        ) -> None:
            target = ["--platform", platform, "--only-binary=:all:"] if platform else []
            installed.run(
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-index",
                "--find-links",
                built["binary"].path.parent,
                "--dest",
                tmp_path,
                *target,
                "memlane",
                cwd=tmp_path,
            )
            assert [p.name for p in tmp_path.iterdir()] == [built[kind].path.name]

    class TestSdist:
        """The sdist holds sources, README and rank files; pip builds the extension from it."""

        def test_contents(self, built: dict[str, Artefact]) -> None:
            check_contents(built["sdist"])

        def test_builds_the_extension(self, built: dict[str, Artefact], tmp_path: Path) -> None:
            import fcntl  # this pass runs on the developer's Unix machine, never on Windows

            # What is checked is that the sdist is complete and builds; the release profile is the
            # binary wheel's business, and its fat LTO would double this pass. A target dir of its
            # own that outlives the session, and a venv at a fixed path (pyo3 rebuilds whenever
            # the interpreter path changes), leave only changed Rust to recompile after the first
            # run, without invalidating target/release. The lock keeps two sessions in one tree
            # from rebuilding that venv under each other.
            target = ROOT / "target" / "sdist-check"
            target.mkdir(parents=True, exist_ok=True)
            with open(target / "lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                env = install(
                    built["sdist"],
                    target / "venv",
                    CARGO_TARGET_DIR=str(target),
                    MATURIN_PEP517_ARGS="--profile dev",
                    CARGO_PROFILE_DEV_DEBUG="0",  # debug info would only double the disk used
                )
                smoke(env, built["sdist"], tmp_path)


def main(paths: list[str]) -> int:
    """Checks each built artefact named on the command line; fails loudly on the first problem."""
    import tempfile

    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    for name in paths:
        artefact = Artefact(Path(name).resolve())
        print(f"== {artefact.path.name} ({artefact.kind}, {artefact.path.stat().st_size} bytes)")
        with tempfile.TemporaryDirectory() as tmp:
            check_contents(artefact)
            env = install(artefact, Path(tmp, "venv"))
            for step in (smoke, run_suite_subset, check_extras):
                cwd = Path(tmp, step.__name__)
                cwd.mkdir()
                step(env, artefact, cwd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
