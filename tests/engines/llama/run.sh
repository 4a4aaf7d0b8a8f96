#!/usr/bin/env bash
# llama_engine_test: a real llama.cpp engine (node-llama-cpp 3.21.1's prebuilt
# CPU binaries, from the npm registry) behind server.mjs, an OpenAI-compatible
# HTTP server, driven by the official `openai` npm client (test.mjs). The
# model is a tiny random-weight GGUF that the test writes itself
# (make_gguf.mjs). See README.md.
#
#   tests/engines/llama/run.sh [--install-only]
#
# Installs the pinned packages into tests/engines/llama/node_modules (npm ci)
# when they are missing or older than package-lock.json, under a lock so that
# two runs do not install at once. Only the npm registry is used: the
# linux-x64 CPU binaries are the package @node-llama-cpp/linux-x64 (a direct
# dependency); the GPU variants (optional dependencies) are left out, and
# node-llama-cpp's postinstall, which could download or build llama.cpp, is
# turned off with NODE_LLAMA_CPP_SKIP_DOWNLOAD.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

fail() {
  echo "llama engine test: $*" >&2
  exit 1
}

command -v node >/dev/null 2>&1 || fail "node not found: install the Debian package nodejs (scripts/install-deps.sh)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 20 ] || fail "node $(node --version) is too old: node-llama-cpp 3.21.1 needs node 20 or newer"
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] ||
  fail "the pinned llama.cpp binaries (@node-llama-cpp/linux-x64) are for Linux x86_64 only, not $(uname -s)-$(uname -m)"

install_needed() {
  local stamp="$here/node_modules/.package-lock.json"
  [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ] ||
    [ ! -f "$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ]
}

if install_needed; then
  command -v npm >/dev/null 2>&1 || fail "npm not found: install the Debian package npm (scripts/install-deps.sh)"
  command -v flock >/dev/null 2>&1 || fail "flock not found: install the Debian package util-linux"
  (
    flock -w 600 9 || fail "waited 10 minutes for another npm ci in $here"
    if install_needed; then # another run may have installed meanwhile
      echo "llama engine test: npm ci in $here"
      cd "$here" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true nice -n 10 npm ci --no-audit --no-fund --omit=optional --loglevel=error ||
        fail "npm ci failed in $here"
    fi
  ) 9>"$here/node_modules.lock" || exit 1
fi

# --install-only: only the packages (tests/serving deploys this engine).
[ "${1:-}" = "--install-only" ] && exit 0
cd "$here" && exec node --test --test-reporter=spec --test-timeout=100000 "$here/test.mjs"
