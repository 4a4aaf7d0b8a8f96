#pragma once
// The model behind sched_property_test (property_test.cc says what it
// checks): random clusters, tenants, jobs and events from a seeded Rng, a
// World that feeds them to a scheduler and its twin, and this model's own
// books of who holds which GPU, which trust nothing but the returned
// Decisions. Test-only.
//
//   property_model.cc   the helpers, and the World's random setup and events
//   property_checks.cc  a scheduling pass and what its decisions must
//                       satisfy, the shadow books, recovery and the end

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/rng.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"

namespace drover::sched::testing {

struct GpuClassSpec {
  const char* vendor;
  const char* model;
  int64_t memory;
};
inline constexpr GpuClassSpec kClasses[] = {
    {"nvidia", "H100 80GB", 80 * kGiB},
    {"nvidia", "A100 40GB", 40 * kGiB},
    {"amd", "MI300X", 192 * kGiB},
    {"intel", "Max 1550", 128 * kGiB},
};
inline constexpr int kClassCount = 4;

struct Policy {
  QueuePolicy queue;
  PlacementPolicy placement;
  bool backfill;
  bool preemption;
};

// "fifo_binpack_backfill_preempt": a policy as a test name.
std::string PolicyName(const Policy& p);

// Every policy combination: queue x placement x backfill x preemption.
std::vector<Policy> AllPolicies();

// "n1[0,1]", or "n1[2]@250m/10GiB" for a share; for the event trace.
std::string Describe(const Placement& p);

// Whether two passes decided exactly the same bindings and preemptions.
bool SameDecisions(const Decisions& a, const Decisions& b);

// The link between two GPUs as the header defines it (an empty matrix is
// derived from NUMA nodes).
Link LinkBetween(const NodeInfo& n, int i, int j);

// Who holds one GPU, from the decisions alone.
struct GpuUse {
  std::string whole;  // the job holding all of it, or empty
  int shared_milli = 0;
  int64_t shared_mem = 0;
  int sharers = 0;
};

enum class Phase { kPending, kBound, kPreempting };

struct ShadowJob {
  JobRequest req;
  uint64_t seq = 0;  // submission order; kept across requeues
  Phase phase = Phase::kPending;
  std::vector<Placement> placements;
  int stop_at_step = -1;  // preempting: when the "agent" reports it stopped
  int64_t bound_ms = 0;
  int64_t attained = 0;  // GPU-ms of service in runs that ended (LAS)
  bool nominee = false;  // preempted for: starts ahead of the queue once its victims stop
};

struct ShadowTenant {
  int64_t milli = 0;
  int64_t memory = 0;
  std::map<std::string, int64_t> by_model;
};

// The integer value of environment variable `name`, or `fallback` if unset.
int EnvInt(const char* name, int fallback);

// Returns Internal(fmt::format(...)) from the enclosing function unless
// `cond` holds: how every check of the model reports a broken property.
#define CHECK_OR_FAIL(cond, ...)                            \
  do {                                                      \
    if (!(cond)) return Internal(fmt::format(__VA_ARGS__)); \
  } while (0)

// One random world: a cluster, its tenants, a job stream and two schedulers
// fed the same events. Owns everything; single-threaded.
class World {
 public:
  World(uint64_t seed, const Policy& policy);

  // Runs `steps` random events, then empties the cluster. The first broken
  // property comes back as an error.
  Status Run(int steps);

  // The last events, for the failure message.
  std::string Trace() const;
  int step() const { return step_; }

  // The nodes and tenants, for the failure message.
  std::string Cluster() const;

 private:
  int64_t U(int64_t lo, int64_t hi) { return rng_.Uniform(lo, hi); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(U(0, static_cast<int64_t>(v.size()) - 1))];
  }
  void Log(std::string event) {
    trace_.push_back(fmt::format("step {} t={}s: {}", step_, now_ / 1000, event));
    if (trace_.size() > trace_limit_) trace_.pop_front();
  }

  // Both schedulers must answer alike.
  static Status Twin(const Status& a, const Status& b, std::string_view what) {
    CHECK_OR_FAIL(a.code() == b.code() && a.message() == b.message(), "twin schedulers disagree on {}: '{}' vs '{}'",
                  what, a.ToString(), b.ToString());
    return Status::Ok();
  }

  // ---- setup (property_model.cc) ----
  NodeInfo RandomNode(int i);
  Status Setup();
  JobRequest RandomJob();

  // ---- events (property_model.cc) ----
  std::vector<std::string> JobsIn(Phase phase) const;
  Status RandomEvent();
  Status Enqueue();
  Status FinishRandom(Phase phase);
  Status LoseRandom();
  Status RequeueJob(const std::string& id, std::string_view why);
  Status StopDueVictims();
  Status UpsertBoth(const NodeInfo& n);
  Status ToggleDrain();
  Status ToggleHealth();
  Status ProbeNeverFits();
  Status ExpectErrors();

  // ---- a pass, and what the decisions must satisfy (property_checks.cc) ----
  Status SchedulePass(int64_t advance_ms);
  Status ApplyBinding(const Binding& b);
  Status ApplyPreemption(const Preemption& p, const std::map<std::string, int64_t>& borrowing);
  Status CheckStrictOrder(std::vector<std::string> before, const Decisions& d);

  // ---- shadow books (property_checks.cc) ----
  void Charge(const JobRequest& r, const NodeInfo& n, const Placement& p, int sign);
  void Release(const std::string& id);
  std::map<std::string, int> Guarantees(const std::string& tenant) const;
  std::map<std::string, int64_t> MilliByModel(const ShadowJob& j) const;
  int64_t PreemptingMilli(const std::string& tenant, const std::string& model) const;
  int64_t Borrowed(const std::string& tenant);
  Status CheckAll();
  Status CheckRecovery();

  // ---- the end (property_checks.cc) ----
  bool QuotaBlocked(const JobRequest& r) const;
  Status Quiesce();

  Rng rng_;
  Config config_;
  Scheduler a_;
  Scheduler b_;  // the twin: same events, must decide the same
  int64_t now_ = 1'700'000'000'000;
  int step_ = 0;
  std::vector<NodeInfo> nodes_;
  std::map<std::string, std::vector<GpuUse>> use_;
  std::map<std::string, TenantInfo> tenants_;
  std::vector<std::string> tenant_names_;  // "default" (unknown to the scheduler) and tenants_
  std::map<std::string, ShadowTenant> usage_;
  std::map<std::string, ShadowJob> jobs_;
  int next_job_ = 0;
  uint64_t next_seq_ = 0;
  std::deque<std::string> trace_;
  size_t trace_limit_ = static_cast<size_t>(EnvInt("DROVER_PROPERTY_TRACE", 40));
};

}  // namespace drover::sched::testing
