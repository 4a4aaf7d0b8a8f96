#!/usr/bin/env bash
# CPU time and voluntary context switches per job of each thread of
# `drover up` (by thread name), over N `drover submit --gpus 1 --wait -- true`
# back to back, from /proc/PID/task/*/{stat,status} before and after.
#
#   bench/cpu_per_job.sh            # N=100
#   N=300 bench/cpu_per_job.sh
#
# Starts its own `drover up --devices simulated --workload none` (one node
# of 8 simulated GPUs; the jobs are real processes) in a temp dir, removed at
# the end. CPU time comes in clock ticks (10 ms): use N >= 100. The job's
# supervisor and the CLI are other processes and not counted.
set -euo pipefail

N=${N:-100}
# shellcheck source=local_up.sh
source "$(dirname "${BASH_SOURCE[0]}")/local_up.sh"
for _ in 1 2 3 4 5; do "$DROVER" submit --gpus 1 --wait -- true >/dev/null; done  # warm

# name ticks switches, summed over the threads of one name
snap() {
  for t in /proc/"$UP"/task/*; do
    printf '%s %s %s\n' "$(tr ' ' _ <"$t/comm")" "$(awk '{print $14 + $15}' "$t/stat")" \
      "$(awk '/voluntary_ctxt_switches/ {s += $2} END {print s}' "$t/status")"
  done | awk '{t[$1] += $2; s[$1] += $3} END {for (k in t) print k, t[k], s[k]}' | sort
}
snap >"$WORK/before"
t0=${EPOCHREALTIME/./}
for ((i = 0; i < N; i++)); do "$DROVER" submit --gpus 1 --wait -- true >/dev/null; done
t1=${EPOCHREALTIME/./}
snap >"$WORK/after"
tick_us=$((1000000 / $(getconf CLK_TCK)))
echo "### $N submits back to back: $(((t1 - t0) / N)) us each (wall)"
echo "| thread | CPU us/job | switches/job |"
echo "| --- | --- | --- |"
join "$WORK/before" "$WORK/after" | awk -v n="$N" -v us="$tick_us" '{
  c = ($4 - $2) * us / n; s = ($5 - $3) / n
  if (c > 0 || s >= 0.5) printf "| %s | %.0f | %.1f |\n", $1, c, s }'
