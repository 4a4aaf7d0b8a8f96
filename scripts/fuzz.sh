#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of tests/fuzz (README.md there).
#
#   scripts/fuzz.sh --smoke              every seed and regression input, then
#                                        every target 10 s (make test: fuzz_smoke)
#   scripts/fuzz.sh --time 300 [TARGET]  each (or one) target 300 s, keeping what
#                                        it finds in build-fuzz/corpus/TARGET
#   scripts/fuzz.sh --list               the targets
#   scripts/fuzz.sh --build              only configure and build
#
# Options: --jobs N targets at once (default: the number of cores);
# --build-jobs N compiler processes (default: the number of cores).
#
# The build is the top-level project with DROVER_FUZZ=ON and clang in
# build-fuzz/ (incremental; ccache when installed). Any crash, sanitizer
# report, leak, input slower than 10 s or over 2 GiB fails the run; the input
# is saved as build-fuzz/artifacts/TARGET/crash-* (or leak-, timeout-, oom-),
# and reproduces with build-fuzz/tests/fuzz/TARGET FILE. Once fixed, copy it
# to tests/fuzz/regressions/TARGET/ so that every smoke run replays it.
# Per target the final libFuzzer line (#N DONE ... exec/s) is printed and a
# table goes to build-fuzz/fuzz-summary-{smoke,time}.txt.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"
fuzz_src="$root/tests/fuzz"
cores="$(nproc)"

mode=""
seconds=10
jobs="$cores"
build_jobs="$cores"
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) mode=smoke; shift ;;
    --time) mode=time; seconds="$2"; shift 2 ;;
    --list) mode=list; shift ;;
    --build) mode=build; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build-jobs) build_jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) only+=("$1"); shift ;;
  esac
done
if [ -z "$mode" ]; then
  echo "fuzz.sh: give --smoke, --time SECONDS, --list or --build (see --help)" >&2
  exit 2
fi

# ---- build ----
cxx="${FUZZ_CXX:-clang++}"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found; scripts/install-deps.sh installs clang and libclang-rt-14-dev" >&2
  exit 1
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    "$cxx" -x c++ -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx cannot link libFuzzer (-fsanitize=fuzzer); scripts/install-deps.sh installs libclang-rt-14-dev" >&2
  exit 1
fi
start_build=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DDROVER_FUZZ=ON \
    -DDROVER_WERROR=OFF -DCMAKE_BUILD_TYPE= >/dev/null
fi
cmake --build "$build" --target fuzz_targets -j "$build_jobs"
echo "fuzz.sh: build took $(( $(date +%s) - start_build )) s"
mapfile -t all < "$build/fuzz_targets.txt"
if [ "$mode" = list ]; then printf '%s\n' "${all[@]}"; exit 0; fi
if [ "$mode" = build ]; then exit 0; fi

targets=("${all[@]}")
if [ ${#only[@]} -gt 0 ]; then
  for t in "${only[@]}"; do
    if ! printf '%s\n' "${all[@]}" | grep -qx "$t"; then
      echo "fuzz.sh: no target '$t' (there are: ${all[*]})" >&2
      exit 2
    fi
  done
  targets=("${only[@]}")
fi

# ---- run ----
# The config target reads DROVER_* variables as the binary does: run without any.
for v in $(compgen -e | grep '^DROVER_' || true); do unset "$v"; done
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# A smoke run keeps nothing but the logs of what failed (in build-fuzz/logs/
# smoke/), so that runs at once (make test beside a long run) do not mix.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ "$mode" = smoke ]; then
  logs="$work/logs"
else
  logs="$build/logs/$mode"
fi
mkdir -p "$logs"

# run_target TARGET: runs every seed and regression input (and, for --time,
# the kept corpus), then fuzzes for $seconds; writes the log to
# $logs/TARGET.log; its status is libFuzzer's.
run_target() {
  local t="$1" corpus artifacts dict=()
  if [ "$mode" = smoke ]; then
    corpus="$work/$t"
  else
    corpus="$build/corpus/$t"
  fi
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  [ -f "$fuzz_src/dict/$t.dict" ] && dict=(-dict="$fuzz_src/dict/$t.dict")
  local seeds=()
  [ -d "$fuzz_src/corpus/$t" ] && seeds+=("$fuzz_src/corpus/$t")
  [ -d "$fuzz_src/regressions/$t" ] && seeds+=("$fuzz_src/regressions/$t")
  # libFuzzer first runs every input of every folder whole (its length limit
  # is the largest of them), then mutates; new inputs go to the first folder,
  # the others are only read.
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" \
    "$corpus" "${seeds[@]}" >"$logs/$t.log" 2>&1
}

failed=()
summary="$build/fuzz-summary-$mode.txt"
printf '%-20s %8s %12s %10s %8s\n' target seconds executions exec/s corpus > "$summary"
# keep_log FILE: the log of a failure, where it outlives the run.
keep_log() {
  if [ "$mode" = smoke ]; then
    mkdir -p "$build/logs/smoke"
    cp "$1" "$build/logs/smoke/"
    echo "  log: $build/logs/smoke/$(basename "$1")"
  else
    echo "  log: $1"
  fi
}

report() {
  local t="$1" rc="$2" done_line execs speed corpus_files
  done_line="$(grep -aE '^#[0-9]+[[:space:]]+DONE' "$logs/$t.log" | tail -1 || true)"
  if [ "$rc" -ne 0 ] || [ -z "$done_line" ]; then
    failed+=("$t")
    echo "FAIL $t (exit $rc): $(grep -a -m1 -E 'ERROR|property violated|SUMMARY' "$logs/$t.log" || echo 'see log')"
    grep -aE 'Test unit written|artifact' "$logs/$t.log" | tail -2 || true
    keep_log "$logs/$t.log"
    return
  fi
  execs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")"
  speed="$(sed -E 's/.*exec\/s: ([0-9]+).*/\1/' <<<"$done_line")"
  corpus_files="$(sed -E 's/.*corp: ([0-9]+)\/.*/\1/' <<<"$done_line")"
  printf '%-20s %8s %12s %10s %8s\n' "$t" "$seconds" "$execs" "$speed" "$corpus_files" >> "$summary"
  echo "ok   $t: $done_line"
}

start_run=$(date +%s)
# Up to $jobs targets at once, reported in order.
pids=()
names=()
for t in "${targets[@]}"; do
  run_target "$t" &
  pids+=($!)
  names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    rc=0; wait "${pids[0]}" || rc=$?
    report "${names[0]}" "$rc"
    pids=("${pids[@]:1}"); names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  rc=0; wait "${pids[$i]}" || rc=$?
  report "${names[$i]}" "$rc"
done

echo "fuzz.sh: ran ${#targets[@]} targets for ${seconds} s each in $(( $(date +%s) - start_run )) s; table in $summary"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
