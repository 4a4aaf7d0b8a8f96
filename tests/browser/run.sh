#!/usr/bin/env bash
# Runs the dashboard's browser tests (tests/browser/*.test.mjs), one file at a
# time, each with node's built-in test runner, against headless chromium.
#
#   DROVER_BINARY=build/apps/drover/drover ARTIFACTS=build/test-artifacts/browser \
#     tests/browser/run.sh [FILE.test.mjs ...]
#
# Installs playwright-core into tests/browser/node_modules (npm ci) when it is
# missing or older than package-lock.json. A missing chromium fails the run;
# DROVER_SKIP_BROWSER=1 skips it (exit 77, which CTest reports as skipped).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ "${DROVER_SKIP_BROWSER:-0}" = "1" ]; then
  echo "browser tests skipped: DROVER_SKIP_BROWSER=1"
  exit 77
fi

fail() {
  echo "browser tests: $*" >&2
  echo "browser tests: set DROVER_SKIP_BROWSER=1 to skip them" >&2
  exit 1
}

: "${DROVER_BINARY:?DROVER_BINARY must name the drover binary under test}"
[ -x "$DROVER_BINARY" ] || fail "DROVER_BINARY '$DROVER_BINARY' is not an executable"

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] || fail "chromium not found at $CHROMIUM: install the Debian package chromium (scripts/install-deps.sh) or set CHROMIUM"
export CHROMIUM

command -v node >/dev/null 2>&1 || fail "node not found: install the Debian package nodejs (scripts/install-deps.sh)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 18 ] || fail "node $(node --version) is too old: the tests need node 18 or newer"

# playwright-core, pinned by package-lock.json, in tests/browser/node_modules.
stamp="$here/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
  command -v npm >/dev/null 2>&1 || fail "npm not found: install the Debian package npm (scripts/install-deps.sh)"
  echo "browser tests: npm ci in $here"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed in $here"
fi

export ARTIFACTS="${ARTIFACTS:-$here/../../build/test-artifacts/browser}"
mkdir -p "$ARTIFACTS"

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=("$here"/*.test.mjs)
fi

# One file at a time: each test starts its own drover and chromium.
failed=()
for f in "${files[@]}"; do
  echo "=== $(basename "$f")"
  if ! node --test --test-reporter=spec "$f"; then
    failed+=("$(basename "$f")")
  fi
done

echo "browser tests: artifacts in $ARTIFACTS"
if [ ${#failed[@]} -ne 0 ]; then
  echo "browser tests: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "browser tests: all passed (${#files[@]} files)"
