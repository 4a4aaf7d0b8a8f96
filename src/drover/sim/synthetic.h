#pragma once
// A seeded generator of mixed GPU workloads: arrivals, job shapes (whole
// GPUs, shares of one GPU, multi-node gangs, CPU-only), run times, tenants,
// priorities, preemptibility and runtime estimates, each drawn from a small
// declared mix. The YAML form (`kind: synthetic`) and every key are in
// docs/simulator-inputs.md; LoadWorkload (loaders.h) reads it.
//
// Example: 1,000 jobs as a Poisson stream of 120 an hour, 70% one GPU, 20%
// a quarter GPU, 10% a 4 x 8 gang, log-normal run times around 30 minutes.
//
//   kind: synthetic
//   seed: 7
//   arrivals: {process: poisson, rate_per_hour: 120, count: 1000}
//   gpus: {"1": 7, "0.25": 2, "4x8": 1}
//   duration: {distribution: lognormal, median: 30m, sigma: 1.0, max: 2d}
//
// The same config and seed give the same jobs (drover::Rng, one stream per
// run); 1,000,000 jobs take under a second. Pure: no I/O here.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sim/workload.h"

namespace drover::sim {

// One entry of the shape mix: `replicas` x `gpus` GPUs of `gpu_milli` each.
// "1" -> 1 x 1 x 1000; "0.25" -> 1 x 1 x 250; "4x8" -> 4 x 8 x 1000;
// "0" -> a CPU-only job (gpus = 0).
struct JobShape {
  std::string label;  // as written in the mix
  int replicas = 1;
  int gpus = 1;
  int gpu_milli = 1000;
  double weight = 1;
};
// "2" / "0.5" / "250m" / "4x8" / "0" -> a shape with weight 1.
Result<JobShape> ParseJobShape(std::string_view text);

template <typename T>
struct Weighted {
  T value;
  double weight = 1;
};

enum class ArrivalProcess : uint8_t {
  kPoisson,  // exponential gaps at rate_per_hour
  kUniform,  // `count` arrivals uniformly spread over `window_ms`
};
enum class DurationDist : uint8_t { kLognormal, kExponential, kFixed };
enum class EstimateMode : uint8_t {
  kNone,   // runtime_estimate_ms = 0 (unknown)
  kExact,  // the true run time
  kNoisy,  // run time x exp(sigma x N(0,1)): right on median, off by e^sigma at one sigma
};

// Invariants (checked by GenerateSynthetic): shapes, tenants and priorities
// non-empty with positive weights; count > 0 or window_ms > 0; kUniform
// needs both; 0 < min_ms <= max_ms.
struct SyntheticConfig {
  std::string name = "synthetic";
  uint64_t seed = 1;
  ArrivalProcess arrivals = ArrivalProcess::kPoisson;
  double rate_per_hour = 0;  // kPoisson, > 0
  int64_t count = 0;         // jobs to make; 0 = until window_ms ends (kPoisson)
  int64_t window_ms = 0;     // arrivals in [start_ms, start_ms + window_ms); 0 = no end (kPoisson)
  int64_t start_ms = 0;
  std::vector<JobShape> shapes = {JobShape{}};
  DurationDist duration = DurationDist::kLognormal;
  int64_t median_ms = 3'600'000;  // kLognormal
  double sigma = 1.0;             // kLognormal
  int64_t mean_ms = 3'600'000;    // kExponential; also kFixed's value
  int64_t min_ms = 1'000;         // every drawn run time is clamped to [min_ms, max_ms]
  int64_t max_ms = 30LL * 86'400'000;
  std::vector<Weighted<std::string>> tenants = {{"default", 1}};  // share of arrivals
  std::vector<Weighted<int>> priorities = {{0, 1}};
  double preemptible = 0;  // probability that a job is preemptible
  EstimateMode estimates = EstimateMode::kNone;
  double estimate_sigma = 0.5;  // kNoisy
  // Host requests per GPU (a share: scaled by it; CPU-only jobs: as 1 GPU).
  int64_t cpu_milli_per_gpu = 0;
  int64_t memory_bytes_per_gpu = 0;
};

// Hard limit on generated jobs, so a typo in a rate cannot eat the memory.
inline constexpr int64_t kMaxSyntheticJobs = 20'000'000;

// Parses a `kind: synthetic` YAML document; `source` names it in errors
// ("mixed.yaml: gpus: '3x' is not a job shape"). Unknown keys are errors.
Result<SyntheticConfig> ParseSyntheticConfig(std::string_view yaml_text, std::string_view source);

// The jobs, ids j-000001 ... in arrival order. `seed` replaces config.seed.
Result<Workload> GenerateSynthetic(const SyntheticConfig& config, uint64_t seed);

}  // namespace drover::sim
