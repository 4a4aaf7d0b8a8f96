#!/usr/bin/env bash
# Where a `drover submit --gpus 1 --wait -- true` spends its time: the
# caller's wall time of each submit, cut into phases by the job's own
# record (submit, bind, start and end times), p50 / p90 / min of each.
#
#   bench/submit_phases.sh              # 40 submits back to back, 40 spaced
#   RUNS=100 GAPS="0 0.5" bench/submit_phases.sh
#
# Starts its own `drover up --devices simulated --workload none` (one node
# of 8 simulated GPUs; the jobs are real processes) in a temp dir, removed at
# the end. GAPS lists the pauses between submits, in seconds: back to back
# and spaced differ on a machine that idles between them (a user at a
# terminal is the spaced case). Results: docs/performance.md.
set -euo pipefail

RUNS=${RUNS:-40}
GAPS=${GAPS:-"0 0.1"}
# shellcheck source=local_up.sh
source "$(dirname "${BASH_SOURCE[0]}")/local_up.sh"
"$DROVER" submit --gpus 1 --wait -- true >/dev/null   # the first one warms the supervisor pool

for gap in $GAPS; do
  : >"$WORK/runs"
  for ((i = 0; i < RUNS; i++)); do
    t0=${EPOCHREALTIME/./}; id=$("$DROVER" submit --gpus 1 --wait -- true); t1=${EPOCHREALTIME/./}
    echo "$id $t0 $t1" >>"$WORK/runs"
    sleep "$gap"
  done
  echo "### $RUNS submits, ${gap} s apart (ms)"
  "$PY" - "$WORK/d" "$WORK/runs" <<'EOF'
import json, sys, urllib.request
d, runs = sys.argv[1], sys.argv[2]
http = json.load(open(f"{d}/endpoints.json"))["http"]
token = open(f"{d}/admin.token").read().strip()
names = ["CLI start -> submit recorded", "submit -> bind", "bind -> process started",
         "started -> exit recorded", "exit recorded -> CLI returned", "total"]
rows = []
for line in open(runs):
    jid, t0, t1 = line.split()
    t0, t1 = int(t0) * 1000, int(t1) * 1000
    req = urllib.request.Request(f"http://{http}/api/v1/jobs/{jid}", headers={"Authorization": f"Bearer {token}"})
    s = json.load(urllib.request.urlopen(req))["status"]
    assert s["state"] == "JOB_STATE_SUCCEEDED", (jid, s["state"])
    t = [t0] + [int(s[k]) for k in ("submitTimeUnixNanos", "bindTimeUnixNanos", "startTimeUnixNanos",
                                    "endTimeUnixNanos")] + [t1]
    rows.append([(t[k + 1] - t[k]) / 1e6 for k in range(5)] + [(t1 - t0) / 1e6])
print("| phase | p50 | p90 | min |\n| --- | --- | --- | --- |")
for k, name in enumerate(names):
    v = sorted(r[k] for r in rows)
    print(f"| {name} | {v[len(v) // 2]:.2f} | {v[min(len(v) - 1, int(len(v) * 0.9))]:.2f} | {v[0]:.2f} |")
EOF
done
