// Group commit on the SQLite store (WAL, synchronous=FULL): the cost of one
// durable transaction holding N job records. Per-record cost falls with N,
// which is why the control loop commits a batch of records per transaction.
//   ./build/bench/store_bench

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

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

}  // namespace
}  // namespace drover::store

BENCHMARK_MAIN();
