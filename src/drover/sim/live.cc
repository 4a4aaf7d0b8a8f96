#include "drover/sim/live.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "drover/common/rng.h"

namespace drover::sim {
namespace {

constexpr double kMsPerHour = 3'600'000;
constexpr int64_t kChunkWallMs = 60'000;     // one generator call per tenant per wall minute
constexpr int64_t kWarmupWallMs = 20'000;    // the warm-up's arrivals spread over this much wall time
constexpr double kWarmupJobsPerSecond = 50;  // ... or more, for a big cluster
constexpr int64_t kMinRunWallMs = 1'000;     // `sleep` gets at least a second
// Run times in simulated time.
constexpr double kMedianMs = 2 * kMsPerHour;
constexpr double kSigma = 0.8;
constexpr int64_t kMinMs = 10 * 60'000;
constexpr int64_t kMaxMs = 12 * 3'600'000;
constexpr double kEstimateSigma = 0.3;

// SplitMix64: decorrelates the seeds of the streams and chunks.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t StreamSeed(uint64_t seed, uint64_t stream, uint64_t chunk) { return Mix(Mix(Mix(seed) ^ stream) ^ chunk); }

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

struct ShapeSpec {
  std::string label;
  double weight;
};

// The tenant's shapes that exist on `c`: whole GPUs up to a node, shares
// only with known GPU memory, gangs only on two nodes or more.
Result<std::vector<JobShape>> Shapes(const std::vector<ShapeSpec>& specs, const LiveCluster& c) {
  std::vector<JobShape> out;
  for (const ShapeSpec& spec : specs) {
    DROVER_ASSIGN_OR_RETURN(JobShape s, ParseJobShape(spec.label));
    s.weight = spec.weight;
    sched::JobRequest probe;
    probe.replicas = s.replicas;
    probe.gpus = s.gpus;
    probe.gpu_milli = s.gpu_milli;
    if (s.gpu_milli < sched::kWholeGpu) {
      probe.gpu_memory_bytes = c.gpu_memory_bytes * s.gpu_milli / sched::kWholeGpu;
    }
    if (!FitsLiveCluster(probe, c)) continue;
    bool duplicate = std::any_of(out.begin(), out.end(), [&](const JobShape& o) {
      return o.replicas == s.replicas && o.gpus == s.gpus && o.gpu_milli == s.gpu_milli;
    });
    if (!duplicate) out.push_back(s);
  }
  return out;
}

double MeanMilli(const std::vector<JobShape>& shapes) {
  double sum = 0, weights = 0;
  for (const JobShape& s : shapes) {
    sum += s.weight * s.replicas * s.gpus * s.gpu_milli;
    weights += s.weight;
  }
  return weights > 0 ? sum / weights : 0;
}

}  // namespace

Result<LiveWorkloadKind> ParseLiveWorkloadKind(std::string_view kind) {
  if (kind == "mixed") return LiveWorkloadKind::kMixed;
  if (kind == "none") return LiveWorkloadKind::kNone;
  return InvalidArgument(fmt::format("workload '{}' is unknown (use mixed or none)", kind));
}

bool FitsLiveCluster(const sched::JobRequest& req, const LiveCluster& c) {
  if (req.replicas < 1 || req.replicas > c.nodes || c.gpus_per_node < 1) return false;
  if (req.gpus < 1 || req.gpus > c.gpus_per_node) return false;
  if (req.gpu_milli < sched::kWholeGpu) {
    // A share: one GPU, with memory reserved on it.
    return req.gpu_milli >= 1 && req.gpus == 1 && req.gpu_memory_bytes > 0 &&
           req.gpu_memory_bytes <= c.gpu_memory_bytes;
  }
  return req.gpu_milli == sched::kWholeGpu && req.gpu_memory_bytes <= c.gpu_memory_bytes;
}

double ClampedLognormalMean(double median_ms, double sigma, double min_ms, double max_ms) {
  if (sigma <= 0) return std::clamp(median_ms, min_ms, max_ms);
  // X = median e^(sigma Z): E[clamp(X)] = min P(X < min) + max P(X > max)
  // + median e^(sigma^2 / 2) [Phi(lb - sigma) - Phi(la - sigma)].
  const double la = std::log(min_ms / median_ms) / sigma;
  const double lb = std::log(max_ms / median_ms) / sigma;
  return min_ms * Phi(la) + max_ms * (1 - Phi(lb)) +
         median_ms * std::exp(sigma * sigma / 2) * (Phi(lb - sigma) - Phi(la - sigma));
}

LiveSchedulerSettings LiveScheduler(const LiveCluster& cluster, const std::string& gpu_model) {
  LiveSchedulerSettings s;
  s.config.queue = sched::QueuePolicy::kFairShare;
  s.config.preemption = true;
  const int64_t gpus = int64_t{cluster.nodes} * cluster.gpus_per_node;
  auto tenant = [&](const char* name, double weight, double guaranteed) {
    sched::TenantInfo t;
    t.name = name;
    t.weight = weight;
    if (int g = static_cast<int>(static_cast<double>(gpus) * guaranteed); g > 0) t.guaranteed_gpus[gpu_model] = g;
    s.tenants.push_back(std::move(t));
  };
  tenant("prod", 3, 0.3);
  tenant("research", 2, 0.3);
  tenant("batch", 1, 0);
  return s;
}

Result<LivePlan> LivePlan::Make(const LiveCluster& cluster, const LiveMixOptions& options) {
  if (cluster.nodes < 1 || cluster.nodes > 4096) {
    return InvalidArgument(fmt::format("live workload: {} nodes is outside 1..4096", cluster.nodes));
  }
  if (cluster.gpus_per_node < 1 || cluster.gpus_per_node > sched::kMaxGpusPerNode) {
    return InvalidArgument(fmt::format("live workload: needs GPUs on its nodes, and {} GPUs a node is outside 1..{}",
                                       cluster.gpus_per_node, sched::kMaxGpusPerNode));
  }
  if (cluster.gpu_memory_bytes < 0) return InvalidArgument("live workload: GPU memory must not be negative");
  if (!(options.time_scale >= 1 && options.time_scale <= 86'400)) {
    return InvalidArgument(fmt::format("live workload: time scale {} is outside 1..86400", options.time_scale));
  }
  if (!(options.target_load >= 0.05 && options.target_load <= 10)) {
    return InvalidArgument(fmt::format("live workload: target load {} is outside 0.05..10", options.target_load));
  }
  LivePlan plan;
  plan.cluster_ = cluster;
  plan.options_ = options;

  const int g = cluster.gpus_per_node;
  const std::string half_gang = fmt::format("2x{}", std::max(1, g / 2));
  const std::string node_gang = fmt::format("2x{}", g);
  struct TenantSpec {
    const char* name;
    int priority;
    double preemptible;
    double load_share;
    std::vector<ShapeSpec> shapes;
  };
  const std::vector<TenantSpec> specs = {
      {"prod", 100, 0.0, 0.3, {{"1", 4}, {"2", 3}, {"4", 2}, {"8", 1}}},
      {"research", 50, 0.3, 0.4, {{"0.5", 2}, {"1", 4}, {"2", 2}, {"4", 1}, {half_gang, 1}, {node_gang, 0.5}}},
      {"batch", 0, 0.5, 0.3, {{"0.25", 4}, {"0.5", 2}, {"1", 4}, {"2", 1}}},
  };
  const double mean_ms = ClampedLognormalMean(kMedianMs, kSigma, kMinMs, kMaxMs);
  const double capacity_milli = double{sched::kWholeGpu} * cluster.nodes * g;
  int64_t warmup_jobs = 0;
  for (const TenantSpec& spec : specs) {
    LiveTenant t;
    t.name = spec.name;
    t.priority = spec.priority;
    t.load_share = spec.load_share;
    DROVER_ASSIGN_OR_RETURN(t.stream.shapes, Shapes(spec.shapes, cluster));
    // Every tenant has "1", and one GPU fits any node that has GPUs.
    if (t.stream.shapes.empty()) return Internal(fmt::format("live workload: tenant {} has no job shape", t.name));
    t.mean_milli = MeanMilli(t.stream.shapes);
    SyntheticConfig& s = t.stream;
    s.name = "mixed-" + t.name;
    s.arrivals = ArrivalProcess::kPoisson;
    s.rate_per_hour = spec.load_share * options.target_load * capacity_milli * kMsPerHour / (t.mean_milli * mean_ms);
    s.count = 0;
    s.duration = DurationDist::kLognormal;
    s.median_ms = static_cast<int64_t>(kMedianMs);
    s.sigma = kSigma;
    s.min_ms = kMinMs;
    s.max_ms = kMaxMs;
    s.tenants = {{t.name, 1}};
    s.priorities = {{t.priority, 1}};
    s.preemptible = spec.preemptible;
    s.estimates = EstimateMode::kNoisy;
    s.estimate_sigma = kEstimateSigma;
    // The warm-up: about this tenant's share of one cluster's worth of GPUs.
    t.warmup_jobs = std::llround(spec.load_share * capacity_milli / t.mean_milli);
    warmup_jobs += t.warmup_jobs;
    plan.tenants_.push_back(std::move(t));
  }
  plan.warmup_jobs_ = warmup_jobs;
  const double warmup_wall_ms =
      std::max<double>(kWarmupWallMs, 1000.0 * static_cast<double>(warmup_jobs) / kWarmupJobsPerSecond);
  // The warm-up lies inside the first chunk.
  plan.chunk_ms_ = std::llround(std::max<double>(kChunkWallMs, warmup_wall_ms) * options.time_scale);
  plan.warmup_window_ms_ = std::max<int64_t>(1, std::llround(warmup_wall_ms * options.time_scale));
  // The first chunk now: a config the generator refuses fails here, not later.
  DROVER_RETURN_IF_ERROR(plan.Fill());
  return plan;
}

Status LivePlan::Fill() {
  const uint64_t chunk = static_cast<uint64_t>(next_chunk_);
  struct Drawn {
    SimJob job;
    size_t tenant;
  };
  std::vector<Drawn> drawn;
  for (size_t t = 0; t < tenants_.size(); ++t) {
    SyntheticConfig c = tenants_[t].stream;
    c.start_ms = next_chunk_ * chunk_ms_;
    c.window_ms = chunk_ms_;
    DROVER_ASSIGN_OR_RETURN(Workload w, GenerateSynthetic(c, StreamSeed(options_.seed, t, chunk)));
    for (SimJob& j : w.jobs) drawn.push_back({std::move(j), t});
    if (next_chunk_ == 0) {
      c.arrivals = ArrivalProcess::kUniform;
      c.start_ms = 0;
      c.window_ms = warmup_window_ms_;
      c.count = tenants_[t].warmup_jobs;
      if (c.count > 0) {
        DROVER_ASSIGN_OR_RETURN(Workload warm, GenerateSynthetic(c, StreamSeed(options_.seed, 100 + t, 0)));
        for (SimJob& j : warm.jobs) drawn.push_back({std::move(j), t});
      }
    }
  }
  ++next_chunk_;
  std::stable_sort(drawn.begin(), drawn.end(),
                   [](const Drawn& a, const Drawn& b) { return a.job.submit_ms < b.job.submit_ms; });
  // Loads are drawn in arrival order from the chunk's own stream.
  Rng rng(StreamSeed(options_.seed, 200, chunk));
  const double scale = options_.time_scale;
  for (Drawn& d : drawn) {
    LiveJob j;
    j.at_ms = std::llround(static_cast<double>(d.job.submit_ms) / scale);
    j.run_ms = std::max<int64_t>(kMinRunWallMs, std::llround(static_cast<double>(d.job.duration_ms) / scale));
    j.estimate_ms =
        std::max<int64_t>(kMinRunWallMs, std::llround(static_cast<double>(d.job.req.runtime_estimate_ms) / scale));
    j.load = std::round(30 + 70 * rng.UniformReal()) / 100;
    j.req = std::move(d.job.req);
    j.req.id.clear();
    j.req.runtime_estimate_ms = 0;  // estimate_ms says it in wall time
    if (j.req.fractional()) j.req.gpu_memory_bytes = cluster_.gpu_memory_bytes * j.req.gpu_milli / sched::kWholeGpu;
    ready_.push_back(std::move(j));
  }
  return Status::Ok();
}

Result<LiveJob> LivePlan::Next() {
  while (ready_.empty()) DROVER_RETURN_IF_ERROR(Fill());
  LiveJob j = std::move(ready_.front());
  ready_.pop_front();
  return j;
}

double LivePlan::jobs_per_minute() const {
  double per_sim_hour = 0;
  for (const LiveTenant& t : tenants_) per_sim_hour += t.stream.rate_per_hour;
  return per_sim_hour * options_.time_scale / 60;
}

double LivePlan::mean_run_ms() const {
  return ClampedLognormalMean(kMedianMs, kSigma, kMinMs, kMaxMs) / options_.time_scale;
}

}  // namespace drover::sim
