#!/usr/bin/env bash
# Every linter memlane uses, the same ones .pre-commit-config.yaml runs; any finding fails.
# Usage: bash scripts/lint.sh [python|rust]   (no argument: both)
#   python  ruff check, ruff format --check, mypy --strict, from the venv MEMLANE_VENV (default
#           .venv; scripts/test.sh passes its own)
#   rust    cargo fmt --check, cargo clippy -D warnings with and without the Python glue
#           (PYO3_PYTHON, default the venv's python, tells PyO3's build which interpreter to read)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MEMLANE_VENV:-.venv}
part=${1:-all}
case $part in python | rust | all) ;; *) echo "usage: $0 [python|rust]" >&2; exit 2 ;; esac

failed=()
check() {  # NAME COMMAND...: runs every linter even after a finding, to report them all
    local name=$1
    shift
    echo "== $name"
    "$@" || failed+=("$name")
}

if [ "$part" != rust ]; then
    check "ruff check" "$VENV/bin/ruff" check python tests benches examples
    check "ruff format --check" "$VENV/bin/ruff" format --check python tests benches examples
    check "mypy --strict (package and tests)" "$VENV/bin/mypy"
fi

if [ "$part" != python ]; then
    check "cargo fmt --check" cargo fmt --check
    check "cargo clippy -D warnings" cargo clippy --quiet --all-targets -- -D warnings
    check "cargo clippy -D warnings --features python (the Python glue)" \
        env PYO3_PYTHON="${PYO3_PYTHON:-$PWD/$VENV/bin/python}" \
        cargo clippy --quiet --all-targets --features python -- -D warnings
fi

if [ ${#failed[@]} -gt 0 ]; then
    printf 'lint FAILED: %s\n' "${failed[@]}"
    exit 1
fi
