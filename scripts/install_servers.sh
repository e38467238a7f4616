#!/usr/bin/env bash
# Install the real database servers the test suite runs against:
#   * PostgreSQL server, from Debian packages (package `postgresql`);
#   * FerretDB v1.24.2 (MongoDB wire protocol, SQLite backend), built from its
#     Go module into ${MEMLANE_TOOLS_DIR:-$HOME/.cache/memlane-tools}/bin.
#
# Idempotent: work already done is detected and skipped.
# Set MEMLANE_TEST_POSTGRES_URL / MEMLANE_TEST_MONGODB_URL to use an external
# server instead; the matching install is then skipped.
# tests/db_servers.py starts the servers; this script only installs them.
set -euo pipefail

FERRETDB_MODULE="github.com/FerretDB/FerretDB"
FERRETDB_VERSION="v1.24.2"
TOOLS_DIR="${MEMLANE_TOOLS_DIR:-$HOME/.cache/memlane-tools}"
BIN_DIR="$TOOLS_DIR/bin"
FERRETDB_BIN="$BIN_DIR/ferretdb"

log() { echo "[install_servers] $*"; }
die() {
    echo "[install_servers] ERROR: $*" >&2
    # do not leave a background build running
    if [[ -n "${ferretdb_pid:-}" ]]; then kill "$ferretdb_pid" 2>/dev/null || true; fi
    exit 1
}

# --- FerretDB: start the (slow) go build first, in the background ----------

ferretdb_pid=""
ferretdb_log=""

ferretdb_is_current() {
    local out
    [[ -x "$FERRETDB_BIN" ]] || return 1
    out="$("$FERRETDB_BIN" --version 2>/dev/null)" || return 1
    grep -qx "version: ${FERRETDB_VERSION}" <<<"$out"
}

# Why not plain `go install ...@v1.24.2`: the module zip lacks the generated
# build/version/version.txt, and a binary built with FerretDB as the main
# module panics at startup without it ("Invalid build/version/version.txt
# file content"). So fetch the module with `go mod download`, copy it, write
# version.txt and `go build` it. Runs in a subshell (backgrounded below).
build_ferretdb() {
    local src build_dir
    src="$(go mod download -json "${FERRETDB_MODULE}@${FERRETDB_VERSION}" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -n "$src" && -d "$src" ]] || { echo "go mod download gave no module directory" >&2; return 1; }
    build_dir="$(mktemp -d -t memlane-ferretdb-src.XXXXXX)"
    # shellcheck disable=SC2064  # expand now: build_dir is local
    trap "rm -rf '$build_dir'" EXIT
    cp -r "$src/." "$build_dir/"
    chmod -R u+w "$build_dir"
    echo "$FERRETDB_VERSION" >"$build_dir/build/version/version.txt"
    # A temporary name of its own: two checkouts building at once never write one file.
    local out
    out="$(mktemp "$FERRETDB_BIN.XXXXXX")"
    (cd "$build_dir" && GOFLAGS=-mod=mod CGO_ENABLED="${CGO_ENABLED:-0}" \
        go build -trimpath -o "$out" ./cmd/ferretdb) || { rm -f "$out"; return 1; }
    chmod 755 "$out"
    mv -f "$out" "$FERRETDB_BIN"
}

if [[ -n "${MEMLANE_TEST_MONGODB_URL:-}" ]]; then
    log "MEMLANE_TEST_MONGODB_URL is set: skipping FerretDB install"
else
    if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
        export PATH="/usr/local/go/bin:$PATH"
    fi
    command -v go >/dev/null 2>&1 || die "'go' not found on PATH; it is needed to build FerretDB"
    if ferretdb_is_current; then
        log "FerretDB ${FERRETDB_VERSION} already installed at $FERRETDB_BIN"
    else
        mkdir -p "$BIN_DIR"
        ferretdb_log="$(mktemp -t memlane-ferretdb-build.XXXXXX.log)"
        log "building FerretDB ${FERRETDB_VERSION} into $FERRETDB_BIN (go mod download + go build, in background; log: $ferretdb_log)"
        ( set -euo pipefail; build_ferretdb ) >"$ferretdb_log" 2>&1 &
        ferretdb_pid=$!
    fi
fi

# --- PostgreSQL, from Debian packages --------------------------------------

have_postgres() {
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null \
        && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

apt_lists_present() {
    compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null
}

if [[ -n "${MEMLANE_TEST_POSTGRES_URL:-}" ]]; then
    log "MEMLANE_TEST_POSTGRES_URL is set: skipping PostgreSQL install"
elif have_postgres; then
    log "PostgreSQL server already installed: $(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
else
    command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is not installed and apt-get is unavailable"
    SUDO=""
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "PostgreSQL is not installed; need root or sudo to apt-get install it"
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_install() {
        $SUDO apt-get install -y -o DPkg::Lock::Timeout=300 --no-install-recommends postgresql
    }
    if ! apt_lists_present || ! apt-cache show postgresql >/dev/null 2>&1; then
        log "apt package lists missing or stale: running apt-get update"
        $SUDO apt-get update
    fi
    log "installing PostgreSQL server: apt-get install postgresql"
    if ! apt_install; then
        log "apt-get install failed; running apt-get update and retrying once"
        $SUDO apt-get update
        apt_install
    fi
    have_postgres || die "apt-get installed 'postgresql' but no /usr/lib/postgresql/*/bin/postgres was found"
    log "PostgreSQL server installed: $(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
fi

# --- FerretDB: wait for the build ------------------------------------------

if [[ -n "$ferretdb_pid" ]]; then
    log "waiting for the FerretDB build to finish..."
    if ! wait "$ferretdb_pid"; then
        tail -n 50 "$ferretdb_log" >&2 || true
        die "build of FerretDB ${FERRETDB_VERSION} failed (full log: $ferretdb_log)"
    fi
    ferretdb_is_current || die "FerretDB build finished but $FERRETDB_BIN is missing or not ${FERRETDB_VERSION}"
    rm -f "$ferretdb_log"
    log "FerretDB ${FERRETDB_VERSION} installed at $FERRETDB_BIN"
fi

log "done"
