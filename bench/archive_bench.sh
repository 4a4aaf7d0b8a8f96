#!/usr/bin/env bash
# Bounded state (docs/performance.md, "A million archived jobs"), in one run:
#   1. fills a fresh server's archive with JOBS finished jobs (archive_fill:
#      the records the server's own archiving writes), then measures how
#      long `drover up` takes from its start to /readyz answering 200, and
#      what it logged it recovered;
#   2. `drover jobs` end to end (the CLI process, first page of 500, and
#      filtered and deep pages), SAMPLES runs each, p50 and max; then the
#      server's part alone (bench/list_bench over one warm channel);
#   3. steady churn: arrays of trivial 1-GPU jobs (`true`, real processes)
#      submitted and waited on for CHURN_S seconds with --archive-after 0,
#      sampling the store file (drover.db + its WAL) every 10 s.
# Everything lives in one temp dir, removed at the end with the server.
set -euo pipefail

JOBS=${JOBS:-1000000}
SAMPLES=${SAMPLES:-20}
CHURN_S=${CHURN_S:-300}
DROVER=${DROVER:-build/apps/drover/drover}
FILL=${FILL:-build/bench/archive_fill}
LIST=${LIST:-build/bench/list_bench}
WORK=$(mktemp -d /tmp/drover-archive-bench-XXXXXX)
D=$WORK/data
PID=
cleanup() {
  [[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  pkill -f "supervise --dir $D" 2>/dev/null || true
  [[ -n ${KEEP:-} ]] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "[$(date +%T)] $*" >&2; }
die() { log "error: $*"; exit 1; }
now_ms() { date +%s%3N; }

endpoint() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" "$D/endpoints.json"; }
start() {  # ARCHIVE_AFTER: starts the server, returns once /readyz says 200; START_MS: how long that took
  local t0 t1
  rm -f "$D/endpoints.json"
  t0=$(now_ms)
  "$DROVER" up --data-dir "$D" --grpc-listen 127.0.0.1:0 --listen 127.0.0.1:0 --devices simulated \
    --workload none --archive-after "$1" >>"$WORK/up.log" 2>&1 &
  PID=$!
  until [[ -s $D/endpoints.json ]]; do sleep 0.01; done
  # Parsed in the shell: python3 takes ~0.4 s to start on this machine.
  HTTP=$(endpoint http)
  until [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP/readyz") == 200 ]]; do sleep 0.01; done
  t1=$(now_ms)
  DROVER_ADDR=$(endpoint grpc)
  DROVER_TOKEN=$(cat "$D/admin.token")
  # As a user of a local `drover up` has it (./.drover): the CLI finds the
  # HTTP address in its endpoints.json, so `drover jobs` runs over REST in
  # the small front program (cli/fast_verbs.h).
  DROVER_DATA_DIR=$D
  export DROVER_ADDR DROVER_TOKEN DROVER_DATA_DIR
  START_MS=$((t1 - t0))
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; pkill -f "supervise --dir $D" 2>/dev/null || true; }

# NAME ARGS...: SAMPLES runs of `drover jobs ARGS`, wall time of the process.
cli() {
  local name=$1 i t0 t1; shift
  local times=()
  for ((i = 0; i < SAMPLES; i++)); do
    # Timed inline: $(date) on each side would add two process starts.
    t0=${EPOCHREALTIME/./}
    "${CLI_BIN:-$DROVER}" jobs "$@" >/dev/null 2>&1 || die "drover jobs $* failed"
    t1=${EPOCHREALTIME/./}
    times+=($((t1 - t0)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v name="$name" '{a[NR]=$1} END {
    printf "| `drover jobs %s` | %.1f ms | %.1f ms |\n", name, a[int((NR+1)/2)]/1000, a[NR]/1000}'
}

[[ -x $DROVER && -x $FILL && -x $LIST ]] || die "build first (cmake --build build): need $DROVER, $FILL and $LIST"
mkdir -p "$D"
log "first start (creates the data dir)"
start 0
stop
log "filling the archive with $JOBS finished jobs"
"$FILL" "$D/archive.db" "$JOBS" >&2
sync  # the fill's 300 MB of dirty pages, flushed now rather than during the restarts
echo "## archive of $JOBS jobs: $(du -m "$D/archive.db" | cut -f1) MiB; store $(du -k "$D/drover.db" | cut -f1) KiB"
echo
echo "| restart | start to /readyz 200 |"
echo "|---|---|"
for i in 1 2 3; do
  start 5m
  echo "| $i | $START_MS ms |"
  [[ $i == 3 ]] || stop
done
grep -o 'recovered [0-9]* nodes and [0-9]* jobs[^@]*' "$WORK/up.log" | tail -1 | sed 's/^/recovery: /'
echo
echo "| command ($SAMPLES runs) | p50 | max |"
echo "|---|---|---|"
cli "" ; cli "--page-size 50" --page-size 50
cli "--state failed" --state failed
cli "--tenant team-3" --tenant team-3
cli "--node sim-7" --node sim-7
cli "--ended-within 1h" --ended-within 1h
cli "--page-token 500000 (deep page)" --page-token 500000
cli "--state pending --page-size 1 (an empty answer: the CLI's own cost)" --state pending --page-size 1
CLI_BIN=$(dirname "$DROVER")/drover-core cli "(first page, drover-core over gRPC)"
echo
echo "The server's part, over one warm gRPC channel (bench/list_bench):"
echo
echo '```'
"$LIST" --benchmark_min_time=0.5 2>&1 | grep -E "^BM_|^Benchmark"
echo '```'
stop

log "churn for $CHURN_S s (arrays of 100 x true, --archive-after 0)"
start 0
echo
echo "| churn time | jobs ended | drover.db + WAL | archive.db |"
echo "|---|---|---|---|"
ended=0
t_end=$((SECONDS + CHURN_S))
next=$SECONDS
while ((SECONDS < t_end)); do
  "$DROVER" submit --gpus 1 --array 1-100 --wait -- true >/dev/null || die "an array failed"
  ended=$((ended + 100))
  if ((SECONDS >= next)); then
    db=$(( $(stat -c %s "$D/drover.db") + $(stat -c %s "$D/drover.db-wal" 2>/dev/null || echo 0) ))
    echo "| $((SECONDS - t_end + CHURN_S)) s | $ended | $((db / 1024)) KiB | $(( $(stat -c %s "$D/archive.db") / 1048576 )) MiB |"
    next=$((SECONDS + 30))
  fi
done
stop
# What the store holds after the churn (read-only): live rows by kind, the
# history window, and pages (free ones are reused by the next writes).
python3 - "$D/drover.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
kinds = db.execute("select substr(key, 1, instr(substr(key, 2), '/') + 1), count(*), sum(length(value)) "
                   "from kv group by 1 order by 2 desc").fetchall()
print()
print("| store after the churn | rows | bytes |")
print("|---|---|---|")
for k, n, b in kinds:
    print(f"| kv `{k.decode() if isinstance(k, bytes) else k}` | {n} | {b} |")
n, b = db.execute("select count(*), coalesce(sum(length(value)), 0) from history").fetchone()
lo, hi = db.execute("select min(revision), max(revision) from history").fetchone()
print(f"| history (revisions {lo}..{hi}) | {n} | {b} |")
pages, free, size = (db.execute(f"pragma {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
print(f"| file pages (free, reused by later writes) | {pages} ({free}) | {pages * size} |")
PY
