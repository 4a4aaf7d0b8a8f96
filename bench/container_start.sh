#!/usr/bin/env bash
# Container starts as a user measures them, through the CLI, side by side
# in one run on the same image (issue 38's goals, docs/performance.md
# "Container starts"):
#   1. cached start: `drover submit --image REF --wait -- true` against a
#      bare `drover submit --wait -- true` and against `podman run --rm
#      --network host REF true` (image already in podman's storage);
#   2. cold start of a 1 GiB image (incompressible, one layer) from the local
#      registry: `drover submit --image REF --wait -- true` on a fresh node
#      (a new `drover up` each run) against `podman pull REF && podman run
#      --rm REF true` on a fresh podman storage;
#   3. 8 jobs on one node wanting the same new image at once: how many times
#      the registry served its layer.
#
#   sudo bench/container_start.sh                 # RUNS=20 COLD_RUNS=3
#   sudo RUNS=30 COLD_MB=1024 bench/container_start.sh
#
# Needs root and what scripts/install-deps.sh installs (runc, skopeo, umoci,
# docker-registry, busybox-static, podman) plus hyperfine. Everything lives
# in a temp dir removed at exit.
set -euo pipefail

RUNS=${RUNS:-20}
COLD_RUNS=${COLD_RUNS:-3}
COLD_MB=${COLD_MB:-1024}
[[ $EUID -eq 0 ]] || { echo "container_start.sh: run as root (runc and podman need it)" >&2; exit 1; }
for t in runc skopeo umoci docker-registry busybox podman hyperfine curl; do
  command -v "$t" >/dev/null || { echo "container_start.sh: missing $t" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DROVER=${DROVER:-$ROOT/build/apps/drover/drover}
REG=$(mktemp -d /tmp/drover-bench-registry.XXXXXX)
REG_PID=
PODMAN_DIR=$(mktemp -d /tmp/drover-bench-podman.XXXXXX)
cleanup_registry() {
  [[ -n $REG_PID ]] && kill "$REG_PID" 2>/dev/null && { wait "$REG_PID" 2>/dev/null || true; }
  podman --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" rm -af >/dev/null 2>&1 || true
  rm -rf "$REG" "$PODMAN_DIR"
}

# The registry, on a free port.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$REG/config.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $REG/data
http:
  addr: 127.0.0.1:$PORT
EOF
docker-registry serve "$REG/config.yml" >"$REG/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done
HOST=127.0.0.1:$PORT

# An image from busybox-static (and, for the cold start, a file of random bytes).
make_image() {  # name extra_mb
  local name=$1 mb=$2 b=$REG/build-$1
  umoci init --layout "$b/layout" >/dev/null
  umoci new --image "$b/layout:v1" >/dev/null
  umoci unpack --image "$b/layout:v1" "$b/bundle" >/dev/null
  mkdir -p "$b/bundle/rootfs/bin" "$b/bundle/rootfs/tmp"
  cp "$(command -v busybox)" "$b/bundle/rootfs/bin/busybox"
  for a in sh true cat sleep; do ln -sf busybox "$b/bundle/rootfs/bin/$a"; done
  if [[ $mb -gt 0 ]]; then head -c "$((mb << 20))" /dev/urandom >"$b/bundle/rootfs/blob"; fi
  umoci repack --image "$b/layout:v1" "$b/bundle" >/dev/null
  umoci config --image "$b/layout:v1" --config.cmd=true >/dev/null
  skopeo copy --quiet --dest-tls-verify=false "oci:$b/layout:v1" "docker://$HOST/$name:v1"
  rm -rf "$b/bundle"
}
echo "building images (busybox; busybox + ${COLD_MB} MiB) and pushing them to $HOST ..."
make_image tiny 0
make_image big "$COLD_MB"
make_image fanout 64

PODMAN=(podman --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" --storage-driver overlay)
cat >"$PODMAN_DIR/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$PODMAN_DIR/containers.conf
"${PODMAN[@]}" pull -q --tls-verify=false "$HOST/tiny:v1" >/dev/null

UP_FLAGS="--insecure-registry $HOST"
# shellcheck source=bench/local_up.sh
source "$ROOT/bench/local_up.sh"
trap 'cleanup; cleanup_registry' EXIT
echo "drover up at $DROVER_ADDR; warming the node's store with $HOST/tiny:v1"
"$DROVER" submit --gpus 1 --image "$HOST/tiny:v1" --wait -- true >/dev/null

echo
echo "== 1. cached start (ms, $RUNS runs each) =="
hyperfine -N --warmup 3 --runs "$RUNS" --export-markdown "$REG/cached.md" \
  -n 'drover submit --wait -- true' "$DROVER submit --gpus 1 --wait -- true" \
  -n 'drover submit --image --wait -- true' "$DROVER submit --gpus 1 --image $HOST/tiny:v1 --wait -- true" \
  -n 'podman run --rm --network host' "${PODMAN[*]} run --rm --network host --tls-verify=false $HOST/tiny:v1 true"
cat "$REG/cached.md"

echo
echo "== 3. 8 jobs wanting one new image (64 MiB layer) at once =="
LAYER=$(skopeo inspect --raw --tls-verify=false "docker://$HOST/fanout:v1" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][-1]["digest"])')
pids=()
for _ in $(seq 8); do
  "$DROVER" submit --gpus 1 --image "$HOST/fanout:v1" --wait -- true >/dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || echo "a job failed"; done
echo "registry served the layer $(grep -c "GET /v2/fanout/blobs/$LAYER" "$REG/registry.log") time(s) for 8 jobs"
"$DROVER" jobs | head -12

# Cold starts: a fresh node each run.
cleanup
trap cleanup_registry EXIT
echo
echo "== 2. cold start of a ${COLD_MB} MiB image from the local registry (s, $COLD_RUNS runs each) =="
for i in $(seq "$COLD_RUNS"); do
  source "$ROOT/bench/local_up.sh"
  # Neither starts behind the other's (or the image build's) dirty pages.
  sync
  start=$(date +%s.%N)
  id=$("$DROVER" submit --gpus 1 --image "$HOST/big:v1" --wait -- true | head -1)
  end=$(date +%s.%N)
  echo "drover run $i: $(python3 -c "print(f'{$end-$start:.2f}')") s ($("$DROVER" job "$id" | grep -o 'image pulled in [0-9.]* s'))"
  cleanup
  "${PODMAN[@]}" rmi -af >/dev/null 2>&1 || true
  sync
  start=$(date +%s.%N)
  "${PODMAN[@]}" pull -q --tls-verify=false "$HOST/big:v1" >/dev/null
  "${PODMAN[@]}" run --rm --network host "$HOST/big:v1" true
  end=$(date +%s.%N)
  echo "podman pull + run $i: $(python3 -c "print(f'{$end-$start:.2f}')") s"
done
cleanup_registry
trap - EXIT
