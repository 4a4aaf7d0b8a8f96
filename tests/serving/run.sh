#!/usr/bin/env bash
# serving_test: model deployments end to end (issue 18): a real `drover up`
# (scheduler, agent, gateway), deployments of drover-test-engine and of a real
# llama.cpp engine (tests/engines/llama), and the official openai npm client.
#
#   DROVER_BINARY=build/apps/drover/drover \
#   TEST_ENGINE_BINARY=build/apps/drover-test-engine/drover-test-engine tests/serving/run.sh
#
# Installs the pinned client into tests/serving/node_modules, and the llama
# engine's packages into tests/engines/llama/node_modules, with npm ci when
# missing or older than their lock files, each under a lock.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail() { echo "serving test: $*" >&2; exit 1; }

: "${DROVER_BINARY:?DROVER_BINARY must name the drover binary}"
: "${TEST_ENGINE_BINARY:?TEST_ENGINE_BINARY must name the drover-test-engine binary}"
command -v node >/dev/null 2>&1 || fail "node not found: install the Debian package nodejs (scripts/install-deps.sh)"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || fail "node $(node --version) is too old (20 or newer)"

stamp="$here/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
  command -v npm >/dev/null 2>&1 || fail "npm not found: install the Debian package npm (scripts/install-deps.sh)"
  (
    flock -w 600 9 || fail "waited 10 minutes for another npm ci in $here"
    if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
      cd "$here" && npm ci --no-audit --no-fund --loglevel=error || fail "npm ci failed in $here"
    fi
  ) 9>"$here/node_modules.lock" || exit 1
fi
"$here/../engines/llama/run.sh" --install-only || fail "cannot install the llama engine (tests/engines/llama)"
export DROVER_BINARY TEST_ENGINE_BINARY
cd "$here" && exec node --test --test-reporter=spec --test-concurrency=1 "$here/serving.test.mjs"
