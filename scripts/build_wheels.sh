#!/usr/bin/env bash
# Builds memlane's distributions. This is the one place the build commands live: the release
# workflow and tests/test_wheels.py call it.
#
#   bash scripts/build_wheels.sh [binary|pure|sdist|all] OUTDIR
#
#   binary  the abi3 wheel for this platform (one wheel serves every CPython >= 3.11), release
#           profile; on Linux the manylinux policy is checked, never repaired (nothing but libc may
#           be linked). MEMLANE_MANYLINUX overrides the policy (default manylinux_2_34: the std of
#           a glibc 2.36 host references GLIBC_2.34 symbols; the release workflow builds in
#           manylinux2014 containers instead).
#   pure    the py3-none-any twin: same version (from Cargo.toml), same metadata, dependencies and
#           extras (from pyproject.toml), no extension. Needs no Rust; pip fetches hatchling.
#   sdist   maturin's source distribution, which builds the extension where Rust is installed.
#
# PYTHON picks the interpreter (default python3); maturin is taken from PATH, else `PYTHON -m
# maturin`. Prints the size of everything it built.
set -euo pipefail

usage() {
    echo "usage: $0 [binary|pure|sdist|all] OUTDIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
case $1 in binary | pure | sdist | all) ;; *) usage ;; esac
kind=$1
root=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
mkdir -p "$2"
out=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

maturin() {
    if type -P maturin >/dev/null; then
        command maturin "$@"
    else
        "$PYTHON" -m maturin "$@"
    fi
}

# Each build writes into a fresh staging dir, so what gets reported is what this run built, not
# whatever OUTDIR held before, and a failed build leaves nothing there.
publish() {
    local staging=$1 f size
    for f in "$staging"/*; do
        [ -e "$f" ] || { echo "build produced nothing" >&2; exit 1; }
        mv -f "$f" "$out/"
        size=$(wc -c <"$out/${f##*/}")
        printf '%10d bytes %8d KiB  %s\n' "$size" $((size / 1024)) "$out/${f##*/}"
    done
}

build_binary() {
    local staging
    staging=$(mktemp -d "$work/staging.XXXXXX")
    echo "== binary wheel (maturin, release profile)"
    (cd "$root" && maturin build --release --locked --out "$staging" \
        --compatibility "${MEMLANE_MANYLINUX:-manylinux_2_34}" --auditwheel check)
    publish "$staging"
}

build_sdist() {
    local staging
    staging=$(mktemp -d "$work/staging.XXXXXX")
    echo "== sdist (maturin)"
    (cd "$root" && maturin sdist --out "$staging")
    publish "$staging"
}

build_pure() {
    local staging project
    staging=$(mktemp -d "$work/staging.XXXXXX")
    project=$(mktemp -d "$work/project.XXXXXX")
    echo "== pure-Python wheel (hatchling, no Rust)"
    "$PYTHON" - "$root" "$project" <<'PY'
"""Lays out a hatchling project holding python/memlane without the extension."""

import json
import shutil
import sys
import tomllib
from pathlib import Path

root, project = Path(sys.argv[1]), Path(sys.argv[2])
version = tomllib.loads((root / "Cargo.toml").read_text())["package"]["version"]
if not all(part.isdigit() for part in version.split(".")):
    # maturin rewrites Cargo pre-releases ("1.0.0-alpha.1") into PEP 440; mirroring that rule
    # here is not worth it until memlane ships one, and a silent mismatch would be worse.
    sys.exit(f"Cargo version {version!r} is not plain X.Y.Z; teach build_wheels.sh to map it")

meta = tomllib.loads((root / "pyproject.toml").read_text())["project"]
meta["dynamic"] = [field for field in meta.get("dynamic", []) if field != "version"]
if not meta["dynamic"]:
    del meta["dynamic"]
meta["version"] = version


def toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(map(toml, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} to TOML")


text = "\n".join(
    [
        "[build-system]",
        'requires = ["hatchling>=1.27"]',  # 1.27: PEP 639 license expressions
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        *(f"{json.dumps(key)} = {toml(value)}" for key, value in meta.items()),
        "",
        "[tool.hatch.build.targets.wheel]",
        'packages = ["memlane"]',
        "",
    ]
)
assert tomllib.loads(text)["project"] == meta, "pyproject.toml did not round-trip"
(project / "pyproject.toml").write_text(text)
readme = meta.get("readme")
if readme is not None:
    name = readme if isinstance(readme, str) else readme["file"]
    shutil.copy(root / name, project / name)
shutil.copytree(
    root / "python" / "memlane",
    project / "memlane",
    ignore=shutil.ignore_patterns("__pycache__", "*.py[co]", "*.so", "*.pyd", "*.dylib"),
)
PY
    "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$staging" "$project"
    publish "$staging"
}

case $kind in
    binary) build_binary ;;
    pure) build_pure ;;
    sdist) build_sdist ;;
    all)
        build_binary
        build_pure
        build_sdist
        ;;
esac
