#!/usr/bin/env bash
# Group commit through a 3-member etcd, next to sequential etcd puts and the
# SQLite store, in one run on one machine (docs/performance.md, "HA").
#
#   bench/ha_throughput.sh            # about two minutes on 2 CPUs
#   PORT_BASE=28000 bench/ha_throughput.sh
#
# Starts three etcd members (as `drover up --ha` runs them: 500 ms election
# timeout, room for 4,096 operations per transaction) in a temp dir, then:
#   etcdctl put, 200 times             one process per put (a shell loop)
#   store_bench BM_EtcdSequentialPut   one client, one 300-byte record per put
#   store_bench BM_EtcdCommitBatch     16 and 256 records per transaction
#   api_bench   BM_Submit              the real server on that etcd (leader,
#                                      every write fenced), 1-64 client threads
#   api_bench   BM_Submit              the same server on SQLite
# and prints the submit rates against the sequential put rate. Needs
# build/bench/{store_bench,api_bench} and etcd (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${PORT_BASE:-28000}
tmp=$(mktemp -d /tmp/drover-ha-throughput-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

initial=""
clients=""
for i in 0 1 2; do
  initial+="${initial:+,}m$i=http://127.0.0.1:$((BASE + 2 * i + 1))"
  clients+="${clients:+,}127.0.0.1:$((BASE + 2 * i))"
done
for i in 0 1 2; do
  c="http://127.0.0.1:$((BASE + 2 * i))"
  p="http://127.0.0.1:$((BASE + 2 * i + 1))"
  etcd --name "m$i" --data-dir "$tmp/etcd-$i" --listen-client-urls "$c" --advertise-client-urls "$c" \
    --listen-peer-urls "$p" --initial-advertise-peer-urls "$p" --initial-cluster "$initial" \
    --initial-cluster-state new --heartbeat-interval 100 --election-timeout 500 \
    --max-txn-ops 4096 --max-request-bytes 8388608 --logger zap --log-level error \
    --log-outputs "$tmp/etcd-$i.log" >/dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 1 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$clients" endpoint health >/dev/null 2>&1 && break
  sleep 0.2
done
ETCDCTL_API=3 etcdctl --endpoints "$clients" endpoint health >/dev/null

url="etcd://$clients"
# The issue's other baseline: sequential puts with etcdctl, one process per
# put, as a shell script would write them (200 of 300 bytes, to the first
# member).
value=$(head -c 300 /dev/zero | tr '\0' x)
first=${clients%%,*}
start=$(date +%s.%N)
for i in $(seq 1 200); do
  ETCDCTL_API=3 etcdctl --endpoints "$first" put "/etcdctl-baseline/$i" "$value" >/dev/null
done
end=$(date +%s.%N)
echo "{\"etcdctl_puts_per_second\": $(python3 -c "print(200 / ($end - $start))")}" >"$tmp/etcdctl.json"
echo "3-member etcd on $clients ($(nproc) CPUs, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
DROVER_BENCH_ETCD="$url" build/bench/store_bench --benchmark_filter=Etcd \
  --benchmark_out="$tmp/store.json" --benchmark_out_format=json
DROVER_BENCH_STORE="$url/api-bench" build/bench/api_bench --benchmark_out="$tmp/api_etcd.json" \
  --benchmark_out_format=json 2>"$tmp/api_etcd.err"
build/bench/api_bench --benchmark_out="$tmp/api_sqlite.json" --benchmark_out_format=json 2>"$tmp/api_sqlite.err"

python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def rates(name):
    out = {}
    for b in json.load(open(f"{tmp}/{name}.json"))["benchmarks"]:
        if "items_per_second" in b:
            out[b["name"]] = b["items_per_second"]
    return out
store, etcd, sqlite = rates("store"), rates("api_etcd"), rates("api_sqlite")
seq = next(v for k, v in store.items() if k.startswith("BM_EtcdSequentialPut"))
ctl = json.load(open(f"{tmp}/etcdctl.json"))["etcdctl_puts_per_second"]
print()
print(f"sequential etcd puts, one client: {seq:,.0f} records/s")
print(f"sequential etcdctl puts, a process each: {ctl:,.0f} records/s")
for k, v in store.items():
    if k.startswith("BM_EtcdCommitBatch"):
        print(f"{k}: {v:,.0f} records/s ({v / seq:.1f}x)")
print()
print("| client threads | submits/s on 3-member etcd | x client-loop puts | x etcdctl puts | submits/s on SQLite |")
print("| --- | --- | --- | --- | --- |")
for k, v in etcd.items():
    threads = k.split("threads:")[-1]
    s = next((sv for sk, sv in sqlite.items() if sk == k), float("nan"))
    print(f"| {threads} | {v:,.0f} | {v / seq:.1f}x | {v / ctl:.1f}x | {s:,.0f} |")
PY
