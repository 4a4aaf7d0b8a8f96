#pragma once
// The scheduler's view of the cluster: plain values, no wire types, no clock.
// Time is an integer count of milliseconds chosen by the caller (the server
// passes Unix time, the simulator its virtual clock).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::sched {

// The most GPUs one node may hold (free sets are 64-bit masks).
inline constexpr int kMaxGpusPerNode = 64;
// The compute share of one whole GPU, in milli-GPU.
inline constexpr int kWholeGpu = 1000;
// A time that never comes ("no estimate", "never frees").
inline constexpr int64_t kNever = INT64_MAX;

// How closely two GPUs of one node are linked; a larger value is closer.
// NVLink, AMD xGMI and Intel Xe Link all count as kFabric.
enum class Link : uint8_t {
  kCrossSocket = 0,  // through the CPU interconnect (nvidia-smi "SYS")
  kSameNuma = 1,     // same NUMA node / host bridge ("NODE", "PHB")
  kPcieSwitch = 2,   // behind one PCIe switch ("PIX", "PXB")
  kFabric = 3,       // direct GPU fabric ("NV#", xGMI)
};
std::string_view LinkName(Link link);

struct GpuInfo {
  int index = 0;  // node-local; gpus[i].index == i
  std::string vendor;
  std::string model;
  int64_t memory_bytes = 0;
  bool healthy = true;
  int numa_node = 0;
};

struct NodeInfo {
  // First what a placement reads of every node it visits (the scheduler
  // keeps this on a cache line of its own).
  // A node takes new work only when connected and not drained.
  bool schedulable = false;
  // Host capacity for jobs; 0 = not tracked (no limit).
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::string name;
  std::vector<GpuInfo> gpus;
  // Row-major gpus.size() x gpus.size() link matrix (the diagonal is
  // ignored). Empty: derived from numa_node (same NUMA node -> kSameNuma,
  // else kCrossSocket). GPUs joined by kFabric links form NVLink islands.
  std::vector<Link> links;
  // Free-form labels; "switch" and "rack" are the topology domains of gangs.
  std::map<std::string, std::string> labels;
};

// What a job asks of the topology. The levels are requirements; without one
// the scheduler still prefers the tightest placement it finds.
enum class Topology : uint8_t {
  kBestEffort = 0,  // prefer one island / NUMA node / switch / rack, accept any
  kIsland,          // each replica's GPUs on one NVLink island
  kNuma,            // each replica's GPUs on one NUMA node
  kSwitch,          // every replica on nodes with one value of label "switch"
  kRack,            // every replica on nodes with one value of label "rack"
};
std::string_view TopologyName(Topology t);
Result<Topology> ParseTopology(std::string_view s);

// What a job needs from the scheduler (validated before it gets here).
// Ordered for a pass over cold caches (the scheduler keeps a request on a
// 64-byte boundary): what every placement attempt reads fills the first two
// cache lines (shape, memory, estimate, GPU model, vendor and models), the
// host resources and node selector the third, the id and tenant, which a
// pass does not read, come last.
struct JobRequest {
  // Gang shape: `replicas` x `gpus` GPUs, placed all or nothing.
  int replicas = 1;
  int gpus = 1;  // per replica, on one node; 0 = a CPU-only job (host resources only)
  // kWholeGpu: whole GPUs. Less: a share of ONE GPU (gpus must be 1) that
  // also reserves `gpu_memory_bytes` of its memory.
  int gpu_milli = kWholeGpu;
  int priority = 0;  // larger runs first; preempts smaller when allowed
  // Whole GPUs: the minimum memory of each GPU (0 = any).
  // A share: the memory reserved on the shared GPU.
  int64_t gpu_memory_bytes = 0;
  int64_t runtime_estimate_ms = 0;  // 0 = unknown
  Topology topology = Topology::kBestEffort;
  bool preemptible = false;
  // False: it waits for free GPUs rather than preempt others.
  bool may_preempt = true;
  std::vector<std::string> gpu_models;  // any of these (and gpu_model if set); empty = any
  std::string gpu_model;                // exact, empty = any
  std::string gpu_vendor;               // exact, empty = any
  // Host resources per replica, against the node's cpu_milli / memory_bytes.
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::map<std::string, std::string> node_selector;  // every label must match
  // The container image it runs in (a reference or a digest; "" none):
  // among places as good, a node that holds it is taken
  // (Scheduler::SetNodeImages), which need not pull it.
  std::string image;
  std::string id;
  std::string tenant = "default";
  // Recovery (a server restart queues or restores its jobs again): the GPU
  // service the job attained in earlier runs (GPU-ms, as LAS counts it), and
  // when it was last queued (ms; 0: the time given to Enqueue).
  int64_t attained_gpu_ms = 0;
  int64_t queued_ms = 0;

  bool fractional() const { return gpu_milli < kWholeGpu; }
  // Milli-GPUs of the whole job.
  int64_t milli() const { return int64_t{replicas} * gpus * gpu_milli; }
};

// Where one replica runs.
struct Placement {
  std::string node;
  std::vector<int> gpu_indices;  // ascending
  int gpu_milli = kWholeGpu;     // per GPU; < kWholeGpu on a shared GPU
  int64_t gpu_memory_bytes = 0;  // reserved per GPU when shared; 0 for whole GPUs
};

struct Binding {
  std::string job_id;
  std::vector<Placement> replicas;  // replicas.size() == job.replicas
};

// A bound job the caller must stop (SIGTERM, then SIGKILL after grace_ms),
// then give back with Scheduler::Requeue (or Remove, if it ended anyway).
struct Preemption {
  std::string job_id;   // the victim
  std::string for_job;  // the job that needs its GPUs
  std::string reason;   // "priority 900 > 100", "tenant 'b' reclaims its guarantee"
  int64_t grace_ms = 0;
};

struct Decisions {
  std::vector<Binding> bindings;
  std::vector<Preemption> preemptions;
  // Pending jobs the pass decided about: bound, preempted for, or given a
  // reason to wait after a placement attempt (jobs merely behind a blocked
  // one in strict order are not counted). A pass's time over this is the
  // cost of one decision as bench/sched_bench measures it.
  int considered = 0;
  // Preemption searches the pass ran (a search that failed before is not
  // run again until something it reads changes).
  int preemption_searches = 0;
  // Waiting jobs the LAS starvation guard promoted in this pass
  // (Config::las_starvation_factor).
  int promotions = 0;
};

// A tenant's share of the cluster. Jobs of unknown tenants get weight 1, no
// guarantee and no borrowing limit.
struct TenantInfo {
  std::string name;
  double weight = 1.0;  // > 0; fair share is proportional to it
  // GPUs guaranteed per GPU model ("H100 80GB" -> 16). The tenant may always
  // use these; others may borrow them while idle and lose them on reclaim.
  std::map<std::string, int> guaranteed_gpus;
  // GPUs the tenant may use beyond its guarantees, all models together;
  // -1 = no limit.
  int borrow_limit = -1;
  // Hard caps (quotas): GPUs held at once per model ("*": all models
  // together), and GPU memory held at once (-1: none). A job that would
  // cross one waits, as with the borrowing limit.
  std::map<std::string, int> max_gpus = {};
  int64_t max_gpu_memory_bytes = -1;
  // CPU held at once by the tenant's jobs (with GPUs or without), in
  // thousandths of a CPU; -1: none.
  int64_t max_cpu_milli = -1;
};

enum class QueuePolicy : uint8_t {
  kFifo,       // submission order
  kPriority,   // priority, aged by waiting time, then submission order
  kFairShare,  // tenants by weighted dominant share (GPUs, GPU memory, CPU); priority within
  kLas,        // least attained GPU service first (Tiresias), then submission order
  kSjf,        // shortest runtime estimate first; jobs without one after, in order
};
enum class PlacementPolicy : uint8_t {
  kBinpack,  // fewest free GPUs that fit, keeping whole GPUs and islands free
  kSpread,   // most free GPUs first
  // Reference baselines from the FGD paper (Weng et al., ATC '23), for the
  // simulator's comparisons; both scan every node per decision.
  kBestFit,  // the node left with the least resources (CPU, memory, GPU shares, normalised sum)
  kRandom,   // a uniformly random node that fits (seeded by Config::seed)
  // Fragmentation-aware, from the request shapes learned from arrivals
  // (frag_placement.cc): bin-pack's candidate per GPU class, the classes
  // ranked by the share of arrivals that may use them (FGD's "no access"
  // term); CPU-only jobs where they raise the node's expected fragmentation least.
  kFrag,
};
std::string_view QueuePolicyName(QueuePolicy p);
std::string_view PlacementPolicyName(PlacementPolicy p);
Result<QueuePolicy> ParseQueuePolicy(std::string_view s);          // fifo|priority|fair-share|las|sjf
Result<PlacementPolicy> ParsePlacementPolicy(std::string_view s);  // binpack|spread|best-fit|random|frag

struct Config {
  QueuePolicy queue = QueuePolicy::kPriority;
  // kFrag is the default: on the FGD experiment's 20 pod lists it is above
  // the published FGD and BestFit figures on every list, kBinpack on 16
  // (docs/evaluation.md, "The packing experiment on every pod list").
  PlacementPolicy placement = PlacementPolicy::kFrag;
  // EASY backfill: a job that cannot start gets a reservation; later jobs
  // run only where they do not delay it. Off: strict order, the first job
  // that does not fit blocks every job behind it.
  bool backfill = true;
  bool preemption = true;
  // kPriority: a waiting job gains one priority level per aging_ms (0 = no aging).
  int64_t aging_ms = 60'000;
  // Time a preempted job gets between SIGTERM and SIGKILL.
  int64_t preemption_grace_ms = 30'000;
  // kFrag: the typical request shapes (those a node's fragmentation is
  // measured against, for CPU-only jobs) are the most frequent ones, ten at a
  // time, until they cover this share of the GPU arrivals (FGD's rule and
  // default, 0.6; docs/evaluation.md shows the sensitivity). In (0, 1].
  double frag_coverage = 0.6;
  // Seed of PlacementPolicy::kRandom (the only randomness in the scheduler).
  uint64_t seed = 1;
  // kLas (Tiresias' discretised LAS): a job's level is the number of these
  // thresholds of attained GPU service (GPU-ms: GPUs x ms, a share counts
  // its fraction), ascending, that it has reached. Lower levels go first,
  // submission order within a level; with preemption on, a waiting job may
  // preempt a preemptible job of a higher level (never of a higher
  // priority; another tenant's only on borrowed GPUs). Empty: one level,
  // i.e. FIFO.
  std::vector<int64_t> las_thresholds = {3'600'000, 36'000'000};  // 1 and 10 GPU-hours
  // kLas starvation guard (Tiresias' promotion): a waiting job that has
  // waited, since it was last queued, at least this many times the time it
  // has run (its attained service over its GPUs) is promoted: its attained
  // service is forgiven, so it goes back to level 0, ahead of every more
  // served job, and is preempted by LAS only as a level-0 job. So a job
  // that has run for T waits at most about factor x T behind less served
  // work. 0: no promotion.
  double las_starvation_factor = 4.0;
  // Tests: wherever the scheduler reuses a result from an earlier pass (a
  // failed preemption search, a node's reservation candidate) or skips a
  // probe that cannot succeed, it also computes it afresh, and
  // CheckInvariants reports the first difference. Slow; off in production.
  bool verify_memos = false;
};

// "1h,10h" -> {3'600'000, 36'000'000} (GPU-ms); "none" or "0" -> {}.
// Durations as ParseDurationMs, positive and ascending, at most 8.
Result<std::vector<int64_t>> ParseLasThresholds(std::string_view s);

// "4" -> 4.0: a finite factor in [0, 1e6] (0: the guard is off).
Result<double> ParseStarvationFactor(std::string_view s);

// The LAS level of `attained` GPU-ms under `c` (0 = least served).
inline int LasLevel(const Config& c, int64_t attained) {
  int level = 0;
  for (int64_t t : c.las_thresholds) level += attained >= t ? 1 : 0;
  return level;
}

}  // namespace drover::sched
