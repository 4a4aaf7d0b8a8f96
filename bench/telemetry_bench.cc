// Telemetry hot paths: one sample of a simulated GPU (the backend call the
// sampler makes per GPU per period), a health check, and rendering one
// node's GPU metrics under DCGM names (what a scrape of an agent costs).
// Results: docs/performance.md.

#include <benchmark/benchmark.h>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/health.h"
#include "drover/common/metrics.h"
#include "drover/rpc/gpu_metrics.h"

namespace {

void BM_SimulatedSample(benchmark::State& state) {
  auto backend =
      drover::agent::MakeSimulatedBackend({.count = 8, .model = "H100 80GB", .node_name = "n", .step_seconds = 0.01});
  (void)(*backend)->Discover();
  (*backend)->SetLoad(0, 0.8);
  for (auto _ : state) benchmark::DoNotOptimize((*backend)->Sample(0));
}
BENCHMARK(BM_SimulatedSample);

void BM_HealthCheck(benchmark::State& state) {
  drover::agent::HealthTracker tracker(8, {});
  drover::agent::HealthCheckInput clean;
  int64_t now = 0;
  for (auto _ : state) benchmark::DoNotOptimize(tracker.Check(3, clean, now += 1'000'000'000));
}
BENCHMARK(BM_HealthCheck);

// One node of `range(0)` GPUs with full telemetry rendered as text.
void BM_RenderGpuMetrics(benchmark::State& state) {
  drover::metrics::Registry registry;
  std::vector<drover::v1::Gpu> gpus(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < gpus.size(); ++i) {
    drover::v1::Gpu& g = gpus[i];
    g.set_index(static_cast<int>(i));
    g.set_uuid("GPU-" + std::to_string(i));
    g.set_vendor("nvidia");
    g.set_model("H100 80GB");
    g.set_job_id("j-00000" + std::to_string(i));
    g.set_tenant("ml");
    auto* t = g.mutable_telemetry();
    t->set_time_unix_nanos(1);
    t->set_utilization_pct(90);
    t->set_memory_utilization_pct(50);
    t->set_memory_used_bytes(int64_t{40} << 30);
    t->set_memory_total_bytes(int64_t{80} << 30);
    t->set_temperature_c(70);
    t->set_power_w(600);
    t->set_power_limit_w(700);
    t->set_sm_clock_mhz(1980);
    t->set_memory_clock_mhz(2619);
    t->set_ecc_corrected(0);
    t->set_ecc_uncorrected(0);
  }
  registry.AddCollector([&](drover::metrics::Exposition& out) {
    for (const auto& g : gpus) drover::rpc::WriteGpuMetrics("gpu-01", g, out);
  });
  size_t bytes = 0;
  for (auto _ : state) bytes = registry.Render().size();
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderGpuMetrics)->Arg(8)->Arg(8 * 64);

}  // namespace

BENCHMARK_MAIN();
