#pragma once
// What a simulated run measured: GPU allocation over time, job completion
// and queueing times, makespan, fragmentation in the sense of the FGD paper,
// per-tenant shares against entitlements (Jain's index), preemptions, and
// the wall-clock latency of the scheduler's own decisions.
//
// Pure like the engine: the engine (engine.h) feeds a Recorder with what
// happened at which virtual time, plus the measured latency of each
// Schedule() call; Recorder::Finish() turns that into a Summary. Nothing here
// reads a clock. docs/simulator.md defines every number.
//
// Not thread-safe: owned by one run of the engine.

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "drover/sched/model.h"
#include "drover/sim/workload.h"

namespace drover::sim {

enum class Mode : uint8_t {
  kTime,     // jobs arrive, run for duration_ms, finish
  kPacking,  // jobs arrive one by one and never finish (FGD Fig. 9a)
};

// ---------------------------------------------------------------- statistics --

// Nearest-rank percentile (p in [0, 100]) of `values`: the smallest value
// with at least p% of the values at or below it; 0 when empty.
double Percentile(std::vector<double> values, double p);

struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
};
Distribution Summarize(std::vector<double> values);

// Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all x are equal,
// 1/n when one takes everything; 1 for an empty or all-zero input.
double JainIndex(const std::vector<double>& x);

// The time-weighted mean of a piecewise-constant signal: a value Set at t
// holds until the next Set. Example: Set(0, 10), Set(10, 30), Mean(40) =
// (10*10 + 30*30) / 40 = 25.
class TimeWeighted {
 public:
  void Set(int64_t t_ms, double value);  // t_ms never decreases
  // Mean over [first Set, end_ms]; the last value when the span is empty.
  double Mean(int64_t end_ms) const;

 private:
  bool started_ = false;
  int64_t start_ = 0;
  int64_t last_t_ = 0;
  double last_v_ = 0;
  double area_ = 0;  // value x ms up to last_t_
};

// ------------------------------------------------------------- fragmentation --

// One kind of task of the target workload (FGD's M): what one replica asks
// of a node, and how many replicas of the workload ask exactly that.
struct TaskClass {
  int gpus = 1;                      // per replica; 0 = CPU only
  int gpu_milli = sched::kWholeGpu;  // per GPU
  int64_t gpu_memory_bytes = 0;      // whole GPUs: minimum; a share: reserved
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<std::string> models;  // allowed GPU models (sorted); empty = any
  std::string vendor;               // empty = any
  int64_t count = 0;                // popularity
};
// The distinct per-replica requests of `jobs`, weighted by replica count.
std::vector<TaskClass> TargetWorkload(const std::vector<SimJob>& jobs);

// The free resources of one node, as the metrics account them.
struct NodeFree {
  std::vector<int> gpu_milli;       // free share per GPU (0 for an unhealthy GPU)
  std::vector<int64_t> gpu_memory;  // free memory per GPU
  int64_t cpu_milli = 0;            // free; ignored when the node tracks none
  int64_t memory_bytes = 0;
};

// FGD (Weng et al., USENIX ATC '23), the fragment of node `n` measured by a
// task `m`: the free GPU milli of `n` that `m` cannot use. If `m` does not
// fit `n` at all (too few GPUs free in the way it needs them, too little
// CPU or memory, no GPU of an allowed model) every free milli of `n` counts;
// otherwise the free milli of the GPUs it cannot use: a whole-GPU task
// cannot use partially taken GPUs, a share of d milli cannot use GPUs with
// less than d free, a CPU-only task uses no GPU and leaves nothing stranded.
//
// Worked example: an 8-GPU node with 2 GPUs idle, 3 at 500 free and 3 full.
// A 1-GPU task fits and strands the 1500 free milli of the half GPUs; a
// 0.6-GPU task fits and strands them too (500 < 600); a 0.5-GPU task
// strands nothing; a 4-GPU task does not fit and strands all 3500.
int64_t NodeFragment(const sched::NodeInfo& node, const NodeFree& free, const TaskClass& task);

// The cluster's GPUs as bindings take and release them, with the FGD
// fragmentation kept up to date per node (a binding touches few nodes, so a
// change costs O(task classes x GPUs of those nodes), not O(cluster)).
//
// Invariants: for every node and GPU, free + what bound placements hold on
// it = its capacity; frag_sum_ = sum of nodes_[i].frag.
class ClusterUsage {
 public:
  ClusterUsage(const Cluster& cluster, std::vector<TaskClass> target);

  // `sign` +1 when `binding` starts, -1 when it ends; per replica its
  // placement's GPUs and the request's CPU and memory.
  void Apply(const sched::JobRequest& req, const sched::Binding& binding, int sign);

  int64_t total_milli() const { return total_milli_; }
  int64_t allocated_milli() const { return allocated_milli_; }
  // Expected fragmented GPU milli over the target workload, in percent of
  // the cluster's GPU capacity.
  double fragmentation_pct() const;
  // GPUs of `node` held wholly or in part (for the engine's --check).
  uint64_t HeldMask(const std::string& node) const;
  const std::vector<sched::NodeInfo>& nodes() const { return infos_; }

 private:
  void Refresh(size_t node);

  std::vector<sched::NodeInfo> infos_;
  std::vector<NodeFree> free_;
  std::vector<int64_t> frag_;  // sum over classes of count x NodeFragment
  std::unordered_map<std::string, size_t> index_;
  std::vector<TaskClass> target_;
  int64_t target_count_ = 0;
  int64_t frag_sum_ = 0;
  int64_t total_milli_ = 0;
  int64_t allocated_milli_ = 0;
};

// ------------------------------------------------------------------ recording --

// One point of the time series, taken after each scheduling pass (time
// mode) or each arrival (packing mode).
struct Sample {
  int64_t t = 0;                 // virtual ms (time mode) or arrival number (packing)
  double arrived_pct = 0;        // cumulative GPU request of arrived jobs, % of cluster GPUs
  double allocation_pct = 0;     // allocated GPU milli / total GPU milli, %
  double fragmentation_pct = 0;  // FGD, % of cluster GPU capacity
  int64_t pending = 0;
  int64_t running = 0;
};

enum class JobEnd : uint8_t {
  kNone,       // still pending or running when the run ended
  kCompleted,  // ran to its end
  kRejected,   // could never fit the cluster (rejected on arrival, as the server does)
  kFailed,     // packing mode: did not bind when it arrived (or lost its GPUs to a preemptor)
};

struct JobRecord {
  int64_t submit_ms = 0;
  int64_t first_start_ms = -1;
  int64_t end_ms = -1;
  int preemptions = 0;
  JobEnd end = JobEnd::kNone;
  bool arrived = false;
};

struct TenantSummary {
  std::string name;
  double weight = 1;
  int64_t guaranteed_gpus = 0;  // all models together
  int64_t jobs = 0;
  int64_t completed = 0;
  double share_pct = 0;        // time-weighted mean of its GPU allocation, % of cluster GPUs
  double entitlement_pct = 0;  // weight / sum of weights of tenants with jobs, %
};

struct Summary {
  Mode mode = Mode::kTime;
  int64_t jobs = 0, arrived = 0, completed = 0, rejected = 0, failed = 0;
  int64_t pending_at_end = 0, running_at_end = 0;
  int64_t preemptions = 0, preempted_jobs = 0;
  double arrived_demand_pct = 0, failed_demand_pct = 0;
  Distribution jct_s, queue_delay_s;  // seconds
  double makespan_s = 0;
  double allocation_mean_pct = 0, allocation_peak_pct = 0, allocation_final_pct = 0;
  double fragmentation_mean_pct = 0, fragmentation_final_pct = 0;
  // Packing: arrived demand (integer % of cluster GPUs) -> allocation % when
  // the arrived demand first reached it.
  std::map<int, double> allocation_by_demand;
  std::vector<TenantSummary> tenants;
  double jain_index = 1;
  // Wall clock of the scheduler's passes and of the whole run.
  Distribution decision_us;
  int64_t passes = 0, events = 0;
  double wall_s = 0, events_per_s = 0;
  int64_t end_ms = 0;  // virtual time of the last pass
};

// Collects what the engine reports, in virtual time.
class Recorder {
 public:
  Recorder(const Cluster& cluster, const std::vector<SimJob>& jobs, Mode mode);

  void Arrived(size_t job);
  void Rejected(size_t job, int64_t now_ms);
  void Started(size_t job, const sched::Binding& binding, int64_t now_ms);
  // The job's GPUs (if any) are free again: it completed (kCompleted), was
  // preempted and waits again (kNone), or failed (kFailed, packing).
  void Stopped(size_t job, int64_t now_ms, JobEnd end);
  void Preempted(size_t job);
  // After a pass (time) or an arrival (packing): one sample.
  void Sample(int64_t now_ms, int64_t t, int64_t pending, int64_t running);
  void Pass(int64_t latency_ns) { latency_ns_.push_back(latency_ns); }
  void Event() { ++events_; }

  Summary Finish(int64_t end_ms, double wall_s) const;

  const ClusterUsage& usage() const { return usage_; }
  const std::vector<JobRecord>& records() const { return records_; }
  const std::vector<sim::Sample>& samples() const { return samples_; }

 private:
  const std::vector<SimJob>& jobs_;
  Mode mode_;
  ClusterUsage usage_;
  std::vector<JobRecord> records_;
  std::unordered_map<size_t, sched::Binding> live_;  // jobs holding GPUs now
  std::vector<sim::Sample> samples_;
  std::vector<int64_t> latency_ns_;
  int64_t events_ = 0;
  int64_t arrived_milli_ = 0;
  std::map<std::string, sched::TenantInfo> tenant_info_;
  std::map<std::string, int64_t> tenant_milli_;  // allocated now
  std::map<std::string, TimeWeighted> tenant_share_;
  TimeWeighted allocation_, fragmentation_;
  double peak_allocation_ = 0;
};

}  // namespace drover::sim
