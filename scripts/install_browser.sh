#!/usr/bin/env bash
# Install the browser tests/test_server_browser.py drives: Chromium from Debian's packages
# (package `chromium`, /usr/bin/chromium). Playwright's own browser download cannot be used:
# the tests reach package registries only, so Playwright launches this binary instead.
#
# Idempotent: skipped when /usr/bin/chromium exists. Needs root or sudo for apt-get.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

log() { echo "[install_browser] $*"; }
die() { echo "[install_browser] ERROR: $*" >&2; exit 1; }

if [[ -x "$CHROMIUM" ]]; then
    log "Chromium already installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "Chromium is not installed and apt-get is unavailable"
SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "Chromium is not installed; need root or sudo to apt-get install it"
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
apt_install() {
    $SUDO apt-get install -y -o DPkg::Lock::Timeout=300 --no-install-recommends chromium
}
if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null || ! apt-cache show chromium >/dev/null 2>&1; then
    log "apt package lists missing or stale: running apt-get update"
    $SUDO apt-get update
fi
log "installing Chromium: apt-get install chromium"
if ! apt_install; then
    log "apt-get install failed; running apt-get update and retrying once"
    $SUDO apt-get update
    apt_install
fi
[[ -x "$CHROMIUM" ]] || die "apt-get installed 'chromium' but $CHROMIUM is missing"
log "Chromium installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
