#!/usr/bin/env bash
# The whole test suite, from a fresh clone. Any failure — a finding of a linter, a failing test,
# a pytest pass that ran no test — exits non-zero; the closing lines give each phase's time.
#
#   bash scripts/test.sh [PYTEST_ARGS...]
#
# Needs Python >= 3.11, Rust (cargo), Go (FerretDB is built from source), and root or sudo with
# apt for Debian's PostgreSQL and Chromium (see scripts/install_servers.sh and
# install_browser.sh); the second PostgreSQL, with pgvector, is the pgserver wheel of the test
# extra. Installs into a venv of its own (MEMLANE_TEST_VENV, default target/test-venv), never
# into the developer's .venv.
#
# What runs, and what runs beside what (docs/testing.md has the reasons and the figures):
#   setup   the venv with memlane[test,lint] (builds the extension) | the servers and Chromium
#           | the Rust checks (cargo fmt, clippy twice, cargo test) in their own target dir
#   lint    ruff, ruff format, mypy (scripts/lint.sh python)
#   pytest  the Rust pass: every test; the tests taking the `impl` fixture run on both
#           implementations there. Then the pure-Python pass (MEMLANE_PURE_PYTHON=1): every
#           test that does not take `impl`, on the twin. Each pass spreads its tests over
#           MEMLANE_TEST_WORKERS pytest-xdist workers (default: one per core).
# PYTEST_ARGS go to both passes (e.g. a file, -x, -k EXPR).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${MEMLANE_TEST_VENV:-target/test-venv}
WORKERS=${MEMLANE_TEST_WORKERS:-auto}
LOGS=target/test-logs
mkdir -p "$LOGS"

phases=()  # "seconds|status|name", in the order the phases ended
declare -A job_pid job_start job_name  # the phases running in the background, by key
failed=()
passed_total=0
failed_total=0
started=$SECONDS

record() {  # NAME STATUS SECONDS
    phases+=("$3|$2|$1")
    if [ "$2" != ok ]; then failed+=("$1"); fi
}

# Counts a runner's closing line into the totals the last line of this script reports.
count_results() {  # LOG
    local line p f e
    line=$(grep -E '^(test result: |=* ?[0-9]+ (passed|failed|error))' "$1" | tail -n 1 || true)
    p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    e=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    passed_total=$((passed_total + p))
    failed_total=$((failed_total + f + e))
}

summary() {
    local status=$? entry key
    for key in "${!job_pid[@]}"; do  # an early exit stops the rest of each background phase
        kill "${job_pid[$key]}" 2>/dev/null || true
        wait "${job_pid[$key]}" 2>/dev/null || true
    done
    echo
    echo "== phase times (wall clock; phases in the same setup row ran side by side)"
    for entry in "${phases[@]}"; do
        IFS='|' read -r secs state name <<<"$entry"
        printf '  %-58s %4ss  %s\n' "$name" "$secs" "$state"
    done
    printf '  %-58s %4ss\n' "total" $((SECONDS - started))
    if [ ${#failed[@]} -gt 0 ]; then
        echo "FAILED: ${failed[*]}"
        status=1
    fi
    echo "tests: $passed_total passed, $failed_total failed"
    exit "$status"
}
trap summary EXIT

# Runs a phase in the foreground; a failure is recorded and the next phases still run.
run() {  # NAME COMMAND...
    local name=$1 t0=$SECONDS status=ok
    shift
    echo "== $name"
    "$@" 2>&1 | tee "$LOGS/current.log" || status=failed
    count_results "$LOGS/current.log"
    record "$name" "$status" $((SECONDS - t0))
    [ "$status" = ok ]
}

# Starts a phase in the background with its output in a log, shown whole when it is awaited.
start() {  # KEY NAME COMMAND...
    local key=$1 name=$2
    shift 2
    echo "== $name (started in the background)"
    # The job notes when it ends: it may end long before it is awaited.
    (
        status=0
        "$@" || status=$?
        date +%s >"$LOGS/$key.end"
        exit "$status"
    ) >"$LOGS/$key.log" 2>&1 &
    job_pid[$key]=$!
    job_start[$key]=$(date +%s)
    job_name[$key]=$name
}

await() {  # KEY; returns non-zero when the job failed
    local key=$1 status=ok
    wait "${job_pid[$key]}" || status=failed
    unset "job_pid[$key]"
    echo "== ${job_name[$key]} ($status; its output:)"
    cat "$LOGS/$key.log"
    count_results "$LOGS/$key.log"
    record "${job_name[$key]}" "$status" $(($(cat "$LOGS/$key.end") - job_start[$key]))
    [ "$status" = ok ]
}

# The phases' functions chain their steps with && or collect a status: run() and start() call
# them where bash ignores set -e, so a failing step would not stop them by itself.
setup_venv() {
    { [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"; } \
        && "$VENV/bin/python" -m pip install -q --upgrade pip \
        && "$VENV/bin/python" -m pip install -q -e '.[test,lint]'
}

install_tools() {
    # One checkout installs at a time (the installers share the tools dir and apt), and the
    # browser after the servers: both run apt, which holds one lock at a time.
    local tools=${MEMLANE_TOOLS_DIR:-$HOME/.cache/memlane-tools}
    mkdir -p "$tools"
    flock "$tools/install.lock" bash -c 'bash scripts/install_servers.sh && bash scripts/install_browser.sh'
}

rust_checks() {
    # Its own target dir, so it need not wait for the release build's lock on target/; the
    # dev-profile artefacts of clippy and cargo test could not share the release ones anyway.
    local status=0
    export CARGO_TARGET_DIR=target/checks
    PYO3_PYTHON=$(command -v "$PYTHON") bash scripts/lint.sh rust || status=1
    echo "== cargo test (Rust core, no Python)"
    cargo test --quiet --lib || status=1
    return "$status"
}

# ---------------------------------------------------------------------------------------- setup
start tools "setup: database servers and Chromium" install_tools
start rust "setup | Rust checks: cargo fmt, clippy x2, cargo test" rust_checks
run "setup: venv and memlane[test,lint] (builds the extension)" setup_venv || exit 1

# ------------------------------------------------------------------------------- Python linters
run "lint: ruff, ruff format, mypy" env MEMLANE_VENV="$VENV" bash scripts/lint.sh python || true
await rust || true
await tools || exit 1  # the tests need the servers and the browser

# ----------------------------------------------------------------------------------- pytest
backend_is() {  # NAME: the interpreter picks the backend the pass is meant to test
    "$VENV/bin/python" -c "import memlane, sys; print('backend:', memlane.BACKEND); sys.exit(memlane.BACKEND != '$1')"
}
rust_pass() {
    backend_is rust && "$VENV/bin/python" -m pytest -n "$WORKERS" "$@"
}
pure_pass() {
    MEMLANE_PURE_PYTHON=1 backend_is python \
        && MEMLANE_PURE_PYTHON=1 "$VENV/bin/python" -m pytest -n "$WORKERS" --impl-tests-ran "$@"
}
run "pytest, Rust path: every test, impl ones on both twins" rust_pass "$@" || true
run "pytest, pure-Python path: tests without impl or twins" pure_pass "$@" || true
