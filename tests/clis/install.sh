#!/usr/bin/env bash
# Install the pinned agent CLIs used by agent-bridge's real-CLI tests (tests/realcli.py).
#
#   tests/clis/install.sh            # npm packages (package-lock.json) + Hermes venv
#   SKIP_HERMES=1 tests/clis/install.sh
#   SKIP_NPM=1    tests/clis/install.sh
#   SKIP_KIMI=1   tests/clis/install.sh
#   KIMI_PYTHON=/path/to/python3.13 tests/clis/install.sh
#
# Idempotent: each part is skipped when its stamp matches (node_modules/.agent-bridge-stamp holds
# the hash of package.json + package-lock.json; .hermes-venv/.agent-bridge-stamp the pip spec).
# Needs node/npm and python3 (>= 3.11) with network access to the npm registry and PyPI only.
# Kimi Code (PyPI kimi-cli) needs Python >= 3.12: it goes into .kimi-venv with the newest such
# Python found (KIMI_PYTHON, python3.14/3.13/3.12 on PATH, then pyenv's versions); without one
# the reason is printed and written to .kimi-skipped, and Kimi's tests skip with it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

HERMES_SPEC="hermes-agent[acp]==0.19.0"
# 1.51.0: the last release of the archived kimi-cli that works (1.52.0 only prints a notice
# pointing to the new Kimi Code CLI, npm @moonshot-ai/kimi-code, which needs Node >= 22.19)
KIMI_SPEC="kimi-cli==1.51.0"
PYTHON="${PYTHON:-python3}"

log() { printf '[tests/clis] %s\n' "$*"; }

install_npm() {
  local want stamp=node_modules/.agent-bridge-stamp
  want="$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "npm: node_modules is up to date with package-lock.json (skip)"
    return
  fi
  log "npm: npm ci --no-audit --no-fund (in $here)"
  local ci_log
  ci_log="$(mktemp)"
  if ! npm ci --no-audit --no-fund >"$ci_log" 2>&1; then
    # The lock lists every platform's optional package of the CLIs (entries without a
    # tarball for the platforms the registry mirror lacks; npm skips them by os/cpu), so
    # `npm ci` accepts it. Should a lock lose them again ("out of sync", EUSAGE),
    # `npm install --no-save` installs the same locked versions without rewriting the lock.
    log "npm: npm ci failed ($(grep -m1 -E 'npm error (code|[A-Za-z`])' "$ci_log" || true))"
    log "npm: retrying with npm install --no-save --no-audit --no-fund"
    npm install --no-save --no-audit --no-fund
  else
    cat "$ci_log"
  fi
  rm -f "$ci_log"
  echo "$want" >"$stamp"
  log "npm: installed; versions:"
  local bin scratch
  scratch="$(mktemp -d)"
  for bin in \
    node_modules/@anthropic-ai/claude-code-linux-x64/claude \
    node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex \
    node_modules/.bin/gemini \
    node_modules/opencode-linux-x64/bin/opencode \
    node_modules/@kilocode/cli-linux-x64/bin/kilo \
    node_modules/.bin/pi \
    node_modules/.bin/qwen \
    node_modules/@factory/cli-linux-x64/bin/droid \
    node_modules/@github/copilot-linux-x64/copilot; do
    if [[ -x "$bin" ]]; then
      printf '  %-80s %s\n' "$bin" "$(HOME="$scratch" "$bin" --version 2>&1 | grep -v "copilot update" | tail -1)"
    else
      printf '  %-80s MISSING\n' "$bin"
    fi
  done
  rm -rf "$scratch"
}

install_hermes() {
  local venv=.hermes-venv stamp=.hermes-venv/.agent-bridge-stamp
  if [[ -x "$venv/bin/hermes" && -f "$stamp" && "$(cat "$stamp")" == "$HERMES_SPEC" ]]; then
    log "hermes: $venv has $HERMES_SPEC (skip)"
    return
  fi
  log "hermes: creating $venv with $PYTHON and installing $HERMES_SPEC"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check --no-input -q "$HERMES_SPEC"
  echo "$HERMES_SPEC" >"$stamp"
  log "hermes: installed $("$venv/bin/pip" show hermes-agent 2>/dev/null | grep '^Version')"
}

# A Python >= 3.12 that runs and can import what kimi-cli needs at start (3.12.1's dataclasses
# reject kimi-cli's generic slotted classes: such a venv is dropped and the next one tried).
kimi_pythons() {
  [[ -n "${KIMI_PYTHON:-}" ]] && echo "$KIMI_PYTHON"
  local name dir
  for name in python3.14 python3.13 python3.12; do
    command -v "$name" || true
  done
  if command -v pyenv >/dev/null 2>&1; then
    for dir in $(ls -d "$(pyenv root)"/versions/3.1[2-9]* 2>/dev/null | sort -rV); do
      [[ -x "$dir/bin/python3" ]] && echo "$dir/bin/python3"
    done
  fi
  return 0
}

install_kimi() {
  local venv=.kimi-venv stamp=.kimi-venv/.agent-bridge-stamp py tried=""
  if [[ -x "$venv/bin/kimi" && -f "$stamp" && "$(cat "$stamp")" == "$KIMI_SPEC" ]]; then
    log "kimi: $venv has $KIMI_SPEC (skip)"
    return
  fi
  rm -f .kimi-skipped
  while read -r py; do
    [[ -z "$py" ]] && continue
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      tried+=" $py (not a working Python >= 3.12)"
      continue
    fi
    log "kimi: creating $venv with $py ($("$py" --version 2>&1)) and installing $KIMI_SPEC"
    rm -rf "$venv"
    if "$py" -m venv "$venv" &&
      "$venv/bin/pip" install --disable-pip-version-check --no-input -q "$KIMI_SPEC" &&
      "$venv/bin/python" -c 'import kimi_cli.soul.slash' >/dev/null 2>&1; then
      echo "$KIMI_SPEC" >"$stamp"
      log "kimi: installed $("$venv/bin/kimi" --version 2>&1 | head -1)"
      return
    fi
    tried+=" $py (kimi-cli does not install or start with it)"
    rm -rf "$venv"
  done < <(kimi_pythons)
  local why="no Python >= 3.12 that runs kimi-cli was found (tried:${tried:- nothing on PATH}); set KIMI_PYTHON"
  log "kimi: skipped: $why"
  echo "$why" >.kimi-skipped
}

if [[ -z "${SKIP_NPM:-}" ]]; then install_npm; else log "npm: SKIP_NPM set (skip)"; fi
if [[ -z "${SKIP_HERMES:-}" ]]; then install_hermes; else log "hermes: SKIP_HERMES set (skip)"; fi
if [[ -z "${SKIP_KIMI:-}" ]]; then install_kimi; else log "kimi: SKIP_KIMI set (skip)"; fi
log "done"
