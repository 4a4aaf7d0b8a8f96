#!/usr/bin/env bash
# The official openai npm client against the gateway (tests/gateway/*.test.mjs).
#
#   GATEWAY_HARNESS=build/tests/gateway/gateway_harness \
#   TEST_ENGINE=build/apps/drover-test-engine/drover-test-engine tests/gateway/run.sh
#
# Installs the client pinned by package-lock.json into tests/gateway/node_modules
# (npm ci) when it is missing or older than the lock file.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail() { echo "gateway openai tests: $*" >&2; exit 1; }

: "${GATEWAY_HARNESS:?GATEWAY_HARNESS must name the gateway_harness binary}"
: "${TEST_ENGINE:?TEST_ENGINE must name the drover-test-engine binary}"
command -v node >/dev/null 2>&1 || fail "node not found: install the Debian package nodejs (scripts/install-deps.sh)"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 18 ] || fail "node $(node --version) is too old: the openai client needs node 18 or newer"

stamp="$here/node_modules/.package-lock.json"
if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
  command -v npm >/dev/null 2>&1 || fail "npm not found: install the Debian package npm (scripts/install-deps.sh)"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed in $here"
fi
export GATEWAY_HARNESS TEST_ENGINE
# A certificate for 127.0.0.1 for the HTTPS tests (gateway_tls.test.mjs),
# which Node trusts through NODE_EXTRA_CA_CERTS; without openssl they skip.
tls_dir="$(mktemp -d)"
trap 'rm -rf "$tls_dir"' EXIT
if command -v openssl >/dev/null 2>&1 &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$tls_dir/key.pem" -out "$tls_dir/cert.pem" \
    >/dev/null 2>&1; then
  export GATEWAY_TLS_CERT="$tls_dir/cert.pem" GATEWAY_TLS_KEY="$tls_dir/key.pem" NODE_EXTRA_CA_CERTS="$tls_dir/cert.pem"
fi
node --test --test-reporter=spec "$here"/*.test.mjs
