#!/usr/bin/env bash
# Two builds of Drover against each other, interleaved (old, new, old, new,
# ...; 5 runs each): sched_bench's decision benchmarks and the submit-to-exit
# time of `drover submit --gpus 1 --wait -- true` (bench/submit_phases.sh, 40
# back-to-back submits per run). For a refactor that must not change speed
# (issue 36: docs/performance.md, "Issue 36"). The raw results go to OUT;
# medians are printed.
#
#   bench/refactor_cmp.sh OLD_ROOT NEW_ROOT [OUT]
#
# Each ROOT is a checkout with its build/ made (git worktree add OLD <commit>;
# cmake --preset default; cmake --build build --target drover drover-core
# drover-supervise sched_bench).
set -u
OLD=${1:?old checkout}
NEW=${2:?new checkout}
OUT=${3:-/tmp/refactor-cmp}
mkdir -p "$OUT"
F='BM_Place/(single|gang64)/16384/95$|BM_Worst/gang_preempt_switch/16384|BM_Live/512/warm'
for i in 1 2 3 4 5; do
  for side in old new; do
    root=$OLD; [ $side = new ] && root=$NEW
    "$root/build/bench/sched_bench" --benchmark_filter="$F" --benchmark_min_time=0.3 --benchmark_format=json \
      >"$OUT/sched_${side}_$i.json" 2>/dev/null
    RUNS=40 GAPS=0 "$root/bench/submit_phases.sh" >"$OUT/submit_${side}_$i.txt" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
res = {}
for side in ("old", "new"):
    for i in range(1, 6):
        for b in json.load(open(f"{out}/sched_{side}_{i}.json"))["benchmarks"]:
            for k in ("p50_ns", "p99_ns", "cpu_time"):
                if k in b:
                    res.setdefault((b["name"], k), {}).setdefault(side, []).append(b[k])
        m = re.search(r"\| total \| ([\d.]+) \| ([\d.]+) \|", open(f"{out}/submit_{side}_{i}.txt").read())
        if m:
            res.setdefault(("submit --wait total", "p50_ms"), {}).setdefault(side, []).append(float(m.group(1)))
            res.setdefault(("submit --wait total", "p90_ms"), {}).setdefault(side, []).append(float(m.group(2)))
print("| benchmark | measure | old (median of 5) | new (median of 5) | change |")
print("| --- | --- | --- | --- | --- |")
for (name, k), v in sorted(res.items()):
    if "old" in v and "new" in v:
        o, n = statistics.median(v["old"]), statistics.median(v["new"])
        print(f"| {name} | {k} | {o:.4g} | {n:.4g} | {100 * (n - o) / o:+.1f} % |")
PY
