#!/usr/bin/env bash
# The first session's example image (README, docs/containers.md), made
# offline: a registry on loopback (Debian's docker-registry, its data in
# $DATA/registry) and an image built from Debian's busybox-static with umoci,
# pushed there with skopeo as $HOST/drover/example:latest. Idempotent: a
# registry already answering on $HOST is used as it is, an image already
# there is not pushed again. Prints the registry's pid (empty when it was
# already running) on stdout; everything else goes to stderr.
#
#   scripts/example-image.sh DATA [HOST]      # HOST default 127.0.0.1:5000
set -euo pipefail

DATA=$1
HOST=${2:-127.0.0.1:5000}
for t in docker-registry umoci skopeo busybox curl; do
  if ! command -v "$t" >/dev/null; then
    echo "example-image: $t is missing (scripts/install-deps.sh installs it); no example image" >&2
    exit 0
  fi
done

mkdir -p "$DATA/registry"
pid=
if ! curl -sf -o /dev/null "http://$HOST/v2/"; then
  cat >"$DATA/registry/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $(cd "$DATA/registry" && pwd)/data
http:
  addr: $HOST
EOF
  docker-registry serve "$DATA/registry/config.yml" >"$DATA/registry/registry.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://$HOST/v2/" && break; sleep 0.1; done
  if ! curl -sf -o /dev/null "http://$HOST/v2/"; then
    echo "example-image: the registry did not start on $HOST; see $DATA/registry/registry.log" >&2
    kill "$pid" 2>/dev/null || true
    exit 0
  fi
fi

if ! skopeo inspect --raw --tls-verify=false "docker://$HOST/drover/example:latest" >/dev/null 2>&1; then
  b=$(mktemp -d)
  trap 'rm -rf "$b"' EXIT
  umoci init --layout "$b/layout" >/dev/null
  umoci new --image "$b/layout:latest" >/dev/null
  umoci unpack --image "$b/layout:latest" "$b/bundle" >/dev/null
  r=$b/bundle/rootfs
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/work"
  chmod 1777 "$r/tmp"
  chmod 0777 "$r/work"
  cp "$(command -v busybox)" "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do [[ $a == busybox ]] || ln -sf busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
  printf 'hello from an OCI image (busybox %s), run by Drover\n' \
    "$("$r/bin/busybox" | head -1 | awk '{print $2}')" >"$r/etc/motd"
  umoci repack --image "$b/layout:latest" "$b/bundle" >/dev/null
  umoci config --image "$b/layout:latest" --config.workingdir=/work \
    --config.cmd=/bin/sh --config.cmd=-c --config.cmd='cat /etc/motd; id' >/dev/null
  skopeo copy --quiet --dest-tls-verify=false "oci:$b/layout:latest" "docker://$HOST/drover/example:latest" >&2
  echo "example-image: pushed $HOST/drover/example:latest" >&2
fi
echo "$pid"
