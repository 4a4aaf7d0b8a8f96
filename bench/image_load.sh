#!/usr/bin/env bash
# Loading an image from an archive, as an operator of an air-gapped cluster
# does (issue 38, docs/containers.md "From an archive"), side by side in one
# run on the same archive: `drover images load FILE --node N` through the
# CLI (the upload to the server, the node's fetch, its checks and skopeo's
# copy into the node's store) against `podman load -i FILE` into a fresh
# podman storage; then a job of the loaded image, which must start cached.
#
#   sudo bench/image_load.sh                 # RUNS=3 MB=1024
#
# Needs root and what scripts/install-deps.sh installs (skopeo, umoci,
# busybox-static, podman). Everything lives in temp dirs removed at exit.
set -euo pipefail

RUNS=${RUNS:-3}
MB=${MB:-1024}
[[ $EUID -eq 0 ]] || { echo "image_load.sh: run as root (the store and podman need it)" >&2; exit 1; }
for t in skopeo umoci busybox podman; do
  command -v "$t" >/dev/null || { echo "image_load.sh: missing $t" >&2; exit 1; }
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DROVER=${DROVER:-$ROOT/build/apps/drover/drover}
B=$(mktemp -d /tmp/drover-bench-load.XXXXXX)
PODMAN_DIR=$B/podman
PODMAN=(podman --root "$PODMAN_DIR/storage" --runroot "$PODMAN_DIR/run" --storage-driver overlay)
cleanup_all() {
  "${PODMAN[@]}" rmi -af >/dev/null 2>&1 || true
  rm -rf "$B"
}
trap cleanup_all EXIT

# busybox-static and MB MiB of random bytes, saved as docker save would.
echo "building an image of busybox + ${MB} MiB and saving it as a docker-archive ..."
umoci init --layout "$B/layout" >/dev/null
umoci new --image "$B/layout:v1" >/dev/null
umoci unpack --image "$B/layout:v1" "$B/bundle" >/dev/null
mkdir -p "$B/bundle/rootfs/bin"
cp "$(command -v busybox)" "$B/bundle/rootfs/bin/busybox"
for a in sh true; do ln -sf busybox "$B/bundle/rootfs/bin/$a"; done
head -c "$((MB << 20))" /dev/urandom >"$B/bundle/rootfs/blob"
umoci repack --image "$B/layout:v1" "$B/bundle" >/dev/null
umoci config --image "$B/layout:v1" --config.cmd=true >/dev/null
rm -rf "$B/bundle"
REF=localhost/loaded:v1
skopeo copy --quiet "oci:$B/layout:v1" "docker-archive:$B/image.tar:$REF"
echo "archive: $(du -h "$B/image.tar" | cut -f1)"

secs() { python3 -c "print(f'{$2-$1:.2f}')"; }
for i in $(seq "$RUNS"); do
  # A fresh node each run; neither starts behind the other's dirty pages.
  # shellcheck source=bench/local_up.sh
  source "$ROOT/bench/local_up.sh"
  NODE=$("$DROVER" nodes -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"][0]["name"])')
  sync
  start=$(date +%s.%N)
  "$DROVER" images load "$B/image.tar" --node "$NODE" >"$B/load.out"
  end=$(date +%s.%N)
  echo "drover images load $i: $(secs "$start" "$end") s ($(cut -c1-80 "$B/load.out"))"
  start=$(date +%s.%N)
  id=$("$DROVER" submit --gpus 1 --image "$REF" --wait -- true | head -1)
  end=$(date +%s.%N)
  echo "  then a job of it: $(secs "$start" "$end") s ($("$DROVER" job "$id" | grep -o 'image cached\|image pulled in [0-9.]* s'))"
  cleanup
  "${PODMAN[@]}" rmi -af >/dev/null 2>&1 || true
  sync
  start=$(date +%s.%N)
  "${PODMAN[@]}" load -q -i "$B/image.tar" >/dev/null
  end=$(date +%s.%N)
  echo "podman load $i: $(secs "$start" "$end") s"
done
