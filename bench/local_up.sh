# Sourced by the bench scripts that time jobs on one local node: starts
# `drover up --devices simulated --workload none` (one node of 8 simulated
# GPUs; the jobs are real processes) in a temp dir named for the script,
# waits until its node is Ready, and exports DROVER_ADDR and
# DROVER_DATA_DIR for the CLI. Sets ROOT, DROVER (default: the build's),
# PY, WORK (removed at exit, with the server) and UP (its pid).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DROVER=${DROVER:-$ROOT/build/apps/drover/drover}
PY=$(command -v /usr/bin/python3 || command -v python3)
WORK=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
UP=
cleanup() {
  [[ -n $UP ]] && kill "$UP" 2>/dev/null && wait "$UP" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$DROVER" up --data-dir "$WORK/d" --grpc-listen 127.0.0.1:0 --listen 127.0.0.1:0 \
  --devices simulated --workload none ${UP_FLAGS:-} >/dev/null 2>"$WORK/up.log" &
UP=$!
for _ in $(seq 300); do [[ -s $WORK/d/endpoints.json ]] && break; sleep 0.1; done
[[ -s $WORK/d/endpoints.json ]] || { echo "drover up did not start; see $WORK/up.log" >&2; exit 1; }
DROVER_ADDR=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$WORK/d/endpoints.json")
DROVER_DATA_DIR=$WORK/d
export DROVER_ADDR DROVER_DATA_DIR
for _ in $(seq 300); do "$DROVER" nodes 2>/dev/null | grep -Eq " Ready +0/8 " && break; sleep 0.1; done
