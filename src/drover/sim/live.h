#pragma once
// The plan behind `drover up --simulate N --workload mixed`: an endless,
// seeded stream of jobs for a live cluster of simulated nodes, drawn by the
// simulator's synthetic generator (synthetic.h) and scaled to the cluster so
// that a new user sees GPUs busy, queues forming and preemptions within a
// minute. Pure: it says what to submit and when (wall milliseconds after the
// start); the app (apps/drover/live_workload.cc) submits through the API.
//
// The mix, one Poisson stream per tenant (superposed, still Poisson):
//
//   tenant    priority  preemptible  share of load  shapes (weight)
//   prod      100       never        30%            1 (4), 2 (3), 4 (2), 8 (1)
//   research  50        30%          40%            0.5 (2), 1 (4), 2 (2), 4 (1), 2xG/2 (1), 2xG (0.5)
//   batch     0         50%          30%            0.25 (4), 0.5 (2), 1 (4), 2 (1)
//
// Whole-GPU shapes above G = gpus_per_node are dropped; shares need the GPU
// memory (they reserve share x memory); gangs need at least two nodes. Run
// times are log-normal in simulated time: median 2h, sigma 0.8, clamped to
// [10m, 12h], i.e. 2 minutes of wall time at the default 60x. Each tenant's
// rate is set so that its offered GPU demand (rate x mean GPUs x mean run
// time) is its share of target_load x capacity; at 1.3 the queue grows.
//
// Worked example: 4 nodes x 8 GPUs (32 GPUs), target 1.3, 60x. The mean run
// time is 2h x e^(0.32) = 2.75h (clamping changes it little); prod asks
// 2.6 GPUs a job on average, so its rate is 0.3 x 1.3 x 32 / (2.6 x 2.75)
// = 1.75 jobs an hour of simulated time, 1.75 a minute of wall time.
// A warm-up of uniform arrivals over the first 20 s of wall time (more for
// a big cluster, at most 50 jobs a second) adds about one cluster's worth
// of demand, so the GPUs fill at once instead of over the mean run time.
//
// The same cluster, options and seed give the same jobs. Not thread-safe:
// one owner (the submitting thread).

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sim/synthetic.h"

namespace drover::sim {

// `--workload` values: "mixed" or "none" (no live workload).
enum class LiveWorkloadKind : uint8_t { kNone, kMixed };
// Unknown -> kInvalidArgument naming the known kinds.
Result<LiveWorkloadKind> ParseLiveWorkloadKind(std::string_view kind);

// The part of the cluster the live workload may use: `nodes` nodes of
// `gpus_per_node` GPUs of one model with `gpu_memory_bytes` each.
struct LiveCluster {
  int nodes = 0;
  int gpus_per_node = 0;
  int64_t gpu_memory_bytes = 0;  // per GPU; 0 = unknown: no GPU shares in the mix
};

struct LiveMixOptions {
  double time_scale = 60;    // simulated seconds per wall second, 1..86400
  double target_load = 1.3;  // offered GPU demand / capacity, 0.05..10
  uint64_t seed = 1;
};

// One tenant of the mix: the generator config of its stream (rate in
// simulated time) and what every job of it carries.
struct LiveTenant {
  SyntheticConfig stream;  // stream.tenants = {name}, stream.priorities = {priority}
  std::string name;
  int priority = 0;
  double load_share = 0;    // of the offered load
  double mean_milli = 0;    // milli-GPUs a job asks on average
  int64_t warmup_jobs = 0;  // uniform arrivals in the warm-up
};

// One job to submit.
struct LiveJob {
  int64_t at_ms = 0;        // wall ms after the start
  int64_t run_ms = 0;       // wall ms the job runs (at least 1 s)
  int64_t estimate_ms = 0;  // wall ms, noisy (sigma 0.3) like a user's guess
  double load = 1;          // how busy it keeps its GPUs (DROVER_SIM_LOAD), 0.30..1.00
  // Tenant, priority, shape, preemptible; a share reserves its part of the
  // GPU memory (gpu_memory_bytes). No id, no GPU model: the caller adds those.
  sched::JobRequest req;
};

// Whether `req` fits on an empty `cluster` (its GPUs all healthy): whole
// GPUs at most gpus_per_node a replica, replicas at most one per node, a
// share at most the GPU's memory. The plan makes no other jobs.
bool FitsLiveCluster(const sched::JobRequest& req, const LiveCluster& cluster);

// The mean of a log-normal run time median x e^(sigma N(0,1)) clamped to
// [min_ms, max_ms] (what the generator draws), in ms.
double ClampedLognormalMean(double median_ms, double sigma, double min_ms, double max_ms);

// The scheduler settings the mix is made for; `drover up --workload mixed`
// uses them where the operator's config says nothing. Fair share with the
// default priority preemption: prod (100) and research (50) preempt
// preemptible batch (0) and research jobs on borrowed GPUs;
// guarantees of 30% of the GPUs each for prod and research (weights 3 and
// 2; batch weight 1, no guarantee) add quota reclaims, and keep batch from
// starving under priorities alone. Guarantees are of `gpu_model`, rounded
// down (none below one GPU).
struct LiveSchedulerSettings {
  sched::Config config;
  std::vector<sched::TenantInfo> tenants;
};
LiveSchedulerSettings LiveScheduler(const LiveCluster& cluster, const std::string& gpu_model);

// The endless stream: chunks of one minute of wall time, each drawn by
// GenerateSynthetic per tenant with a seed derived from (seed, tenant,
// chunk), merged in arrival order.
class LivePlan {
 public:
  // kInvalidArgument for a cluster without GPUs or options out of range.
  static Result<LivePlan> Make(const LiveCluster& cluster, const LiveMixOptions& options);

  // The next job, in arrival order (at_ms never decreases). Fails only if
  // the generator refuses a chunk, which Make has already tried.
  Result<LiveJob> Next();

  const std::vector<LiveTenant>& tenants() const { return tenants_; }
  const LiveCluster& cluster() const { return cluster_; }
  // Expected arrivals per wall minute in the steady state (warm-up aside).
  double jobs_per_minute() const;
  // Jobs of the warm-up (all in the first chunk).
  int64_t warmup_jobs() const { return warmup_jobs_; }
  // Mean run time, wall ms.
  double mean_run_ms() const;

 private:
  LivePlan() = default;
  Status Fill();  // generates the next chunk (possibly empty)

  LiveCluster cluster_;
  LiveMixOptions options_;
  std::vector<LiveTenant> tenants_;
  int64_t chunk_ms_ = 0;  // simulated ms per chunk
  int64_t next_chunk_ = 0;
  int64_t warmup_jobs_ = 0;
  int64_t warmup_window_ms_ = 0;  // simulated
  std::deque<LiveJob> ready_;
};

}  // namespace drover::sim
