// Group commit on the SQLite store (WAL, synchronous=FULL): the cost of one
// durable transaction holding N job records. Per-record cost falls with N,
// which is why the control loop commits a batch of records per transaction.
//   ./build/bench/store_bench
// With DROVER_BENCH_ETCD=etcd://HOST:PORT,... (bench/ha_throughput.sh starts
// a 3-member etcd) the same against etcd, plus one client putting one record
// at a time: the sequential rate that group commit is compared with.

#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "drover/store/open.h"
#include "drover/store/sqlite/sqlite_store.h"

namespace drover::store {
namespace {

void BM_CommitBatch(benchmark::State& state) {
  std::string dir_template = "/tmp/drover-store-bench-XXXXXX";
  std::string dir = ::mkdtemp(dir_template.data());
  auto store = OpenSqliteStore(dir + "/bench.db", SystemClock::Get());
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return;
  }
  const int batch = static_cast<int>(state.range(0));
  const std::string value(300, 'x');  // about the size of a serialized job
  int64_t n = 0;
  for (auto _ : state) {
    std::vector<Op> ops;
    for (int i = 0; i < batch; ++i) ops.push_back(Op::Put("/jobs/j-" + std::to_string(n++), value));
    auto r = (*store)->Txn({}, ops, {});
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  store->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_CommitBatch)->Arg(1)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The etcd of DROVER_BENCH_ETCD, in a namespace of its own; null (the
// benchmark skips) without it.
std::unique_ptr<Store> OpenBenchEtcd(benchmark::State& state) {
  const char* url = std::getenv("DROVER_BENCH_ETCD");
  if (url == nullptr) {
    state.SkipWithError("set DROVER_BENCH_ETCD=etcd://HOST:PORT,... (bench/ha_throughput.sh)");
    return nullptr;
  }
  EtcdOptions options;
  options.max_txn_ops = 4096;
  options.max_request_bytes = 8 << 20;
  auto store = OpenStore(std::string(url) + "/bench-" + std::to_string(::getpid()), "", options, SystemClock::Get());
  if (!store.ok()) {
    state.SkipWithError(store.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*store);
}

// One client, one record per put, each waiting for the last: what a writer
// without group commit gets from etcd.
void BM_EtcdSequentialPut(benchmark::State& state) {
  auto store = OpenBenchEtcd(state);
  if (!store) return;
  const std::string value(300, 'x');
  int64_t n = 0;
  for (auto _ : state) {
    auto r = store->Put("/jobs/j-" + std::to_string(n++), value);
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations());
  (void)store->Txn({}, {Op::DeletePrefix("")}, {});
}
BENCHMARK(BM_EtcdSequentialPut)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(3);

void BM_EtcdCommitBatch(benchmark::State& state) {
  auto store = OpenBenchEtcd(state);
  if (!store) return;
  const int batch = static_cast<int>(state.range(0));
  const std::string value(300, 'x');
  int64_t n = 0;
  for (auto _ : state) {
    std::vector<Op> ops;
    for (int i = 0; i < batch; ++i) ops.push_back(Op::Put("/jobs/j-" + std::to_string(n++), value));
    auto r = store->Txn({}, ops, {});
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  (void)store->Txn({}, {Op::DeletePrefix("")}, {});
}
BENCHMARK(BM_EtcdCommitBatch)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace drover::store

BENCHMARK_MAIN();
