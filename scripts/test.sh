#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need into .venv, builds the
# extension, runs the linters (any finding fails), the Rust unit tests, then pytest twice — once
# on the Rust path and once with MEMLANE_PURE_PYTHON=1. Any failure (including "no tests ran")
# exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${MEMLANE_VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
echo "== installing memlane (builds the Rust extension) and the test and lint dependencies"
"$VENV/bin/python" -m pip install -q -e '.[test,lint]'

echo "== installing the database servers the tests start"
bash scripts/install_servers.sh

echo "== installing Chromium for the /memories page test"
bash scripts/install_browser.sh

echo "== linters"
MEMLANE_VENV="$VENV" bash scripts/lint.sh

echo "== cargo test (Rust core, no Python)"
cargo test --quiet --lib

echo "== pytest, Rust path"
"$VENV/bin/python" -c 'import memlane, sys; print("backend:", memlane.BACKEND); sys.exit(memlane.BACKEND != "rust")'
"$VENV/bin/python" -m pytest "$@"

echo "== pytest, pure-Python path (MEMLANE_PURE_PYTHON=1)"
MEMLANE_PURE_PYTHON=1 "$VENV/bin/python" -c 'import memlane, sys; print("backend:", memlane.BACKEND); sys.exit(memlane.BACKEND != "python")'
MEMLANE_PURE_PYTHON=1 "$VENV/bin/python" -m pytest "$@"
