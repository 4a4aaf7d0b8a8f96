#!/usr/bin/env bash
# Builds a test image offline and pushes it to a registry on loopback:
# Debian's busybox-static, plus each PROGRAM at /bin/<its name> with the
# shared libraries `ldd` says it needs (at their own paths), made with umoci
# and pushed with skopeo (plain HTTP).
#
#   tests/support/push_test_image.sh 127.0.0.1:5000 engine:v1 build/apps/drover-test-engine/drover-test-engine
set -euo pipefail
host=$1
ref=$2
shift 2
name=${ref%%:*}
tag=${ref#*:}
b=$(mktemp -d)
trap 'rm -rf "$b"' EXIT
umoci init --layout "$b/layout" >/dev/null
umoci new --image "$b/layout:$tag" >/dev/null
umoci unpack --image "$b/layout:$tag" "$b/bundle" >/dev/null
r=$b/bundle/rootfs
mkdir -p "$r/bin" "$r/etc" "$r/tmp"
chmod 1777 "$r/tmp"
cp "$(command -v busybox)" "$r/bin/busybox"
for a in sh cat echo ls sleep true env; do ln -sf busybox "$r/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
for p in "$@"; do
  cp "$p" "$r/bin/$(basename "$p")"
  for lib in $(ldd "$p" | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
done
umoci repack --image "$b/layout:$tag" "$b/bundle" >/dev/null
skopeo copy --quiet --dest-tls-verify=false "oci:$b/layout:$tag" "docker://$host/$name:$tag"
