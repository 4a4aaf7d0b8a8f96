#!/usr/bin/env bash
# Slurm (Debian's package) against Drover on this machine, one node of 8 GPUs
# each, in one run:
#   1. submit-to-exit latency of a trivial 1-GPU job, p50/p99
#      (`srun --gres=gpu:1 true` vs `drover submit --gpus 1 --wait -- true`)
#   2. throughput of an array of trivial jobs (`sbatch --array` vs
#      `drover submit --array`), from the submit until every task has ended
#   3. throughput of jobs submitted one by one from the CLI, from the first
#      submit until every job has ended
# Every job is a real process that starts and exits; the jobs that did not
# end with exit 0 are counted and shown.
#
# Runs as root on Debian 12; installs slurmctld, slurmd, slurm-client and
# munge with apt-get when missing. Everything else (munge key and socket,
# Slurm's config, state, spool and logs, Drover's data dir) lives in one temp
# dir that is removed at the end, with every daemon it started.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/vs_slurm.sh [--only slurm|drover] [--help]

environment:
  SAMPLES=50        latency samples per system
  ARRAY=1000        tasks in the array
  ONE_BY_ONE=200    jobs submitted one by one
  DROVER=PATH       drover binary (default: build/apps/drover/drover)
  OUT_JSON=FILE     also write the results as JSON there
  KEEP=1            keep the temp dir (configs, logs) for a post-mortem
EOF
}

ONLY=both
while (($#)); do
  case "$1" in
    --only) ONLY="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --only=*) ONLY="${1#--only=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ "$ONLY" =~ ^(both|slurm|drover)$ ]] || { usage >&2; exit 2; }

SAMPLES=${SAMPLES:-50}
ARRAY=${ARRAY:-1000}
ONE_BY_ONE=${ONE_BY_ONE:-200}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DROVER=${DROVER:-$ROOT/build/apps/drover/drover}
WORK=$(mktemp -d /tmp/vs_slurm.XXXXXX)
RESULTS=$WORK/results   # KEY VALUE lines, turned into the table at the end
: >"$RESULTS"
PIDS=()

log() { printf '[%(%T)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }
put() { echo "$1 $2" >>"$RESULTS"; }
now() { echo "${EPOCHREALTIME/./}"; }   # microseconds, and no fork
elapsed() { printf '%d.%06d' $((($2 - $1) / 1000000)) $((($2 - $1) % 1000000)); }
# pyenv's shim costs seconds a start on a busy machine; Debian's is direct.
PY=$(command -v /usr/bin/python3 || command -v python3)

# Daemons go down in reverse start order: slurmd before slurmctld before
# munged, so that none of them logs errors about a peer that went first.
stop_daemons() {
  local i pid
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid=${PIDS[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
cleanup() {
  stop_daemons
  if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Polls CMD until it succeeds; for start-up only, never inside a measurement.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${secs}s waiting for $what"
    sleep 0.1
  done
}

# "BEFORE AFTER" of SYS_count ("ended exit0") to "exit0/ended" in between.
ok_since() {
  local b_all b_ok a_all a_ok
  read -r b_all b_ok <<<"$1"
  read -r a_all a_ok <<<"$2"
  echo "$((a_ok - b_ok))/$((a_all - b_all))"
}

# SYS CMD...: wall time of SAMPLES runs of CMD, one after the other.
latency() {
  local sys=$1 before t0 t1 i; shift
  log "$sys: $SAMPLES x ${*##*/}"
  before=$("${sys}_count")
  for ((i = 0; i < SAMPLES; i++)); do
    t0=${EPOCHREALTIME/./}; "$@" >/dev/null; t1=${EPOCHREALTIME/./}  # inline: a $(now) forks a subshell
    put "${sys}_lat" "$(elapsed "$t0" "$t1")"
  done
  put "${sys}_lat_ok" "$(ok_since "$before" "$("${sys}_count")")"
}

# SYS KEY N SUBMIT: from the start of SUBMIT until N more jobs have ended.
# The waiter starts before the clock and is let go by a line on a fifo, so
# that neither its start-up nor its polls during the submits are timed.
throughput() {
  local sys=$1 key=$2 n=$3 before t0 t1 waiter go; shift 3
  log "$sys: $key, $n jobs"
  before=$("${sys}_count")
  rm -f "$WORK/go" && mkfifo "$WORK/go"
  "${sys}_wait" "$((${before%% *} + n))" <"$WORK/go" &
  waiter=$!
  exec {go}>"$WORK/go"
  t0=$(now)
  "$@"
  echo go >&"$go"
  exec {go}>&-
  wait "$waiter"
  t1=$(now)
  put "${sys}_${key}_s" "$(elapsed "$t0" "$t1")"
  put "${sys}_${key}_ok" "$(ok_since "$before" "$("${sys}_count")")"
}

# ------------------------------------------------------------------ Slurm --
SL=$WORK/slurm
export SLURM_CONF=$SL/slurm.conf   # every Slurm client reads this one

slurm_install() {
  local pkgs=() p
  for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || pkgs+=("$p")
  done
  ((${#pkgs[@]} == 0)) && return
  log "installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
}

slurm_up() {
  local host mem_mb i
  host=$(hostname -s)
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  mkdir -p "$SL"/{munge,run,state,spool,log,dev}
  chmod 700 "$SL/munge"
  # A munged of our own (own key and socket) leaves a system one alone.
  mungekey --create --keyfile="$SL/munge/munge.key"
  munged -F --force --socket="$SL/run/munge.sock" --key-file="$SL/munge/munge.key" \
    --pid-file="$SL/munge/munged.pid" --seed-file="$SL/munge/seed" \
    --log-file="$SL/log/munged.log" 2>>"$SL/log/munged.log" &
  PIDS+=($!)
  wait_for munged 20 munge -n -S "$SL/run/munge.sock"
  # Slurm 22.05 drops a GPU without a File= ("file-less GPU"), and wants a
  # character device there: 8 links to /dev/null are 8 GPUs by count.
  for i in {0..7}; do ln -s /dev/null "$SL/dev/gpu$i"; done
  echo "Name=gpu File=$SL/dev/gpu[0-7]" >"$SL/gres.conf"
  # Slurm's defaults except:
  # - ports 16817/16818, so a system Slurm on 6817/6818 is left alone;
  # - proctrack/linuxproc and task/none: the cgroup plugins fail in a
  #   container like this one ("cgroup namespace 'freezer' not mounted",
  #   every step fails to launch); neither system confines the trivial job;
  # - SelectTypeParameters=CR_Core and OverSubscribe=FORCE:8: by default a
  #   job takes one core and, with no DefMemPerCPU, all the node's memory, so
  #   one job runs at a time, and with CR_Core alone nproc jobs at once.
  #   Drover's jobs ask for no CPUs or memory, so there the 8 GPUs are the
  #   only limit; these two lines make them the only limit in Slurm too
  #   (GPUs are never shared by OverSubscribe);
  # - jobcomp/filetxt: every job's end state without slurmdbd, to count the
  #   jobs that did not exit 0;
  # - MaxArraySize: the default (1001) caps arrays at 1000 tasks.
  cat >"$SLURM_CONF" <<EOF
ClusterName=vsslurm
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
AuthInfo=socket=$SL/run/munge.sock
SlurmctldPidFile=$SL/run/slurmctld.pid
SlurmdPidFile=$SL/run/slurmd.pid
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool
SlurmctldLogFile=$SL/log/slurmctld.log
SlurmdLogFile=$SL/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc=$SL/log/jobcomp.txt
MaxArraySize=$((ARRAY < 1000 ? 1001 : ARRAY + 1))
NodeName=$host CPUs=$(nproc) RealMemory=$mem_mb Gres=gpu:8 State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES State=UP OverSubscribe=FORCE:8
EOF
  slurmctld -D -f "$SLURM_CONF" 2>>"$SL/log/slurmctld.err" &
  PIDS+=($!)
  slurmd -D -f "$SLURM_CONF" 2>>"$SL/log/slurmd.err" &
  PIDS+=($!)
  # shellcheck disable=SC2016  # expanded by the inner shell
  wait_for "the Slurm node to be idle" 60 \
    bash -c '[[ $(sinfo -h -N -o %T 2>/dev/null) == idle ]]'
  # The node says idle even where no step can launch; one real job tells.
  # shellcheck disable=SC2016  # the job's own variable
  [[ $(srun --gres=gpu:1 sh -c 'echo "ok $CUDA_VISIBLE_DEVICES"') == "ok 0" ]] ||
    die "a Slurm job did not run; see $SL/log (KEEP=1 keeps it)"
}

# Jobs ended so far (lines in jobcomp's file) and of them those COMPLETED,
# i.e. with exit 0. Waiting on the file rather than polling squeue asks
# slurmctld nothing while it works.
slurm_count() {
  local f=$SL/log/jobcomp.txt
  echo "$(grep -c . "$f" || true) $(grep -c 'JobState=COMPLETED' "$f" || true)"
}
slurm_wait() {
  read -r _
  while (($(grep -c . "$SL/log/jobcomp.txt" || true) < $1)); do sleep 0.05; done
}
slurm_array() { sbatch -Q --array=1-"$ARRAY" --gres=gpu:1 -o /dev/null --wrap true; }
slurm_singles() {
  local i
  for ((i = 0; i < ONE_BY_ONE; i++)); do sbatch -Q --gres=gpu:1 -o /dev/null --wrap true; done
}

slurm_bench() {
  slurm_install
  slurm_up
  put slurm_version "$(sinfo -V | awk '{print $2}')"
  latency slurm srun --quiet --gres=gpu:1 true
  throughput slurm array "$ARRAY" slurm_array
  throughput slurm one_by_one "$ONE_BY_ONE" slurm_singles
  # Each system is measured alone on the machine: Slurm's daemons go before
  # Drover starts, as Drover's are not running during Slurm's part.
  stop_daemons
}

# ----------------------------------------------------------------- Drover --
DV=$WORK/drover

# `drover up --devices simulated` makes this machine's own node one of 8
# simulated H100s: one node, as Slurm's, and its jobs real processes (the
# simulated part is the GPUs). Its REST API is asked by python3 rather than
# the CLI: one process that polls, not one start per poll. The program goes
# with -c, so that stdin stays free for throughput()'s fifo.
DROVER_REST=$(cat <<'EOF'
import json, sys, time, urllib.request
dv, what = sys.argv[1], sys.argv[2]
http = json.load(open(f"{dv}/endpoints.json"))["http"]
token = open(f"{dv}/admin.token").read().strip()
def get(query=""):   # every page
    jobs, token_q = [], ""
    while True:
        sep = "&" if query else "?"
        req = urllib.request.Request(f"http://{http}/api/v1/jobs{query}{sep}page_size=5000{token_q}",
                                     headers={"Authorization": f"Bearer {token}"})
        page = json.load(urllib.request.urlopen(req))
        jobs += page.get("jobs", [])
        if not page.get("nextPageToken"):
            return jobs
        token_q = "&page_token=" + page["nextPageToken"]
def ended():
    return [j for j in get() if j["status"]["state"] in
            ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")]
if what == "wait":   # until N jobs have ended; the live ones are the cheap ask
    n = int(sys.argv[3])
    sys.stdin.readline()
    while any(get(f"?state={s}") for s in ("pending", "bound", "running")) or len(ended()) < n:
        time.sleep(0.05)
else:                # count: jobs ended, and of them those that exited 0
    jobs = ended()
    print(len(jobs), sum(j["status"]["state"] == "JOB_STATE_SUCCEEDED" for j in jobs))
EOF
)
drover_rest() { "$PY" -c "$DROVER_REST" "$DV" "$@"; }
drover_count() { drover_rest count; }
drover_wait() { drover_rest wait "$1"; }
drover_array() { "$DROVER" submit --gpus 1 --array 1-"$ARRAY" -- true >/dev/null; }
drover_singles() {
  local i
  for ((i = 0; i < ONE_BY_ONE; i++)); do "$DROVER" submit --gpus 1 -- true >/dev/null; done
}

drover_bench() {
  local id
  [[ -x "$DROVER" ]] || die "no drover binary at $DROVER (set DROVER=)"
  mkdir -p "$DV"
  "$DROVER" up --data-dir "$DV" --grpc-listen 127.0.0.1:0 --listen 127.0.0.1:0 \
    --devices simulated --workload none 2>"$DV/up.log" &
  PIDS+=($!)
  wait_for "drover up" 60 test -s "$DV/endpoints.json"
  DROVER_ADDR=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$DV/endpoints.json")
  DROVER_TOKEN=$(cat "$DV/admin.token")
  # The data directory, as a user of `drover up` has it in ./.drover: the
  # CLI finds the HTTP address there and submits over REST without
  # starting the full program (drover/cli/fast_submit.h).
  DROVER_DATA_DIR=$DV
  export DROVER_ADDR DROVER_TOKEN DROVER_DATA_DIR
  # shellcheck disable=SC2016  # expanded by the inner shell
  wait_for "the Drover node to be ready with 8 GPUs" 60 \
    bash -c '"$0" nodes | grep -Eq " Ready +0/8 "' "$DROVER"
  [[ $("$DROVER" nodes | tail -n +2 | wc -l) == 1 ]] || die "Drover has more than one node"
  id=$("$DROVER" submit --gpus 1 --wait -- sh -c 'echo ok')
  [[ $("$DROVER" logs "$id") == ok ]] || die "a Drover job did not run; see $DV/up.log"
  put drover_version "$("$DROVER" version | awk '/^server:/ {print $2}')"
  latency drover "$DROVER" submit --gpus 1 --wait -- true
  if "$DROVER" submit --help | grep -q -- '--array'; then
    throughput drover array "$ARRAY" drover_array
  else
    log "drover: no --array yet"
  fi
  throughput drover one_by_one "$ONE_BY_ONE" drover_singles
}

# ----------------------------------------------------------------- report --
put nproc "$(nproc)"
put cpu "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
put sizes "$SAMPLES $ARRAY $ONE_BY_ONE"
started=$SECONDS
if [[ $ONLY != drover ]]; then slurm_bench; fi
if [[ $ONLY != slurm ]]; then drover_bench; fi
put run_s "$((SECONDS - started))"

"$PY" - "$RESULTS" "${OUT_JSON:-}" <<'EOF'
import json, sys
r = {}
for line in open(sys.argv[1]):
    key, _, value = line.rstrip("\n").partition(" ")
    r.setdefault(key, []).append(value)
one = lambda k: r.get(k, [None])[0]
samples, sizes = int(one("sizes").split()[0]), dict(zip(("array", "one_by_one"), map(int, one("sizes").split()[1:])))

def pct(xs, p):  # linear interpolation between closest ranks
    xs = sorted(xs); k = (len(xs) - 1) * p / 100; i = int(k)
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * (k - i)

def system(s):
    out = {"version": one(f"{s}_version")}
    if lat := [float(x) for x in r.get(f"{s}_lat", [])]:
        out["latency_ms"] = {"p50": round(pct(lat, 50) * 1e3, 1), "p99": round(pct(lat, 99) * 1e3, 1),
                             "samples": len(lat), "exit0": one(f"{s}_lat_ok")}
    for key, n in sizes.items():
        if secs := one(f"{s}_{key}_s"):
            out[key] = {"jobs": n, "seconds": round(float(secs), 3),
                        "jobs_per_s": round(n / float(secs), 2), "exit0": one(f"{s}_{key}_ok")}
    return out

S, D = system("slurm"), system("drover")
ratio = {}  # > 1: Drover is better (Slurm's time over Drover's; Drover's jobs/s over Slurm's)
if "latency_ms" in S and "latency_ms" in D:
    for p in ("p50", "p99"):
        ratio[f"latency_{p}"] = round(S["latency_ms"][p] / D["latency_ms"][p], 2)
for key in sizes:
    if key in S and key in D:
        ratio[key] = round(D[key]["jobs_per_s"] / S[key]["jobs_per_s"], 2)
res = {"machine": {"nproc": int(one("nproc")), "cpu": one("cpu")}, "run_seconds": int(one("run_s")),
       "slurm": S, "drover": D, "ratio": ratio}

def lat(x):
    if "latency_ms" not in x: return "-"
    m = x["latency_ms"]
    return f"{m['p50']:.0f} / {m['p99']:.0f} ms ({m['exit0']} exit 0)"
def tput(x, key):
    if key in x:
        m = x[key]
        return f"{m['jobs_per_s']:g} jobs/s ({m['seconds']:.1f} s, {m['exit0']} exit 0)"
    return "n/a (no --array yet)" if x is D and D["version"] and key == "array" else "-"
rat = lambda key: f"{ratio[key]:g}x" if key in ratio else "-"

print(f"\nMachine: {res['machine']['nproc']} CPUs, {res['machine']['cpu']}; Slurm {S['version'] or '-'}, "
      f"Drover {D['version'] or '-'}; the run took {res['run_seconds']} s\n")
print("| measurement | Slurm | Drover | ratio (> 1: Drover better) |")
print("|---|---|---|---|")
print(f"| submit-to-exit of a 1-GPU `true`, p50 / p99 ({samples} runs) | {lat(S)} | {lat(D)} "
      f"| {rat('latency_p50')} / {rat('latency_p99')} |")
print(f"| array of {sizes['array']}, until all ended | {tput(S, 'array')} | {tput(D, 'array')} | {rat('array')} |")
print(f"| {sizes['one_by_one']} submitted one by one, until all ended | {tput(S, 'one_by_one')} "
      f"| {tput(D, 'one_by_one')} | {rat('one_by_one')} |")
if sys.argv[2]:
    with open(sys.argv[2], "w") as f:
        json.dump(res, f, indent=2)
EOF
