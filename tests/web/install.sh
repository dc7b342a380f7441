#!/usr/bin/env bash
# Install the browser driver for agent-bridge's web client tests (tests/test_web*.py).
#
#   tests/web/install.sh
#
# playwright-core only (package-lock.json); it drives Debian's chromium (/usr/bin/chromium,
# installed by ./dev test) and never downloads a browser. Idempotent: skipped when
# node_modules/.agent-bridge-stamp holds the hash of package.json + package-lock.json.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { printf '[tests/web] %s\n' "$*"; }

want="$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)"
stamp=node_modules/.agent-bridge-stamp
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  log "npm: node_modules is up to date with package-lock.json (skip)"
  exit 0
fi
if ! command -v npm >/dev/null; then
  log "npm not found: the browser tests will skip"
  exit 0
fi
log "npm: npm ci --no-audit --no-fund (in $here)"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
echo "$want" >"$stamp"
if [[ -x /usr/bin/chromium ]]; then
  log "browser: $(/usr/bin/chromium --version 2>/dev/null | head -1)"
else
  log "browser: /usr/bin/chromium missing (apt-get install chromium); the browser tests will skip"
fi
log "done"
