#!/usr/bin/env bash
# OCI runtimes on this machine, for issue 38's choice: runc or crun driven
# directly from an OCI bundle, against podman run (image already in storage).
#
#   sudo bench/container_runtimes.sh                  # RUNS=30 WARMUP=5
#   sudo RUNS=50 RESULTS=/tmp/oci bench/container_runtimes.sh
#
# Needs root and the Debian packages runc podman skopeo umoci busybox-static
# hyperfine jq time (crun optional). Everything is made in a temp dir, removed
# at the end (trap on EXIT): a busybox root filesystem (`busybox --install -s`),
# an image of it in a private podman storage (`podman import`), the same image
# as an oci: layout (`podman push ... oci:`), and one bundle (`umoci unpack`)
# whose config.json is edited to the host network, no terminal, args
# ["/bin/true"]. It measures, on that one image:
#   1. start to exit of /bin/true (hyperfine -N, every command under one
#      `sh -c` so the floor row `sh -c /bin/true` is the same fork+exec cost):
#      `runc run --bundle B ID` (ID unique per run from the sh's $$),
#      `crun run` the same way if crun runs here at all (if it refuses, the
#      error is printed and the row skipped), and
#      `podman run --rm --network host IMG /bin/true`;
#   2. memory: peak RSS of the runtime's process tree over one /bin/true run
#      (`/usr/bin/time`, "Maximum resident set size"), and with a `sleep 30`
#      container running, which processes stay per container (runc in the
#      foreground, runc --detach, podman run -d and its conmon) and their RSS
#      and PSS;
#   3. how each fails: exit code and first line of stderr for a missing
#      binary (/nonexistent), a missing rootfs, and an exit code passed through.
# Podman gets its own CONTAINERS_CONF (ulimits at the hard limits, runtime
# runc, cgroupfs, file events; see shared Debian notes: the default ulimits
# fail on these hosts). The results are printed; RESULTS=DIR keeps the
# hyperfine JSON/markdown and the raw error output there.
set -euo pipefail

RUNS=${RUNS:-30}
WARMUP=${WARMUP:-5}
RESULTS=${RESULTS:-}
IMG=localhost/drover-bench-busybox:latest

if [[ $EUID -ne 0 ]]; then
  echo "container_runtimes.sh: run as root (runc and podman need it here)" >&2
  exit 1
fi
for t in runc podman umoci hyperfine jq busybox /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "container_runtimes.sh: missing $t" >&2; exit 1; }
done
if ldd "$(command -v busybox)" >/dev/null 2>&1; then
  echo "container_runtimes.sh: busybox is dynamic; install busybox-static" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/drover-oci.XXXXXX)
BG_PIDS=()
PODMAN=(podman --root "$WORK/storage" --runroot "$WORK/runroot" --storage-driver overlay)
RUNC=(runc --root "$WORK/runc-state")
CRUN=(crun --root "$WORK/crun-state")

cleanup() {
  set +e
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for id in $("${RUNC[@]}" list -q 2>/dev/null); do "${RUNC[@]}" delete -f "$id" >/dev/null 2>&1; done
  if command -v crun >/dev/null; then
    for id in $("${CRUN[@]}" list -q 2>/dev/null); do "${CRUN[@]}" delete -f "$id" >/dev/null 2>&1; done
  fi
  "${PODMAN[@]}" rm -af -t 0 >/dev/null 2>&1
  "${PODMAN[@]}" system reset -f >/dev/null 2>&1
  findmnt -rn -o TARGET | grep "^$WORK" | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '%s\n' "$*"; }

# --- what this machine is ----------------------------------------------------
say "# OCI runtimes, $(date -u '+%Y-%m-%d %H:%M UTC')"
say "- machine: $(nproc) cores, kernel $(uname -r), /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup)," \
  "unified: $([[ -d /sys/fs/cgroup/unified ]] && echo "yes (controllers: $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null))" || echo no)"
say "- runc: $(runc --version | head -1)"
command -v crun >/dev/null && say "- crun: $(crun --version | head -1)"
say "- podman: $(podman --version)"
say "- load before timing: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- root filesystem, image, bundle -------------------------------------------
R=$WORK/rootfs
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,etc,root}
cp "$(command -v busybox)" "$R/bin/busybox"
chroot "$R" /bin/busybox --install -s
tar -C "$R" -cf "$WORK/rootfs.tar" .

# Podman's children (conmon, runc) run with a hard RLIMIT_NPROC of 32768 here
# even where the shell's is higher (seen in conmon's /proc/PID/limits): ask
# for no more than that, or runc's setrlimit fails with EPERM.
NOFILE=$(ulimit -Hn)
NPROC=$(ulimit -Hu)
((NPROC > 32768)) && NPROC=32768
cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$WORK/containers.conf

"${PODMAN[@]}" import -q --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin' "$WORK/rootfs.tar" "$IMG" >/dev/null
"${PODMAN[@]}" push -q "$IMG" "oci:$WORK/oci:latest"
umoci unpack --image "$WORK/oci:latest" "$WORK/bundle" >/dev/null
BASE=$WORK/bundle/config.json

# bundle NAME ROOT ARGS_JSON: a bundle dir whose config.json is the unpacked
# one with the host network, no terminal, the given rootfs path and args.
bundle() {
  mkdir -p "$WORK/$1"
  jq --arg root "$2" --argjson args "$3" '
    .root.path = $root | .root.readonly = false
    | .process.terminal = false | .process.args = $args
    | .linux.namespaces |= map(select(.type != "network"))' "$BASE" >"$WORK/$1/config.json"
}
bundle b-true "$WORK/bundle/rootfs" '["/bin/true"]'
bundle b-sleep "$WORK/bundle/rootfs" '["/bin/sleep","30"]'
bundle b-noexe "$WORK/bundle/rootfs" '["/nonexistent"]'
bundle b-noroot "$WORK/missing-rootfs" '["/bin/true"]'
bundle b-exit3 "$WORK/bundle/rootfs" '["/bin/sh","-c","exit 3"]'

# Sanity: each runtime runs the bundle once.
"${RUNC[@]}" run --bundle "$WORK/b-true" probe-runc </dev/null
"${PODMAN[@]}" run --rm --network host "$IMG" /bin/true </dev/null

CRUN_OK=0
if command -v crun >/dev/null; then
  if "${CRUN[@]}" run --bundle "$WORK/b-true" probe-crun </dev/null 2>"$WORK/crun-probe.err"; then
    CRUN_OK=1
  else
    say "- crun refuses here (exit $?): $(head -1 "$WORK/crun-probe.err")"
    "${CRUN[@]}" delete -f probe-crun >/dev/null 2>&1 || true
    rc=0
    crun --root "$WORK/crun-state" --cgroup-manager=disabled run --bundle "$WORK/b-true" probe-crun2 \
      </dev/null 2>"$WORK/crun-probe2.err" || rc=$?
    say "- crun --cgroup-manager=disabled: exit $rc: $(head -1 "$WORK/crun-probe2.err")"
    "${CRUN[@]}" delete -f probe-crun2 >/dev/null 2>&1 || true
  fi
fi

# --- 1. start to exit ---------------------------------------------------------
say ""
say "## Start to exit of /bin/true (hyperfine, $WARMUP warmup, $RUNS runs)"
cmds=(-n "sh -c /bin/true (floor)" "sh -c /bin/true"
  -n "runc run (bundle)" "sh -c '${RUNC[*]} run --bundle $WORK/b-true r\$\$ </dev/null'")
if ((CRUN_OK)); then
  cmds+=(-n "crun run (bundle)" "sh -c '${CRUN[*]} run --bundle $WORK/b-true c\$\$ </dev/null'")
fi
cmds+=(-n "podman run --rm (cached image)" "sh -c '${PODMAN[*]} run --rm --network host $IMG /bin/true </dev/null'")
hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
  --export-json "$WORK/start.json" --export-markdown "$WORK/start.md" "${cmds[@]}" >"$WORK/hyperfine.out"
jq -r '.results[] | "| \(.command) | \(.mean*1000*100|round/100) ± \(.stddev*1000*100|round/100) | \(.min*1000*100|round/100) | \(.max*1000*100|round/100) |"' \
  "$WORK/start.json" | { say "| command | mean ± σ (ms) | min (ms) | max (ms) |"; say "| --- | --- | --- | --- |"; cat; }

# --- 2. memory ----------------------------------------------------------------
kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo "?"; }
pss() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup" 2>/dev/null || echo "?"; }
mib() { awk -v k="$1" 'BEGIN { if (k == "?") print "?"; else printf "%.1f", k / 1024 }'; }
peak() { # label cmd...: max RSS over 5 runs of the command's process tree
  local label=$1 max=0 min=999999999 k
  shift
  for _ in 1 2 3 4 5; do
    /usr/bin/time -f %M -o "$WORK/time.out" "$@" </dev/null >/dev/null
    k=$(tail -1 "$WORK/time.out")
    ((k > max)) && max=$k
    ((k < min)) && min=$k
  done
  say "| $label | $(mib "$min") - $(mib "$max") |"
}
say ""
say "## Peak RSS over one /bin/true run (/usr/bin/time, 5 runs, min - max)"
say "| process tree | peak RSS (MiB) |"
say "| --- | --- |"
# (peak() reuses one id five times: `run` without --detach deletes its container at exit)
peak "runc run" "${RUNC[@]}" run --bundle "$WORK/b-true" m
if ((CRUN_OK)); then peak "crun run" "${CRUN[@]}" run --bundle "$WORK/b-true" cm; fi
peak "podman run --rm (conmon is double-forked: not counted)" "${PODMAN[@]}" run --rm --network host "$IMG" /bin/true

# wait_running RUNTIME... ID: until the state says running (5 s at most)
wait_running() {
  local id=${*: -1}
  for _ in $(seq 100); do
    [[ $("${@:1:$#-1}" state "$id" 2>/dev/null | jq -r .status) == running ]] && return 0
    sleep 0.05
  done
  echo "container $id never ran" >&2
  return 1
}
say ""
say "## What stays per running container (sleep 30), RSS / PSS in MiB"
say "| runtime | processes left besides the job | RSS | PSS |"
say "| --- | --- | --- | --- |"
"${RUNC[@]}" run --bundle "$WORK/b-sleep" fg </dev/null >/dev/null &
fgpid=$!
BG_PIDS+=("$fgpid")
wait_running "${RUNC[@]}" fg
say "| runc run (foreground) | runc itself (pid $fgpid) | $(mib "$(kib "$fgpid")") | $(mib "$(pss "$fgpid")") |"
jobpid=$("${RUNC[@]}" state fg | jq -r .pid)
CG_NOTE="runc's job cgroups with no linux.cgroupsPath: $(grep -E ':(memory|pids):' "/proc/$jobpid/cgroup" | tr '\n' ' ')"
"${RUNC[@]}" kill fg KILL
wait "$fgpid" || true
BG_PIDS=()
"${RUNC[@]}" run --detach --bundle "$WORK/b-sleep" bg </dev/null >/dev/null 2>&1
jobpid=$("${RUNC[@]}" state bg | jq -r .pid)
say "| runc run --detach | none (job's parent: pid $(awk '{print $4}' "/proc/$jobpid/stat"), $(cat "/proc/$(awk '{print $4}' "/proc/$jobpid/stat")/comm")) | 0 | 0 |"
"${RUNC[@]}" delete -f bg
if ((CRUN_OK)); then
  "${CRUN[@]}" run --bundle "$WORK/b-sleep" cfg </dev/null >/dev/null &
  fgpid=$!
  BG_PIDS+=("$fgpid")
  wait_running "${CRUN[@]}" cfg
  say "| crun run (foreground) | crun itself (pid $fgpid) | $(mib "$(kib "$fgpid")") | $(mib "$(pss "$fgpid")") |"
  "${CRUN[@]}" kill cfg KILL
  wait "$fgpid" || true
  BG_PIDS=()
fi
cid=$("${PODMAN[@]}" run -d --network host "$IMG" /bin/sleep 30)
jobpid=$("${PODMAN[@]}" inspect -f '{{.State.Pid}}' "$cid")
ppid=$(awk '{print $4}' "/proc/$jobpid/stat")
say "| podman run -d | $(cat "/proc/$ppid/comm") (pid $ppid, parent pid $(awk '{print $4}' "/proc/$ppid/stat")); podman itself exited | $(mib "$(kib "$ppid")") | $(mib "$(pss "$ppid")") |"
CG_NOTE_PODMAN="podman's (no --cgroup-parent): $(grep -E ':(memory|pids):' "/proc/$jobpid/cgroup" | tr '\n' ' ')"
ps -o pid,ppid,rss,args --forest -g "$(ps -o sid= -p "$ppid" | tr -d ' ')" >"$WORK/podman-tree.txt" 2>&1 || true
"${PODMAN[@]}" rm -f -t 0 "$cid" >/dev/null

# --- 3. how each fails --------------------------------------------------------
fail() { # label cmd...: exit code and the first line of stderr
  local label=$1 rc=0
  shift
  "$@" </dev/null >"$WORK/fail.out" 2>"$WORK/fail.err" || rc=$?
  [[ -n $RESULTS ]] && { echo "== $label"; cat "$WORK/fail.err"; } >>"$WORK/failures.txt"
  say "| $label | $rc | \`$(head -1 "$WORK/fail.err" | sed "s|$WORK|\$WORK|g; s/|/\\\\|/g" | cut -c1-220)\` |"
}
say ""
say "- $CG_NOTE"
say "- $CG_NOTE_PODMAN"
say ""
say "## How each fails"
say "| case | exit code | first line of stderr |"
say "| --- | --- | --- |"
fail "runc, /nonexistent" "${RUNC[@]}" run --bundle "$WORK/b-noexe" f1
fail "runc, rootfs missing" "${RUNC[@]}" run --bundle "$WORK/b-noroot" f2
fail "runc, job exits 3" "${RUNC[@]}" run --bundle "$WORK/b-exit3" f3
say "| runc, state left after the failures | $("${RUNC[@]}" list -q | wc -l) containers, $(find /sys/fs/cgroup -maxdepth 5 -type d -name 'f[123]' | wc -l) cgroup dirs | $("${RUNC[@]}" list -q | tr '\n' ' ') |"
for id in $("${RUNC[@]}" list -q); do "${RUNC[@]}" delete -f "$id" >/dev/null 2>&1 || true; done
if ((CRUN_OK)); then
  fail "crun, /nonexistent" "${CRUN[@]}" run --bundle "$WORK/b-noexe" g1
  fail "crun, rootfs missing" "${CRUN[@]}" run --bundle "$WORK/b-noroot" g2
  fail "crun, job exits 3" "${CRUN[@]}" run --bundle "$WORK/b-exit3" g3
  for id in $("${CRUN[@]}" list -q); do "${CRUN[@]}" delete -f "$id" >/dev/null 2>&1 || true; done
elif command -v crun >/dev/null; then
  fail "crun, the plain /bin/true bundle" "${CRUN[@]}" run --bundle "$WORK/b-true" g0
  "${CRUN[@]}" delete -f g0 >/dev/null 2>&1 || true
fi
fail "podman, /nonexistent" "${PODMAN[@]}" run --rm --network host "$IMG" /nonexistent
fail "podman, image missing" "${PODMAN[@]}" run --rm --network host --pull never localhost/drover-missing:latest /bin/true
fail "podman --rootfs, rootfs missing" "${PODMAN[@]}" run --rm --network host --rootfs "$WORK/missing-rootfs" /bin/true
fail "podman, job exits 3" "${PODMAN[@]}" run --rm --network host "$IMG" /bin/sh -c 'exit 3'
say "| podman, containers left after the failures | $("${PODMAN[@]}" ps -aq | wc -l) | |"

if [[ -n $RESULTS ]]; then
  mkdir -p "$RESULTS"
  cp "$WORK"/start.json "$WORK"/start.md "$WORK"/hyperfine.out "$WORK"/podman-tree.txt "$RESULTS"/
  [[ -f $WORK/failures.txt ]] && cp "$WORK/failures.txt" "$RESULTS"/
  [[ -f $WORK/crun-probe.err ]] && cp "$WORK/crun-probe.err" "$RESULTS"/
  say ""
  say "(raw files in $RESULTS)"
fi
