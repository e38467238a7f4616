#!/usr/bin/env bash
# Every linter memlane uses, the same ones .pre-commit-config.yaml runs; any finding fails.
# Usage: bash scripts/lint.sh   (from a venv made by scripts/test.sh, or VENV=path)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MEMLANE_VENV:-.venv}

echo "== ruff check"
"$VENV/bin/ruff" check python tests benches examples
echo "== ruff format --check"
"$VENV/bin/ruff" format --check python tests benches examples
echo "== mypy --strict (package and tests)"
"$VENV/bin/mypy"
echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy -D warnings (with and without the Python glue)"
cargo clippy --quiet --all-targets -- -D warnings
PYO3_PYTHON="$PWD/$VENV/bin/python" cargo clippy --quiet --all-targets --features python -- -D warnings
