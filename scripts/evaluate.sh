#!/usr/bin/env bash
# The simulator evaluation of docs/evaluation.md: every number there (and in
# the "Simulator" section of docs/performance.md) comes from one run of this
# script.
#
#   scripts/evaluate.sh [DROVER] [OUT] [EXPERIMENT...]
#
#   DROVER      the drover binary (default build/apps/drover/drover)
#   OUT         where the runs' reports go (default /tmp/drover-eval); the
#               tables are printed and also written to OUT/tables.md
#   EXPERIMENT  any of: fgd lists queues fairshare scale (default: all five)
#
#   DROVER_TRACES  the public traces (default ../shared/traces, from the
#                  repository root; see its README.md)
#   DROVER_EVAL_JOBS       runs of `lists` at once (default: the number of cores)
#   DROVER_LISTS_POLICIES  placements of `lists` (default: binpack frag best-fit)
#
# fgd:       FGD packing experiment on Alibaba PAI 2023, 5 placements x 10 seeds
# lists:     the same experiment on every pod list of alibaba-pai-2023
#            (20 lists x 3 placements x 10 seeds = 600 runs, about 2 min
#            with 2 at a time on the 2-core development machine), next to
#            the FGD authors' published FGD and BestFit figures where they
#            exist (read from the traces' README.md)
# queues:    time mode, FIFO / priority / fair share / LAS on the Philly VCs,
#            busy ITP clusters and a busy multi-tenant synthetic mix
# fairshare: a saturated synthetic mix on 1,024 GPUs, fair share vs FIFO
# scale:     each ITP trace replayed as is, and 1,000,000 jobs on 131,072 GPUs
#            (about 28 minutes on the 2-core development machine; the
#            other four take about 6 minutes together)
#
# Needs bash, python3 (reads the reports) and GNU time (/usr/bin/time, Debian
# package `time`, for peak memory). Runs are single-threaded and
# deterministic: the same binary and inputs give the same tables, except
# the wall-clock and memory columns.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DROVER=${1:-build/apps/drover/drover}
OUT=${2:-/tmp/drover-eval}
if (($# > 2)); then
  EXPERIMENTS=("${@:3}")
else
  EXPERIMENTS=(fgd lists queues fairshare scale)
fi

# Resolve the binary and OUT before moving to the repository root, so that
# relative paths mean what they meant to the caller.
if [[ $DROVER != /* && -x $DROVER ]]; then DROVER=$PWD/$DROVER; elif [[ $DROVER != /* ]]; then DROVER=$ROOT/$DROVER; fi
[[ -x $DROVER ]] || { echo "evaluate.sh: no drover binary at $DROVER (build: cmake --build build --target drover)" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT"
TRACES=${DROVER_TRACES:-../shared/traces}
[[ -d $TRACES ]] || { echo "evaluate.sh: no trace folder at $TRACES (set DROVER_TRACES)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "evaluate.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "evaluate.sh: needs python3" >&2; exit 2; }
for e in "${EXPERIMENTS[@]}"; do
  case $e in fgd | lists | queues | fairshare | scale) ;; *) echo "evaluate.sh: unknown experiment '$e' (fgd lists queues fairshare scale)" >&2; exit 2 ;; esac
done

PAI=$TRACES/alibaba-pai-2023
ITP=$TRACES/microsoft-itp-elasticflow/raw
PHILLY=$TRACES/philly-derived/pcs-vc-traces
TABLES=$OUT/tables.md
: >"$TABLES"

# Prints its input and appends it to OUT/tables.md.
emit() { tee -a "$TABLES"; }

# sim DIR ARGS...: one `drover sim` run, report in DIR (no charts), its
# console summary in DIR/console.txt, GNU time's figures in DIR/time.txt.
# A failing run stops the script (set -e).
sim() {
  local dir=$1
  shift
  mkdir -p "$dir"
  if ! /usr/bin/time -v -o "$dir/time.txt" "$DROVER" sim "$@" --out "$dir" --gnuplot "" >"$dir/console.txt" 2>&1; then
    echo "evaluate.sh: failed: drover sim $* --out $dir" >&2
    cat "$dir/console.txt" >&2
    exit 1
  fi
}

T0=$(date +%s)
# `drover` is a launcher that runs drover-core beside it: the code is there.
CODE=$DROVER
[[ -x "$(dirname "$DROVER")/drover-core" ]] && CODE="$(dirname "$DROVER")/drover-core"
{
  echo "# Drover simulator evaluation"
  echo
  echo "- binary: \`$CODE\` (sha256 $(sha256sum "$CODE" | cut -c1-16), built $(date -u -r "$CODE" '+%Y-%m-%d %H:%M:%S UTC'))"
  echo "- sources: sha256 of src/drover/{sched,sim}/*.{h,cc} $(cat src/drover/sched/*.h src/drover/sched/*.cc src/drover/sim/*.h src/drover/sim/*.cc | sha256sum | cut -c1-16)"
  newer=$(find src apps -newer "$CODE" -type f \( -name '*.cc' -o -name '*.h' \) | awk 'NR <= 3' | tr '\n' ' ')
  [[ -z $newer ]] || echo "- **warning: sources newer than the binary** (rebuild first): $newer"
  echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/^Mem:/{print $2}') GiB memory"
  echo "- traces: \`$TRACES\`; experiments: ${EXPERIMENTS[*]}"
  echo
} | emit

has() { [[ " ${EXPERIMENTS[*]} " == *" $1 "* ]]; }

# ------------------------------------------------------------------ fgd --
if has fgd; then
  t=$(date +%s)
  for p in binpack frag spread best-fit random; do
    for s in $(seq 42 51); do
      sim "$OUT/fgd/$p-$s" --cluster "pai2023:$PAI/openb_node_list_gpu_node.csv" \
        --workload "pai2023:$PAI/openb_pod_list_default.csv" --mode packing --inflate 1.3 --seed "$s" --policy "$p"
    done
  done
  python3 - "$OUT/fgd" "$(($(date +%s) - t))" <<'EOF' | emit
import json, sys, statistics as st
root, secs = sys.argv[1], sys.argv[2]
pols = ["binpack", "frag", "spread", "best-fit", "random"]
paper = {"binpack": "FGD 95.23 % (Drover's binpack is not FGD)", "frag": "FGD 95.23 %", "spread": "-",
         "best-fit": "BestFit 92.86 %", "random": "Random 86.30 %"}
runs = {p: [json.load(open(f"{root}/{p}-{s}/summary.json")) for s in range(42, 52)] for p in pols}
print("## 1. FGD packing experiment: Alibaba PAI 2023, 1.3 x capacity, seeds 42-51\n")
print("GPU allocation (% of 6,212 GPUs) when the arrived demand reaches 100 %:\n")
print("| placement | mean | min | max | failed pods at the end (mean) | wall per run (mean) | published (FGD paper, Fig. 9a) |")
print("|---|---|---|---|---|---|---|")
for p in pols:
    v = [r["allocation_by_demand"]["100"] for r in runs[p]]
    f = [r["jobs"]["failed"] for r in runs[p]]
    w = [r["scheduler"]["wall_s"] for r in runs[p]]
    print(f"| `{p}` | {st.mean(v):.2f} % | {min(v):.2f} % | {max(v):.2f} % | {st.mean(f):,.0f} | {st.mean(w):.2f} s | {paper[p]} |")
print("\nMean GPU allocation over the 10 seeds at each arrived demand:\n")
levels = ["90", "100", "110", "120", "130"]
print("| placement | " + " | ".join(f"{l} %" for l in levels) + " |")
print("|---|" + "---|" * len(levels))
for p in pols:
    print(f"| `{p}` | " + " | ".join(f"{st.mean(r['allocation_by_demand'][l] for r in runs[p]):.2f} %" for l in levels) + " |")
print(f"\n50 runs in {secs} s.\n")
EOF
fi

# ---------------------------------------------------------------- lists --
if has lists; then
  t=$(date +%s)
  read -r -a LPOL <<<"${DROVER_LISTS_POLICIES:-binpack frag best-fit}"
  JOBS=${DROVER_EVAL_JOBS:-$(nproc)}
  mapfile -t LISTS < <(cd "$PAI" && ls openb_pod_list_*.csv | sed 's/^openb_pod_list_//; s/\.csv$//')
  ((${#LISTS[@]} > 0)) || { echo "evaluate.sh: no pod lists in $PAI" >&2; exit 2; }
  # One line per run (list, placement, seed), JOBS at a time; every run is
  # single-threaded and deterministic, so the order changes nothing.
  for l in "${LISTS[@]}"; do for p in "${LPOL[@]}"; do for s in $(seq 42 51); do echo "$l $p $s"; done; done; done \
    >"$OUT/lists.runs"
  export -f sim
  export DROVER OUT PAI
  xargs -P "$JOBS" -L 1 bash -c 'sim "$OUT/lists/$0/$1-$2" --cluster "pai2023:$PAI/openb_node_list_gpu_node.csv" \
    --workload "pai2023:$PAI/openb_pod_list_$0.csv" --mode packing --inflate 1.3 --seed "$2" --policy "$1"' \
    <"$OUT/lists.runs" || { echo "evaluate.sh: a run of the lists experiment failed" >&2; exit 1; }
  python3 - "$OUT/lists" "$(($(date +%s) - t))" "$JOBS" "$TRACES/README.md" "${LPOL[*]}" "${LISTS[@]}" <<'EOF' | emit
import json, re, sys, statistics as st
root, secs, jobs, readme, pols, lists = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(), sys.argv[6:]
# The published figures: the FGD authors' table in the traces README
# (header "| pod list | Random | ... | BestFit | FGD |"; mean of seeds 42-51
# at 100 % demand).
paper, cols = {}, None
for line in open(readme):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells[0] == "pod list":
        cols = cells
    elif cols and line.startswith("|") and len(cells) == len(cols) and all(re.fullmatch(r"[0-9.]+", c) for c in cells[1:]):
        paper[cells[0]] = dict(zip(cols[1:], map(float, cells[1:])))
    elif cols and not line.startswith("|"):
        cols = None
def runs(l, p):
    return [json.load(open(f"{root}/{l}/{p}-{s}/summary.json"))["allocation_by_demand"]["100"] for s in range(42, 52)]
print("## 1b. The packing experiment on every pod list of Alibaba PAI 2023, seeds 42-51\n")
print("GPU allocation (% of 6,212 GPUs) at 100 % arrived demand, mean of seeds 42-51 (lowest seed in brackets),")
print("next to the FGD authors' published FGD and BestFit figures (../shared/traces/README.md; `-`: none")
print("published for that list). Bold: above both published figures.\n")
ours = [p for p in pols if p not in ("best-fit", "random", "spread")]
print("| pod list | " + " | ".join(f"`{p}`" for p in pols) + " | published FGD | published BestFit |")
print("|---|" + "---|" * (len(pols) + 2))
wins = {p: [0, 0, 0, 0] for p in ours}  # above FGD, lists with FGD, above BestFit, lists compared
for l in lists:
    m = {p: st.mean(runs(l, p)) for p in pols}
    f = paper.get(l, {}).get("FGD")
    b = paper.get(l, {}).get("BestFit")
    row = []
    for p in pols:
        cell = f"{m[p]:.2f} ({min(runs(l, p)):.2f})"
        above = p in ours and f is not None and b is not None and m[p] > f and m[p] > b
        row.append(f"**{cell}**" if above else cell)
        if p in ours:
            bf = b if b is not None else m.get("best-fit")
            if f is not None:
                wins[p][0] += m[p] > f
                wins[p][1] += 1
            if bf is not None:
                wins[p][2] += m[p] > bf
                wins[p][3] += 1
    print(f"| {l} | " + " | ".join(row) + f" | {'-' if f is None else f'{f:.2f}'} | {'-' if b is None else f'{b:.2f}'} |")
print()
for p, (wf, nf, wb, nb) in wins.items():
    print(f"- `{p}`: above FGD on {wf} of the {nf} lists with a published figure; above BestFit on {wb} of {nb} "
          "(the published figure where there is one, else our `best-fit`).")
print(f"\n{len(lists) * len(pols) * 10} runs in {secs} s, {jobs} at a time.\n")
EOF
fi

# --------------------------------------------------------------- queues --
if has queues; then
  t=$(date +%s)
  QPOL=(fifo priority fair-share las)
  settings=()
  # One setting: the four policies with every job preemptible and resuming
  # from where it stopped (checkpointing, as Tiresias assumes), and one FIFO
  # run without preemption that measures the offered load.
  qset() {
    local name=$1
    shift
    for p in "${QPOL[@]}"; do sim "$OUT/queues/$name/$p" "$@" --policy "$p" --preemptible --resume; done
    sim "$OUT/queues/$name/offered" "$@" --policy fifo,no-preemption
    settings+=("$name")
  }
  for f in "$PHILLY"/trace_*.csv; do
    vc=$(basename "$f" .csv)
    vc=${vc#trace_}
    qset "philly-$vc" --cluster "philly-vc:$f" --workload "philly-vc:$f"
  done
  # All ten VCs on one shared cluster, each VC a tenant guaranteed its GPUs,
  # with 4 x the jobs (--inflate 180: resampled, same span).
  qset philly-pooled-x4 --cluster "philly-vc:$PHILLY" --workload "philly-vc:$PHILLY" --inflate 180 --seed 42
  # ITP at ElasticFlow's sizes is nearly idle; the three 512-GPU clusters
  # with 64-GPU gangs, resampled to 100 x their GPUs.
  for c in 02 03 06; do
    f=$ITP/cluster$c.csv
    qset "itp-cluster$c-x100" --cluster "itp:$f" --workload "itp:$f" --inflate 100 --seed 42
  done
  for p in "${QPOL[@]}"; do
    sim "$OUT/queues/mixed-load/$p" --cluster docs/eval/cluster-1024.yaml --workload docs/eval/mixed-load.yaml --seed 5 --policy "$p"
  done
  # LAS preempts far more; the same run with checkpointing jobs.
  sim "$OUT/queues/mixed-load/las-resume" --cluster docs/eval/cluster-1024.yaml --workload docs/eval/mixed-load.yaml --seed 5 \
    --policy las --resume
  # Only to measure the offered load: without preemption every job runs once.
  sim "$OUT/queues/mixed-load-nopreempt" --cluster docs/eval/cluster-1024.yaml --workload docs/eval/mixed-load.yaml --seed 5 \
    --policy fifo,no-preemption
  python3 - "$OUT/queues" "$(($(date +%s) - t))" "${settings[@]}" <<'EOF' | emit
import json, sys, hashlib
root, secs, settings = sys.argv[1], sys.argv[2], sys.argv[3:]
pols = ["fifo", "priority", "fair-share", "las"]
def load(s, p):
    return json.load(open(f"{root}/{s}/{p}/summary.json"))
def digest(s, p):
    return hashlib.sha256(open(f"{root}/{s}/{p}/jobs.csv", "rb").read()).hexdigest()
def offered(s, run="offered"):
    """The jobs' GPU-time / (GPUs x arrival span), from a run's jobs.csv; only
    when nothing was preempted (then end - first start is the run time)."""
    import csv
    rows = list(csv.DictReader(open(f"{root}/{s}/{run}/jobs.csv")))
    if any(r["preemptions"] != "0" or not r["end_s"] for r in rows):
        return "-"
    t = [float(r["submit_s"]) for r in rows]
    work = sum(float(r["gpus"]) * (float(r["end_s"]) - float(r["first_start_s"])) for r in rows)
    return f"{work / (load(s, run)['cluster']['gpus'] * (max(t) - min(t))):.2f}"
def cells(r):
    j, q = r["jct_s"], r["queue_delay_s"]
    return (f"{j['mean']/3600:.2f} | {j['p50']/3600:.2f} | {j['p95']/3600:.2f} | {q['mean']/60:.1f} | "
            f"{r['jobs']['preemptions']:,} | {r['allocation']['mean_pct']:.1f} %")
print("## 2. Queue policies in time mode (placement binpack, backfill and preemption on)\n")
print("### 2a. Public traces\n")
print("Every job preemptible and resuming where it stopped (`--preemptible --resume`). Philly VCs at")
print("the Helios sizes (`philly-vc:` cluster), as recorded; all ten VCs pooled on one cluster with")
print("each VC a tenant guaranteed its GPUs, `--inflate 180 --seed 42`; ITP clusters at ElasticFlow's")
print("sizes with `--inflate 100 --seed 42`. JCT in hours, queueing delay in minutes, allocation =")
print("time-weighted mean. Policies that produced byte-identical jobs.csv files (every start and end")
print("the same) share a row. Offered load = the jobs' GPU-time / (GPUs x arrival span), from a run")
print("without preemption.\n")
print("| trace | GPUs | jobs | offered load | policy | JCT mean | JCT p50 | JCT p95 | queueing mean (min) | preemptions | allocation |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for s in settings:
    r0 = load(s, "fifo")
    head = f"| {s} | {r0['cluster']['gpus']:,} | {r0['jobs']['arrived']:,} | {offered(s)}"
    groups = {}
    for p in pols:
        groups.setdefault(digest(s, p), []).append(p)
    for names in groups.values():
        r = load(s, names[0])
        print(f"{head} | {' = '.join(names)} | {cells(r)} |")
print("\n### 2b. Multi-tenant synthetic mix (docs/eval/mixed-load.yaml on docs/eval/cluster-1024.yaml)\n")
print(f"{load('mixed-load', 'fifo')['jobs']['arrived']:,} jobs; offered load {offered('.', 'mixed-load-nopreempt')} "
      "(from a run with `--policy fifo,no-preemption`, where every job runs once).\n")
print("| policy | JCT mean (h) | JCT p50 (h) | JCT p95 (h) | queueing mean (min) | queueing p95 (min) | preemptions | allocation |")
print("|---|---|---|---|---|---|---|---|")
for p in pols + ["las-resume"]:
    r = load("mixed-load", p)
    j, q = r["jct_s"], r["queue_delay_s"]
    print(f"| `{p if p != 'las-resume' else 'las`, `--resume'}` | {j['mean']/3600:.2f} | {j['p50']/3600:.2f} | {j['p95']/3600:.2f} | {q['mean']/60:.1f} | "
          f"{q['p95']/60:.1f} | {r['jobs']['preemptions']:,} | {r['allocation']['mean_pct']:.1f} % |")
print("\nMean queueing delay (min) per tenant (weights research 4, prod 3, vision 2, adhoc 1):\n")
import csv
per = {}
for p in pols:
    q = {}
    for row in csv.DictReader(open(f"{root}/mixed-load/{p}/jobs.csv")):
        if row["queue_delay_s"]:
            q.setdefault(row["tenant"], []).append(float(row["queue_delay_s"]) / 60)
    per[p] = q
tenants = sorted(per["fifo"])
total = sum(len(v) for v in per["fifo"].values())
print("| policy | " + " | ".join(f"{t} ({len(per['fifo'][t]) / total * 100:.0f} % of jobs)" for t in tenants) + " |")
print("|---|" + "---|" * len(tenants))
for p in pols:
    print(f"| `{p}` | " + " | ".join(f"{sum(per[p][t]) / len(per[p][t]):.1f}" for t in tenants) + " |")
n = len(settings) * 5 + 6
print(f"\n{n} runs in {secs} s.\n")
EOF
fi

# ------------------------------------------------------------ fairshare --
if has fairshare; then
  t=$(date +%s)
  for p in fair-share fifo; do
    sim "$OUT/fairshare/$p" --cluster docs/eval/cluster-1024.yaml --workload docs/eval/saturated.yaml --seed 7 --policy "$p"
  done
  python3 - "$OUT/fairshare" "$(($(date +%s) - t))" <<'EOF' | emit
import csv, json, sys
root, secs = sys.argv[1], sys.argv[2]
pols = ["fair-share", "fifo"]
def window(p):
    """Allocation and per-tenant shares over the saturated interval
    [1 day, last arrival], from jobs.csv. The workload has no preemptible
    jobs, so every job holds its GPUs from first_start_s to end_s."""
    rows = list(csv.DictReader(open(f"{root}/{p}/jobs.csv")))
    assert all(r["preemptions"] == "0" for r in rows)
    t0, t1 = 86400.0, max(float(r["submit_s"]) for r in rows)
    busy, pend = {}, {}
    for r in rows:
        busy.setdefault(r["tenant"], 0.0)
        pend.setdefault(r["tenant"], [])
        if not r["first_start_s"]:
            continue
        s, e = float(r["first_start_s"]), float(r["end_s"]) if r["end_s"] else t1
        busy[r["tenant"]] += float(r["gpus"]) * max(0.0, min(e, t1) - max(s, t0))
        pend[r["tenant"]] += [(float(r["submit_s"]), 1), (s, -1)]
    least = {}  # fewest jobs of the tenant waiting at any event in the window
    for t, ev in pend.items():
        n, m = 0, None
        for x, d in sorted(ev):
            n += d
            if t0 <= x <= t1:
                m = n if m is None else min(m, n)
        least[t] = m
    return t0, t1, busy, least
def offered():
    """Each tenant's GPU-time / (GPUs x arrival span), and its share of the
    arrivals, from FIFO's jobs.csv (no job is preempted: end - first start is
    the run time)."""
    rows = list(csv.DictReader(open(f"{root}/fifo/jobs.csv")))
    span = max(float(r["submit_s"]) for r in rows) - min(float(r["submit_s"]) for r in rows)
    work, count = {}, {}
    for r in rows:
        work[r["tenant"]] = work.get(r["tenant"], 0.0) + float(r["gpus"]) * (float(r["end_s"]) - float(r["first_start_s"]))
        count[r["tenant"]] = count.get(r["tenant"], 0) + 1
    return span, work, count, len(rows)
S = {p: json.load(open(f"{root}/{p}/summary.json")) for p in pols}
span, work, count, njobs = offered()
W = {p: window(p) for p in pols}
gpus = S["fair-share"]["cluster"]["gpus"]
t0, t1 = W["fair-share"][0], W["fair-share"][1]
print("## 3. Saturated mixed workload, fair share (docs/eval/saturated.yaml on docs/eval/cluster-1024.yaml)\n")
r = S["fair-share"]
print(f"{r['jobs']['arrived']:,} jobs, {gpus:,} GPUs, offered load {sum(work.values()) / (gpus * span):.2f} x the cluster "
      f"(the jobs' GPU-time / (GPUs x arrival span)), makespan {r['makespan_s']/3600:.1f} h; saturated interval "
      f"[{t0/3600:.0f} h, {t1/3600:.1f} h] = from 1 day to the last arrival.\n")
print("| policy | allocation, whole run (summary.json) | allocation, saturated interval | JCT mean (h) | queueing mean (h) |")
print("|---|---|---|---|---|")
for p in pols:
    r = S[p]
    a = sum(W[p][2].values()) / (gpus * (t1 - t0)) * 100
    print(f"| `{p}` | {r['allocation']['mean_pct']:.2f} % | {a:.2f} % | {r['jct_s']['mean']/3600:.2f} | {r['queue_delay_s']['mean']/3600:.2f} |")
print("\nPer tenant: share of the cluster's GPUs (time-weighted) against the entitlement (weight / sum of weights);")
print("ratio = share / entitlement (goal: at least 0.90 for every tenant). arrivals = share of the jobs;")
print("offered = the tenant's GPU-time / (GPUs x arrival span), in % of the cluster.\n")
print("| tenant | weight | entitlement | arrivals | offered | fair-share: whole run | ratio | fair-share: saturated | ratio | fifo: whole run | ratio | fifo: saturated | ratio | fewest waiting (fair-share) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for t in S["fair-share"]["tenants"]:
    name, ent = t["name"], t["entitlement_pct"]
    row = (f"| {name} | {t['weight']:g} | {ent:.1f} % | {count[name] / njobs * 100:.1f} % | "
           f"{work[name] / (gpus * span) * 100:.1f} %")
    for p in pols:
        whole = next(x for x in S[p]["tenants"] if x["name"] == name)["share_pct"]
        sat = W[p][2].get(name, 0.0) / (gpus * (t1 - t0)) * 100
        row += f" | {whole:.2f} % | {whole/ent:.2f} | {sat:.2f} % | {sat/ent:.2f}"
    print(row + f" | {W['fair-share'][3][name]} |")
print(f"\n2 runs in {secs} s.\n")
EOF
fi

# ---------------------------------------------------------------- scale --
if has scale; then
  t=$(date +%s)
  for c in 01 02 03 05 06 08 09 10; do
    f=$ITP/cluster$c.csv
    sim "$OUT/scale/itp-cluster$c" --cluster "itp:$f" --workload "itp:$f"
  done
  sim "$OUT/scale/synthetic-1m" --cluster docs/eval/cluster-131072.yaml --workload docs/eval/scale-1m.yaml --seed 3
  python3 - "$OUT/scale" "$(($(date +%s) - t))" <<'EOF' | emit
import json, re, sys
root, secs = sys.argv[1], sys.argv[2]
def gnu_time(d):
    txt = open(f"{root}/{d}/time.txt").read()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", txt).group(1))
    el = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", txt).group(1)
    secs = 0.0
    for part in el.split(":"):
        secs = secs * 60 + float(part)
    return secs, rss
print("## 4. Scale: replay times and the million-job run (default policies)\n")
print("| run | nodes | GPUs | jobs | events | sim wall (s) | events/s | command wall (s) | peak RSS (MiB) | allocation mean | peak | queueing mean (min) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for d in [f"itp-cluster{c}" for c in ["01", "02", "03", "05", "06", "08", "09", "10"]] + ["synthetic-1m"]:
    r = json.load(open(f"{root}/{d}/summary.json"))
    el, rss = gnu_time(d)
    sc = r["scheduler"]
    print(f"| {d} | {r['cluster']['nodes']:,} | {r['cluster']['gpus']:,} | {r['jobs']['arrived']:,} | {sc['events']:,} | "
          f"{sc['wall_s']:.2f} | {sc['events_per_s']:,.0f} | {el:.2f} | {rss/1024:.0f} | {r['allocation']['mean_pct']:.1f} % | {r['allocation']['peak_pct']:.1f} % | "
          f"{r['queue_delay_s']['mean']/60:.1f} |")
r = json.load(open(f"{root}/synthetic-1m/summary.json"))
d = r["scheduler"]["decision_us"]
print(f"\nMillion-job run: {r['scheduler']['passes']:,} passes, decision p50 {d['p50']:.1f} us, p99 {d['p99']:.1f} us, "
      f"max {d['max']:.0f} us; {r['jobs']['completed']:,} completed, {r['jobs']['preemptions']:,} preemptions, "
      f"makespan {r['makespan_s']/3600:.1f} h.")
print(f"\n9 runs in {secs} s.\n")
EOF
fi

echo "Total: $(($(date +%s) - T0)) s; reports under $OUT, tables in $TABLES." | emit
