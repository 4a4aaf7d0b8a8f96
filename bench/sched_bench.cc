// Scheduling decision latency of the placeholder scheduler (FIFO, first fit):
// one job queued and placed, then released, on clusters of growing size.
//   ./build/bench/sched_bench

#include <benchmark/benchmark.h>

#include <string>

#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

Scheduler MakeCluster(int nodes, int gpus_per_node, double busy_fraction) {
  Scheduler s;
  for (int n = 0; n < nodes; ++n) {
    NodeInfo node{"node-" + std::to_string(n), {}, true};
    for (int g = 0; g < gpus_per_node; ++g) node.gpus.push_back(GpuInfo{g, "nvidia", "H100 80GB", int64_t{80} << 30, true});
    (void)s.UpsertNode(node);
  }
  // Fill the first nodes completely so that first fit has to walk past them.
  int busy_nodes = static_cast<int>(nodes * busy_fraction);
  for (int n = 0; n < busy_nodes; ++n) {
    JobRequest j{"fill-" + std::to_string(n), gpus_per_node, 0, "", ""};
    (void)s.Enqueue(j);
  }
  (void)s.Schedule();
  return s;
}

void BM_PlaceAndRelease(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const double busy = static_cast<double>(state.range(1)) / 100.0;
  Scheduler s = MakeCluster(nodes, 8, busy);
  JobRequest job{"j", 2, 0, "H100 80GB", "nvidia"};
  for (auto _ : state) {
    (void)s.Enqueue(job);
    auto b = s.Schedule();
    benchmark::DoNotOptimize(b);
    s.Remove(job.id);
  }
  state.counters["gpus"] = nodes * 8;
}
BENCHMARK(BM_PlaceAndRelease)
    ->Args({16, 0})
    ->Args({128, 0})
    ->Args({128, 90})
    ->Args({1024, 0})
    ->Args({1024, 90})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace drover::sched

BENCHMARK_MAIN();
