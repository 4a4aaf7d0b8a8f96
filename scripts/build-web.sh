#!/usr/bin/env bash
# Bundles the web dashboard (web/src) into OUT_DIR: index.html plus
# content-hashed app-*.js and app-*.css (uPlot's stylesheet included).
#
#   scripts/build-web.sh OUT_DIR
#
# Installs web/node_modules with `npm ci` (exact versions of
# web/package-lock.json) when it is missing or older than the lock file;
# after that it runs offline. CMake runs this (src/drover/web/CMakeLists.txt)
# and embeds OUT_DIR into the drover binary. Needs node >= 18 and npm.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
web=$root/web

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "build-web: '$tool' not found; install Debian's nodejs and npm (scripts/install-deps.sh)" >&2
    exit 1
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "build-web: node $(node --version) is too old; the dashboard build needs node >= 18" >&2
  exit 1
fi

# Several build directories may bundle at once; they share web/node_modules,
# so only one of them may run npm ci. The lock is the script file itself.
if command -v flock >/dev/null 2>&1; then
  exec 9<"${BASH_SOURCE[0]}"
  flock 9
fi

if [ ! -d "$web/node_modules" ] || [ "$web/package-lock.json" -nt "$web/node_modules" ]; then
  echo "build-web: installing web/node_modules (npm ci)"
  # --ignore-scripts: esbuild's postinstall only re-checks the platform
  # binary that npm already installed from the lock file.
  (cd "$web" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  touch "$web/node_modules"
fi

node "$web/build.mjs" "$out"
