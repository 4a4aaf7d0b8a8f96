// Property tests of the Scheduler: random clusters, tenants, jobs and events
// from a seeded Rng, under every policy combination (queue x placement x
// backfill x preemption). After every step the scheduler's CheckInvariants()
// runs, and so do this file's own checks, which trust nothing but the
// returned Decisions and keep their own books of who holds which GPU.
//
// What the decisions must satisfy: every replica placed, on healthy GPUs of
// schedulable nodes that match model, vendor, memory, selector and topology;
// no GPU double-booked (whole vs shared, compute and memory); no job bound
// twice; no job bound and preempted in one pass; victims preemptible, of
// lower priority or reclaimed from a tenant that borrows their GPU model
// (and is above its guarantee of it) by one below its guarantee of it; a
// reason for every pending job; strict order without backfill (fifo, sjf);
// usage, held masks and counts equal to this file's books; borrowing limits
// kept. Every 50 steps a third scheduler rebuilt through Restore and
// MarkPreempting must agree. A twin scheduler is fed the same events; every
// decision, status and reason must match (determinism). Each run ends by
// healing and undraining the cluster and running it empty: every job left
// must be one that can never run (NeverFits) or that its tenant's borrowing
// limit may keep out.
//
// A failure names the seed, the policy, the step and the last events. To
// replay or soak:
//   DROVER_PROPERTY_SEED=17 build/src/drover/sched/sched_property_test
//   DROVER_PROPERTY_STEPS=20000 build/src/drover/sched/sched_property_test
// DROVER_PROPERTY_TRACE=N prints the last N events instead of 40.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/rng.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

struct GpuClassSpec {
  const char* vendor;
  const char* model;
  int64_t memory;
};
constexpr GpuClassSpec kClasses[] = {
    {"nvidia", "H100 80GB", 80 * kGiB},
    {"nvidia", "A100 40GB", 40 * kGiB},
    {"amd", "MI300X", 192 * kGiB},
    {"intel", "Max 1550", 128 * kGiB},
};
constexpr int kClassCount = 4;

struct Policy {
  QueuePolicy queue;
  PlacementPolicy placement;
  bool backfill;
  bool preemption;
};

std::string PolicyName(const Policy& p) {
  std::string q(QueuePolicyName(p.queue));
  std::replace(q.begin(), q.end(), '-', '_');
  return fmt::format("{}_{}_{}_{}", q, PlacementPolicyName(p.placement), p.backfill ? "backfill" : "strict",
                     p.preemption ? "preempt" : "nopreempt");
}

std::string Describe(const Placement& p) {
  std::string idx;
  for (int i : p.gpu_indices) idx += fmt::format("{}{}", idx.empty() ? "" : ",", i);
  if (p.gpu_milli < kWholeGpu) return fmt::format("{}[{}]@{}m/{}", p.node, idx, p.gpu_milli, FormatBytes(p.gpu_memory_bytes));
  return fmt::format("{}[{}]", p.node, idx);
}

bool SameDecisions(const Decisions& a, const Decisions& b) {
  auto same_p = [](const Placement& x, const Placement& y) {
    return x.node == y.node && x.gpu_indices == y.gpu_indices && x.gpu_milli == y.gpu_milli &&
           x.gpu_memory_bytes == y.gpu_memory_bytes;
  };
  if (a.bindings.size() != b.bindings.size() || a.preemptions.size() != b.preemptions.size()) return false;
  for (size_t i = 0; i < a.bindings.size(); ++i) {
    const Binding& x = a.bindings[i];
    const Binding& y = b.bindings[i];
    if (x.job_id != y.job_id || x.replicas.size() != y.replicas.size()) return false;
    for (size_t r = 0; r < x.replicas.size(); ++r) {
      if (!same_p(x.replicas[r], y.replicas[r])) return false;
    }
  }
  for (size_t i = 0; i < a.preemptions.size(); ++i) {
    const Preemption& x = a.preemptions[i];
    const Preemption& y = b.preemptions[i];
    if (x.job_id != y.job_id || x.for_job != y.for_job || x.reason != y.reason || x.grace_ms != y.grace_ms) return false;
  }
  return true;
}

// The link between two GPUs as the header defines it (an empty matrix is
// derived from NUMA nodes).
Link LinkBetween(const NodeInfo& n, int i, int j) {
  if (n.links.empty()) {
    return n.gpus[static_cast<size_t>(i)].numa_node == n.gpus[static_cast<size_t>(j)].numa_node ? Link::kSameNuma
                                                                                                 : Link::kCrossSocket;
  }
  return n.links[static_cast<size_t>(i) * n.gpus.size() + static_cast<size_t>(j)];
}

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
  bool nominee = false;  // preempted for: starts ahead of the queue once its victims stop
};

struct ShadowTenant {
  int64_t milli = 0;
  int64_t memory = 0;
  std::map<std::string, int64_t> by_model;
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

#define CHECK_OR_FAIL(cond, ...) \
  do {                           \
    if (!(cond)) return Internal(fmt::format(__VA_ARGS__)); \
  } while (0)

// One random world: a cluster, its tenants, a job stream and two schedulers
// fed the same events. Owns everything; single-threaded.
class World {
 public:
  World(uint64_t seed, const Policy& policy) : rng_(seed) {
    config_.queue = policy.queue;
    config_.placement = policy.placement;
    config_.backfill = policy.backfill;
    config_.preemption = policy.preemption;
    config_.aging_ms = 5 * 60'000;
    config_.preemption_grace_ms = 30'000;
    a_ = Scheduler(config_);
    b_ = Scheduler(config_);
  }

  // Runs `steps` random events, then empties the cluster. The first broken
  // property comes back as an error.
  Status Run(int steps) {
    DROVER_RETURN_IF_ERROR(Setup());
    for (step_ = 0; step_ < steps; ++step_) {
      DROVER_RETURN_IF_ERROR(StopDueVictims());
      DROVER_RETURN_IF_ERROR(RandomEvent());
      DROVER_RETURN_IF_ERROR(CheckAll());
      if (step_ % 50 == 49) DROVER_RETURN_IF_ERROR(CheckRecovery());
    }
    return Quiesce();
  }

  // The last events, for the failure message.
  std::string Trace() const {
    std::string out;
    for (const std::string& t : trace_) out += "  " + t + "\n";
    return out;
  }
  int step() const { return step_; }

  // The nodes and tenants, for the failure message.
  std::string Cluster() const {
    std::string out;
    for (const NodeInfo& n : nodes_) {
      out += fmt::format("  node {}:{}", n.name, n.schedulable ? "" : " (drained)");
      for (const GpuInfo& g : n.gpus) {
        out += fmt::format(" {}{}/{}/numa{}", g.healthy ? "" : "!", g.model, FormatBytes(g.memory_bytes), g.numa_node);
      }
      out += n.links.empty() ? " links=numa" : " links=matrix";
      for (const auto& [k, v] : n.labels) out += fmt::format(" {}={}", k, v);
      out += "\n";
    }
    for (const auto& [name, t] : tenants_) {
      out += fmt::format("  tenant {}: weight {} borrow {}", name, t.weight, t.borrow_limit);
      for (const auto& [model, gpus] : t.guaranteed_gpus) out += fmt::format(" '{}':{}", model, gpus);
      out += "\n";
    }
    return out;
  }

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
    CHECK_OR_FAIL(a.code() == b.code() && a.message() == b.message(), "twin schedulers disagree on {}: '{}' vs '{}'", what,
                  a.ToString(), b.ToString());
    return Status::Ok();
  }

  // ---- setup ----

  NodeInfo RandomNode(int i) {
    NodeInfo n;
    n.name = fmt::format("n{}", i);
    int64_t cls_roll = U(0, 9);
    const GpuClassSpec& c = kClasses[cls_roll < 5 ? 0 : cls_roll < 7 ? 1 : cls_roll < 9 ? 2 : 3];
    int gpus = static_cast<int>(Pick<int64_t>({1, 2, 4, 8, 8, 8, 16, U(1, 16)}));
    bool two_numa = gpus >= 2 && rng_.Bernoulli(0.7);
    for (int g = 0; g < gpus; ++g) {
      n.gpus.push_back(GpuInfo{g, c.vendor, c.model, c.memory, !rng_.Bernoulli(0.05), two_numa && g >= gpus / 2 ? 1 : 0});
    }
    if (gpus >= 4 && rng_.Bernoulli(0.1)) {  // a node with two GPU classes
      const GpuClassSpec& o = kClasses[U(0, kClassCount - 1)];
      for (int g = gpus / 2; g < gpus; ++g) {
        GpuInfo& info = n.gpus[static_cast<size_t>(g)];
        info.vendor = o.vendor;
        info.model = o.model;
        info.memory_bytes = o.memory;
      }
    }
    if (gpus >= 2 && rng_.Bernoulli(0.6)) {
      int island = static_cast<int>(std::min<int64_t>(Pick<int64_t>({2, 4, 8}), gpus));
      size_t sz = static_cast<size_t>(gpus);
      n.links.assign(sz * sz, Link::kCrossSocket);
      for (int x = 0; x < gpus; ++x) {
        for (int y = 0; y < gpus; ++y) {
          Link l = n.gpus[static_cast<size_t>(x)].numa_node == n.gpus[static_cast<size_t>(y)].numa_node ? Link::kSameNuma
                                                                                                       : Link::kCrossSocket;
          if (x / 2 == y / 2) l = Link::kPcieSwitch;
          if (x / island == y / island) l = Link::kFabric;
          n.links[static_cast<size_t>(x) * sz + static_cast<size_t>(y)] = l;
        }
      }
    }
    if (!rng_.Bernoulli(0.1)) {
      int64_t rack = U(0, 2);
      n.labels["rack"] = fmt::format("r{}", rack);
      n.labels["switch"] = fmt::format("r{}-s{}", rack, U(0, 1));
    }
    n.labels["zone"] = fmt::format("z{}", U(0, 1));
    n.schedulable = !rng_.Bernoulli(0.1);
    return n;
  }

  Status Setup() {
    int node_count = static_cast<int>(U(2, 8));
    for (int i = 0; i < node_count; ++i) {
      NodeInfo n = RandomNode(i);
      DROVER_RETURN_IF_ERROR(UpsertBoth(n));
      use_[n.name].assign(n.gpus.size(), GpuUse{});
      nodes_.push_back(std::move(n));
    }
    int tenant_count = static_cast<int>(U(1, 3));
    for (int i = 0; i < tenant_count; ++i) {
      TenantInfo t;
      t.name = fmt::format("t{}", i);
      t.weight = static_cast<double>(Pick<int64_t>({1, 1, 2, 4})) / (rng_.Bernoulli(0.2) ? 2.0 : 1.0);
      for (const GpuClassSpec& c : kClasses) {
        if (rng_.Bernoulli(0.4)) t.guaranteed_gpus[c.model] = static_cast<int>(U(0, 8));
      }
      t.borrow_limit = rng_.Bernoulli(0.5) ? -1 : static_cast<int>(U(0, 8));
      Status s = a_.SetTenant(t);
      DROVER_RETURN_IF_ERROR(Twin(s, b_.SetTenant(t), "SetTenant"));
      CHECK_OR_FAIL(s.ok(), "valid tenant '{}' refused: {}", t.name, s.ToString());
      tenants_[t.name] = t;
    }
    tenant_names_ = {"default"};
    for (const auto& [name, t] : tenants_) tenant_names_.push_back(name);
    return CheckAll();
  }

  JobRequest RandomJob() {
    JobRequest j;
    j.id = fmt::format("j{}", next_job_++);
    j.tenant = Pick(tenant_names_);
    j.priority = static_cast<int>(Pick<int64_t>({0, 0, 10, 10, 100, 1000, U(0, 5)}));
    int64_t shape = U(0, 99);
    if (shape < 15) {
      j.gpu_milli = static_cast<int>(Pick<int64_t>({100, 250, 500, 750}));
      j.gpu_memory_bytes = U(1, 48) * kGiB;
    } else if (shape < 30) {
      j.replicas = static_cast<int>(U(2, 4));
      j.gpus = static_cast<int>(Pick<int64_t>({1, 2, 4, 8}));
    } else {
      j.gpus = static_cast<int>(Pick<int64_t>({1, 1, 1, 2, 2, 4, 8, U(1, 16)}));
    }
    if (rng_.Bernoulli(0.15)) {
      j.gpu_model = kClasses[U(0, kClassCount - 1)].model;
    } else if (rng_.Bernoulli(0.1)) {
      j.gpu_vendor = kClasses[U(0, kClassCount - 1)].vendor;
    }
    if (!j.fractional() && rng_.Bernoulli(0.1)) j.gpu_memory_bytes = Pick<int64_t>({40, 80, 100, 192}) * kGiB;
    if (rng_.Bernoulli(0.1)) {
      if (rng_.Bernoulli(0.5)) {
        j.node_selector["zone"] = fmt::format("z{}", U(0, 1));
      } else {
        j.node_selector["rack"] = fmt::format("r{}", U(0, 2));
      }
    }
    if (rng_.Bernoulli(0.2)) {
      // Switch and rack mostly for gangs; a single replica sometimes too.
      bool domains = j.replicas > 1 || rng_.Bernoulli(0.2);
      j.topology = Pick<Topology>({Topology::kIsland, Topology::kNuma, Topology::kSwitch, Topology::kRack});
      if (!domains && j.topology >= Topology::kSwitch) j.topology = Topology::kNuma;
    }
    if (rng_.Bernoulli(0.6)) j.runtime_estimate_ms = U(1, 240) * 60'000;
    j.preemptible = rng_.Bernoulli(0.5);
    return j;
  }

  // ---- events ----

  std::vector<std::string> JobsIn(Phase phase) const {
    std::vector<std::string> out;
    for (const auto& [id, j] : jobs_) {
      if (j.phase == phase) out.push_back(id);
    }
    return out;
  }

  Status RandomEvent() {
    int64_t r = U(0, 99);
    size_t pending = JobsIn(Phase::kPending).size();
    if (r < 35 && pending < 40) return Enqueue();
    if (r < 60) return SchedulePass(U(0, 3) == 0 ? 0 : U(1, 600) * 1000);
    if (r < 75) return FinishRandom(Phase::kBound);
    if (r < 77) return FinishRandom(Phase::kPending);
    if (r < 79) return LoseRandom();
    if (r < 84) return ToggleDrain();
    if (r < 89) return ToggleHealth();
    if (r < 93) return ProbeNeverFits();
    if (r < 95) return ExpectErrors();
    return SchedulePass(U(1, 3600) * 1000);
  }

  Status Enqueue() {
    JobRequest j = RandomJob();
    Log(fmt::format("enqueue {} {}x{} milli={} mem={} tenant={} prio={} topo={} model='{}' vendor='{}' est={}m{}", j.id,
                    j.replicas, j.gpus, j.gpu_milli, FormatBytes(j.gpu_memory_bytes), j.tenant, j.priority,
                    TopologyName(j.topology), j.gpu_model, j.gpu_vendor, j.runtime_estimate_ms / 60'000,
                    j.preemptible ? " preemptible" : ""));
    Status s = a_.Enqueue(j, now_);
    DROVER_RETURN_IF_ERROR(Twin(s, b_.Enqueue(j, now_), "Enqueue"));
    CHECK_OR_FAIL(s.ok(), "valid job '{}' refused: {}", j.id, s.ToString());
    jobs_[j.id] = ShadowJob{j, next_seq_++, Phase::kPending, {}, -1};
    return Status::Ok();
  }

  Status FinishRandom(Phase phase) {
    std::vector<std::string> ids = JobsIn(phase);
    if (phase == Phase::kBound) {
      for (const std::string& id : JobsIn(Phase::kPreempting)) ids.push_back(id);  // ended before it was stopped
    }
    if (ids.empty()) return Status::Ok();
    std::string id = Pick(ids);
    Log("finish " + id);
    a_.Remove(id, now_);
    b_.Remove(id, now_);
    Release(id);
    jobs_.erase(id);
    return Status::Ok();
  }

  // A bound job stops without finishing (its node was lost).
  Status LoseRandom() {
    std::vector<std::string> ids = JobsIn(Phase::kBound);
    if (ids.empty()) return Status::Ok();
    return RequeueJob(Pick(ids), "lost");
  }

  Status RequeueJob(const std::string& id, std::string_view why) {
    Log(fmt::format("requeue {} ({})", id, why));
    Status s = a_.Requeue(id, now_);
    DROVER_RETURN_IF_ERROR(Twin(s, b_.Requeue(id, now_), "Requeue"));
    CHECK_OR_FAIL(s.ok(), "requeue of bound job '{}' failed: {}", id, s.ToString());
    Release(id);
    ShadowJob& j = jobs_[id];
    j.phase = Phase::kPending;
    j.stop_at_step = -1;
    return Status::Ok();
  }

  // Victims stop a few steps after their preemption, like an agent would.
  Status StopDueVictims() {
    for (const std::string& id : JobsIn(Phase::kPreempting)) {
      if (jobs_[id].stop_at_step <= step_) DROVER_RETURN_IF_ERROR(RequeueJob(id, "preempted, stopped"));
    }
    return Status::Ok();
  }

  Status UpsertBoth(const NodeInfo& n) {
    Status s = a_.UpsertNode(n);
    DROVER_RETURN_IF_ERROR(Twin(s, b_.UpsertNode(n), "UpsertNode"));
    CHECK_OR_FAIL(s.ok(), "re-sent node '{}' refused: {}", n.name, s.ToString());
    return Status::Ok();
  }

  Status ToggleDrain() {
    NodeInfo& n = nodes_[static_cast<size_t>(U(0, static_cast<int64_t>(nodes_.size()) - 1))];
    n.schedulable = !n.schedulable;
    Log(fmt::format("{} {}", n.schedulable ? "undrain" : "drain", n.name));
    a_.SetSchedulable(n.name, n.schedulable);
    b_.SetSchedulable(n.name, n.schedulable);
    return Status::Ok();
  }

  Status ToggleHealth() {
    NodeInfo& n = nodes_[static_cast<size_t>(U(0, static_cast<int64_t>(nodes_.size()) - 1))];
    GpuInfo& g = n.gpus[static_cast<size_t>(U(0, static_cast<int64_t>(n.gpus.size()) - 1))];
    g.healthy = !g.healthy;
    Log(fmt::format("GPU {}/{} {}", n.name, g.index, g.healthy ? "healthy" : "unhealthy"));
    return UpsertBoth(n);
  }

  Status ProbeNeverFits() {
    JobRequest j = RandomJob();
    if (!j.fractional() && rng_.Bernoulli(0.3)) j.gpus = static_cast<int>(U(1, 64));
    std::optional<std::string> a = a_.NeverFits(j);
    std::optional<std::string> b = b_.NeverFits(j);
    CHECK_OR_FAIL(a == b, "twin schedulers disagree on NeverFits({})", j.id);
    CHECK_OR_FAIL(!a || !a->empty(), "NeverFits({}) gave an empty reason", j.id);
    // A job larger than every node can never fit.
    bool some_node_has_enough = std::any_of(nodes_.begin(), nodes_.end(), [&](const NodeInfo& n) {
      return static_cast<int>(n.gpus.size()) >= j.gpus;
    });
    CHECK_OR_FAIL(some_node_has_enough || a.has_value(), "NeverFits says a {}-GPU replica fits, no node has that many",
                  j.gpus);
    return Status::Ok();
  }

  // Calls that must fail, and how.
  Status ExpectErrors() {
    std::vector<std::string> known;
    for (const auto& [id, j] : jobs_) known.push_back(id);
    if (known.empty()) return Status::Ok();
    const ShadowJob& j = jobs_[Pick(known)];
    Status dup = a_.Enqueue(j.req, now_);
    DROVER_RETURN_IF_ERROR(Twin(dup, b_.Enqueue(j.req, now_), "Enqueue(duplicate)"));
    CHECK_OR_FAIL(dup.code() == Code::kAlreadyExists, "Enqueue of known job '{}' gave {}", j.req.id, dup.ToString());
    if (j.phase == Phase::kPending) {
      Status s = a_.Requeue(j.req.id, now_);
      DROVER_RETURN_IF_ERROR(Twin(s, b_.Requeue(j.req.id, now_), "Requeue(pending)"));
      CHECK_OR_FAIL(s.code() == Code::kNotFound, "Requeue of pending job '{}' gave {}", j.req.id, s.ToString());
    }
    Status unknown = a_.Requeue("no-such-job", now_);
    CHECK_OR_FAIL(unknown.code() == Code::kNotFound, "Requeue of an unknown job gave {}", unknown.ToString());
    DROVER_RETURN_IF_ERROR(Twin(unknown, b_.Requeue("no-such-job", now_), "Requeue(unknown)"));
    return Status::Ok();
  }

  // ---- a pass, and what the decisions must satisfy ----

  Status SchedulePass(int64_t advance_ms) {
    now_ += advance_ms;
    std::vector<std::string> pending_before = JobsIn(Phase::kPending);

    Decisions d = a_.Schedule(now_);
    Decisions twin = b_.Schedule(now_);
    std::string summary;
    for (const Binding& b : d.bindings) {
      summary += " bind " + b.job_id;
      for (const Placement& p : b.replicas) summary += " " + Describe(p);
      summary += ";";
    }
    for (const Preemption& p : d.preemptions) summary += fmt::format(" preempt {} for {} ({});", p.job_id, p.for_job, p.reason);
    Log("schedule" + summary);
    CHECK_OR_FAIL(SameDecisions(d, twin), "twin scheduler decided differently on the same events");

    std::set<std::string> bound_now;
    for (const Binding& b : d.bindings) {
      DROVER_RETURN_IF_ERROR(ApplyBinding(b));
      bound_now.insert(b.job_id);
    }
    // Who borrows once this pass's bindings hold, before its preemptions.
    std::map<std::string, int64_t> borrowing;
    for (const std::string& t : tenant_names_) borrowing[t] = Borrowed(t);
    for (const Preemption& p : d.preemptions) {
      CHECK_OR_FAIL(!bound_now.contains(p.job_id), "'{}' bound and preempted (for '{}') in the same pass", p.job_id,
                    p.for_job);
      DROVER_RETURN_IF_ERROR(ApplyPreemption(p, borrowing));
    }
    DROVER_RETURN_IF_ERROR(CheckStrictOrder(pending_before, d));
    for (const Binding& b : d.bindings) jobs_[b.job_id].nominee = false;
    for (const std::string& id : JobsIn(Phase::kPending)) {
      std::string why = a_.PendingReason(id);
      CHECK_OR_FAIL(!why.empty(), "pending job '{}' has no reason after a pass", id);
      CHECK_OR_FAIL(why == b_.PendingReason(id), "twin schedulers give '{}' different reasons", id);
    }
    return Status::Ok();
  }

  Status ApplyBinding(const Binding& b) {
    auto it = jobs_.find(b.job_id);
    CHECK_OR_FAIL(it != jobs_.end(), "bound unknown job '{}'", b.job_id);
    ShadowJob& job = it->second;
    const JobRequest& r = job.req;
    CHECK_OR_FAIL(job.phase == Phase::kPending, "job '{}' bound while not pending (bound twice?)", b.job_id);
    CHECK_OR_FAIL(static_cast<int>(b.replicas.size()) == r.replicas, "job '{}' wants {} replicas, got {}", r.id,
                  r.replicas, b.replicas.size());
    std::string domain;
    for (size_t rep = 0; rep < b.replicas.size(); ++rep) {
      const Placement& p = b.replicas[rep];
      auto n_it = std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& n) { return n.name == p.node; });
      CHECK_OR_FAIL(n_it != nodes_.end(), "job '{}' placed on unknown node '{}'", r.id, p.node);
      const NodeInfo& n = *n_it;
      CHECK_OR_FAIL(n.schedulable, "job '{}' placed on drained node '{}'", r.id, n.name);
      int want = r.fractional() ? 1 : r.gpus;
      CHECK_OR_FAIL(static_cast<int>(p.gpu_indices.size()) == want, "job '{}' replica {} has {} GPUs, wants {}", r.id, rep,
                    p.gpu_indices.size(), want);
      CHECK_OR_FAIL(std::is_sorted(p.gpu_indices.begin(), p.gpu_indices.end()) &&
                        std::adjacent_find(p.gpu_indices.begin(), p.gpu_indices.end()) == p.gpu_indices.end(),
                    "job '{}' GPU indices not ascending and distinct", r.id);
      if (r.fractional()) {
        CHECK_OR_FAIL(p.gpu_milli == r.gpu_milli && p.gpu_memory_bytes == r.gpu_memory_bytes,
                      "job '{}' share {}m/{}B placed as {}m/{}B", r.id, r.gpu_milli, r.gpu_memory_bytes, p.gpu_milli,
                      p.gpu_memory_bytes);
      } else {
        CHECK_OR_FAIL(p.gpu_milli == kWholeGpu && p.gpu_memory_bytes == 0, "whole-GPU job '{}' placed as share {}m/{}B",
                      r.id, p.gpu_milli, p.gpu_memory_bytes);
      }
      for (const auto& [k, v] : r.node_selector) {
        auto l = n.labels.find(k);
        CHECK_OR_FAIL(l != n.labels.end() && l->second == v, "job '{}' wants {}={}, node '{}' does not have it", r.id, k,
                      v, n.name);
      }
      for (int i : p.gpu_indices) {
        CHECK_OR_FAIL(i >= 0 && i < static_cast<int>(n.gpus.size()), "job '{}' holds GPU {} of '{}' (has {})", r.id, i,
                      n.name, n.gpus.size());
        const GpuInfo& g = n.gpus[static_cast<size_t>(i)];
        CHECK_OR_FAIL(g.healthy, "job '{}' placed on unhealthy GPU {}/{}", r.id, n.name, i);
        CHECK_OR_FAIL(r.gpu_model.empty() || g.model == r.gpu_model, "job '{}' wants model '{}', got '{}' on {}/{}", r.id,
                      r.gpu_model, g.model, n.name, i);
        CHECK_OR_FAIL(r.gpu_vendor.empty() || g.vendor == r.gpu_vendor, "job '{}' wants vendor '{}', got '{}'", r.id,
                      r.gpu_vendor, g.vendor);
        GpuUse& u = use_[n.name][static_cast<size_t>(i)];
        CHECK_OR_FAIL(u.whole.empty(), "GPU {}/{} given to '{}' is held whole by '{}'", n.name, i, r.id, u.whole);
        if (r.fractional()) {
          CHECK_OR_FAIL(u.shared_milli + r.gpu_milli <= kWholeGpu, "GPU {}/{} over-shared: {}m + {}m for '{}'", n.name,
                        i, u.shared_milli, r.gpu_milli, r.id);
          CHECK_OR_FAIL(u.shared_mem + r.gpu_memory_bytes <= g.memory_bytes,
                        "GPU {}/{} memory over-committed: {} + {} of {} for '{}'", n.name, i, u.shared_mem,
                        r.gpu_memory_bytes, g.memory_bytes, r.id);
          u.shared_milli += r.gpu_milli;
          u.shared_mem += r.gpu_memory_bytes;
          ++u.sharers;
        } else {
          CHECK_OR_FAIL(g.memory_bytes >= r.gpu_memory_bytes, "job '{}' wants {}B GPUs, got {}B on {}/{}", r.id,
                        r.gpu_memory_bytes, g.memory_bytes, n.name, i);
          CHECK_OR_FAIL(u.sharers == 0, "GPU {}/{} given whole to '{}' while shared", n.name, i, r.id);
          u.whole = r.id;
        }
      }
      for (int x : p.gpu_indices) {
        for (int y : p.gpu_indices) {
          if (x == y) continue;
          const GpuInfo& gx = n.gpus[static_cast<size_t>(x)];
          const GpuInfo& gy = n.gpus[static_cast<size_t>(y)];
          CHECK_OR_FAIL(r.topology != Topology::kIsland || LinkBetween(n, x, y) == Link::kFabric,
                        "island job '{}' got GPUs {} and {} of '{}', not joined by fabric", r.id, x, y, n.name);
          CHECK_OR_FAIL(r.topology != Topology::kNuma || gx.numa_node == gy.numa_node,
                        "numa job '{}' got GPUs {} and {} of '{}' on different NUMA nodes", r.id, x, y, n.name);
        }
      }
      // One replica is trivially "under one switch", labelled or not.
      if (r.replicas > 1 && (r.topology == Topology::kSwitch || r.topology == Topology::kRack)) {
        const char* label = r.topology == Topology::kSwitch ? "switch" : "rack";
        auto l = n.labels.find(label);
        CHECK_OR_FAIL(l != n.labels.end(), "{} job '{}' placed on '{}', which has no '{}' label", label, r.id, n.name, label);
        if (rep == 0) domain = l->second;
        CHECK_OR_FAIL(l->second == domain, "{} job '{}' spans {} '{}' and '{}'", label, r.id, label, domain, l->second);
      }
      Charge(r, n, p, +1);
    }
    job.phase = Phase::kBound;
    job.placements = b.replicas;
    job.bound_ms = now_;
    return Status::Ok();
  }

  Status ApplyPreemption(const Preemption& p, const std::map<std::string, int64_t>& borrowing) {
    CHECK_OR_FAIL(config_.preemption, "preemption of '{}' although preemption is off", p.job_id);
    auto v = jobs_.find(p.job_id);
    auto f = jobs_.find(p.for_job);
    CHECK_OR_FAIL(v != jobs_.end() && f != jobs_.end(), "preemption names unknown jobs '{}' / '{}'", p.job_id, p.for_job);
    const JobRequest& victim = v->second.req;
    const JobRequest& for_job = f->second.req;
    CHECK_OR_FAIL(v->second.phase == Phase::kBound, "victim '{}' is not bound and running (preempted twice?)", p.job_id);
    CHECK_OR_FAIL(victim.preemptible, "non-preemptible job '{}' preempted for '{}'", p.job_id, p.for_job);
    CHECK_OR_FAIL(f->second.phase == Phase::kPending, "preemption for '{}', which is not pending", p.for_job);
    bool by_priority = victim.priority < for_job.priority;
    bool reclaim = victim.tenant != for_job.tenant && borrowing.at(victim.tenant) > 0;
    CHECK_OR_FAIL(by_priority || reclaim,
                  "'{}' (priority {}, tenant {}) preempted for '{}' (priority {}, tenant {}) which is neither higher "
                  "priority nor reclaiming from a borrower: {}",
                  p.job_id, victim.priority, victim.tenant, p.for_job, for_job.priority, for_job.tenant, p.reason);
    v->second.phase = Phase::kPreempting;
    if (!by_priority) {
      // Reclaim: the claimant is below its guarantee of a model the victim
      // frees, and the victim's tenant borrows that model.
      const ShadowTenant& claimant = usage_[for_job.tenant];
      std::map<std::string, int> claim = Guarantees(for_job.tenant);
      bool below = false;
      for (const auto& [model, milli] : MilliByModel(v->second)) {
        auto used = claimant.by_model.find(model);
        below |= (used == claimant.by_model.end() ? 0 : used->second) < int64_t{claim[model]} * kWholeGpu;
      }
      CHECK_OR_FAIL(below,
                    "'{}' preempted so that tenant '{}' reclaims a guarantee, but '{}' is not below its guarantee of "
                    "any GPU model '{}' holds: {}",
                    p.job_id, for_job.tenant, for_job.tenant, p.job_id, p.reason);
      // (As in Kueue, a victim may straddle the line: its tenant is above
      // the guarantee before it goes and may end a little below after.)
      for (const auto& [model, milli] : MilliByModel(v->second)) {
        int64_t before = usage_[victim.tenant].by_model[model] - PreemptingMilli(victim.tenant, model) + milli;
        int64_t guaranteed = int64_t{Guarantees(victim.tenant)[model]} * kWholeGpu;
        CHECK_OR_FAIL(before > guaranteed,
                      "reclaim for '{}' preempts '{}' of tenant '{}', which holds {}m of '{}' (not counting jobs "
                      "already stopping), within its guarantee of {} GPUs: {}",
                      p.for_job, p.job_id, victim.tenant, before, model, guaranteed / kWholeGpu, p.reason);
      }
    }
    CHECK_OR_FAIL(p.grace_ms == config_.preemption_grace_ms, "grace {} ms, configured {}", p.grace_ms,
                  config_.preemption_grace_ms);
    CHECK_OR_FAIL(!p.reason.empty(), "preemption of '{}' has no reason", p.job_id);
    v->second.stop_at_step = step_ + static_cast<int>(U(1, 6));
    jobs_[p.for_job].nominee = true;
    return Status::Ok();
  }

  // Strict order (no backfill) under the two policies whose order this test
  // can compute: no job starts ahead of one before it that still waits.
  Status CheckStrictOrder(std::vector<std::string> before, const Decisions& d) {
    if (config_.backfill || (config_.queue != QueuePolicy::kFifo && config_.queue != QueuePolicy::kSjf)) {
      return Status::Ok();
    }
    auto key = [&](const std::string& id) {
      const ShadowJob& j = jobs_[id];
      int64_t est = config_.queue == QueuePolicy::kSjf && j.req.runtime_estimate_ms > 0 ? j.req.runtime_estimate_ms : kNever;
      return std::pair{config_.queue == QueuePolicy::kSjf ? est : 0, j.seq};
    };
    std::sort(before.begin(), before.end(), [&](const std::string& x, const std::string& y) { return key(x) < key(y); });
    auto first_waiting = std::find_if(before.begin(), before.end(), [&](const std::string& id) {
      return jobs_[id].phase == Phase::kPending;
    });
    for (const Binding& b : d.bindings) {
      if (jobs_[b.job_id].nominee) continue;  // its GPUs were promised to it when it preempted
      auto pos = std::find(before.begin(), before.end(), b.job_id);
      CHECK_OR_FAIL(pos < first_waiting, "strict {}: '{}' started although '{}', ahead of it, waits ({})",
                    QueuePolicyName(config_.queue), b.job_id, *first_waiting, a_.PendingReason(*first_waiting));
    }
    return Status::Ok();
  }

  // ---- shadow books ----

  void Charge(const JobRequest& r, const NodeInfo& n, const Placement& p, int sign) {
    ShadowTenant& t = usage_[r.tenant];
    for (int i : p.gpu_indices) {
      const GpuInfo& g = n.gpus[static_cast<size_t>(i)];
      int64_t milli = r.fractional() ? r.gpu_milli : kWholeGpu;
      t.milli += sign * milli;
      t.memory += sign * (r.fractional() ? r.gpu_memory_bytes : g.memory_bytes);
      t.by_model[g.model] += sign * milli;
    }
  }

  void Release(const std::string& id) {
    ShadowJob& j = jobs_[id];
    for (const Placement& p : j.placements) {
      const NodeInfo& n = *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
      for (int i : p.gpu_indices) {
        GpuUse& u = use_[p.node][static_cast<size_t>(i)];
        if (j.req.fractional()) {
          u.shared_milli -= j.req.gpu_milli;
          u.shared_mem -= j.req.gpu_memory_bytes;
          --u.sharers;
        } else {
          u.whole.clear();
        }
      }
      Charge(j.req, n, p, -1);
    }
    j.placements.clear();
  }

  std::map<std::string, int> Guarantees(const std::string& tenant) const {
    auto t = tenants_.find(tenant);
    return t == tenants_.end() ? std::map<std::string, int>{} : t->second.guaranteed_gpus;
  }

  std::map<std::string, int64_t> MilliByModel(const ShadowJob& j) const {
    std::map<std::string, int64_t> out;
    for (const Placement& p : j.placements) {
      const NodeInfo& n = *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
      for (int i : p.gpu_indices) out[n.gpus[static_cast<size_t>(i)].model] += j.req.fractional() ? j.req.gpu_milli : kWholeGpu;
    }
    return out;
  }

  // Milli-GPUs of `model` that the tenant's preempted, still stopping jobs hold.
  int64_t PreemptingMilli(const std::string& tenant, const std::string& model) const {
    int64_t total = 0;
    for (const auto& [id, j] : jobs_) {
      if (j.phase != Phase::kPreempting || j.req.tenant != tenant) continue;
      for (const Placement& p : j.placements) {
        const NodeInfo& n = *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
        for (int i : p.gpu_indices) {
          if (n.gpus[static_cast<size_t>(i)].model == model) total += j.req.fractional() ? j.req.gpu_milli : kWholeGpu;
        }
      }
    }
    return total;
  }

  int64_t Borrowed(const std::string& tenant) {
    const ShadowTenant& u = usage_[tenant];
    auto t = tenants_.find(tenant);
    int64_t beyond = 0;
    for (const auto& [model, milli] : u.by_model) {
      int64_t guaranteed = 0;
      if (t != tenants_.end()) {
        auto g = t->second.guaranteed_gpus.find(model);
        if (g != t->second.guaranteed_gpus.end()) guaranteed = int64_t{g->second} * kWholeGpu;
      }
      beyond += std::max<int64_t>(0, milli - guaranteed);
    }
    return beyond;
  }

  // Everything the scheduler reports must match the books, after every step.
  Status CheckAll() {
    Status inv = a_.CheckInvariants();
    CHECK_OR_FAIL(inv.ok(), "CheckInvariants: {}", inv.ToString());
    size_t pending = 0, bound = 0;
    for (const auto& [id, j] : jobs_) {
      bool is_pending = j.phase == Phase::kPending;
      pending += is_pending ? 1 : 0;
      bound += is_pending ? 0 : 1;
      CHECK_OR_FAIL(a_.IsPending(id) == is_pending && a_.IsBound(id) == !is_pending, "job '{}' state differs", id);
      CHECK_OR_FAIL(a_.IsPreempting(id) == (j.phase == Phase::kPreempting), "job '{}' preempting flag differs", id);
      if (!is_pending) CHECK_OR_FAIL(a_.PendingReason(id).empty(), "bound job '{}' has a pending reason", id);
    }
    CHECK_OR_FAIL(a_.pending() == pending && a_.bound() == bound, "scheduler counts {} pending / {} bound, books {} / {}",
                  a_.pending(), a_.bound(), pending, bound);
    for (const NodeInfo& n : nodes_) {
      uint64_t held = 0;
      const std::vector<GpuUse>& use = use_[n.name];
      for (size_t i = 0; i < use.size(); ++i) {
        if (!use[i].whole.empty() || use[i].sharers > 0) held |= uint64_t{1} << i;
      }
      CHECK_OR_FAIL(a_.HeldMask(n.name) == held, "node '{}' held mask {:#x}, books {:#x}", n.name, a_.HeldMask(n.name), held);
    }
    for (const std::string& name : tenant_names_) {
      Scheduler::TenantUsage u = a_.Usage(name);
      const ShadowTenant& t = usage_[name];
      int64_t borrowed = Borrowed(name);
      CHECK_OR_FAIL(u.milli_gpus == t.milli && u.memory_bytes == t.memory && u.borrowed_milli == borrowed,
                    "tenant '{}' usage {}m/{}B/borrowed {}m, books {}m/{}B/borrowed {}m", name, u.milli_gpus,
                    u.memory_bytes, u.borrowed_milli, t.milli, t.memory, borrowed);
      auto ti = tenants_.find(name);
      if (ti != tenants_.end() && ti->second.borrow_limit >= 0) {
        CHECK_OR_FAIL(borrowed <= int64_t{ti->second.borrow_limit} * kWholeGpu, "tenant '{}' borrows {}m, limit {} GPUs",
                      name, borrowed, ti->second.borrow_limit);
      }
    }
    return Status::Ok();
  }

  // Recovery: a fresh scheduler given the nodes and tenants, the bound jobs
  // through Restore (and MarkPreempting) and the pending ones through Enqueue
  // must hold and count exactly what the running one does.
  Status CheckRecovery() {
    Scheduler c(config_);
    for (const NodeInfo& n : nodes_) {
      Status s = c.UpsertNode(n);
      CHECK_OR_FAIL(s.ok(), "recovery: UpsertNode('{}'): {}", n.name, s.ToString());
    }
    for (const auto& [name, t] : tenants_) {
      Status s = c.SetTenant(t);
      CHECK_OR_FAIL(s.ok(), "recovery: SetTenant('{}'): {}", name, s.ToString());
    }
    std::vector<const ShadowJob*> order;
    for (const auto& [id, j] : jobs_) order.push_back(&j);
    std::sort(order.begin(), order.end(), [](const ShadowJob* x, const ShadowJob* y) { return x->seq < y->seq; });
    for (const ShadowJob* j : order) {
      if (j->phase == Phase::kPending) {
        Status s = c.Enqueue(j->req, now_);
        CHECK_OR_FAIL(s.ok(), "recovery: Enqueue('{}'): {}", j->req.id, s.ToString());
        continue;
      }
      Status s = c.Restore(j->req, Binding{j->req.id, j->placements}, j->bound_ms);
      CHECK_OR_FAIL(s.ok(), "recovery: Restore('{}') of a binding the scheduler made: {}", j->req.id, s.ToString());
      if (j->phase == Phase::kPreempting) {
        s = c.MarkPreempting(j->req.id);
        CHECK_OR_FAIL(s.ok(), "recovery: MarkPreempting('{}'): {}", j->req.id, s.ToString());
      }
    }
    Status inv = c.CheckInvariants();
    CHECK_OR_FAIL(inv.ok(), "recovery: CheckInvariants: {}", inv.ToString());
    CHECK_OR_FAIL(c.pending() == a_.pending() && c.bound() == a_.bound(), "recovery: counts differ");
    for (const NodeInfo& n : nodes_) {
      CHECK_OR_FAIL(c.HeldMask(n.name) == a_.HeldMask(n.name), "recovery: node '{}' held mask {:#x}, live {:#x}", n.name,
                    c.HeldMask(n.name), a_.HeldMask(n.name));
    }
    for (const std::string& name : tenant_names_) {
      Scheduler::TenantUsage x = c.Usage(name);
      Scheduler::TenantUsage y = a_.Usage(name);
      CHECK_OR_FAIL(x.milli_gpus == y.milli_gpus && x.memory_bytes == y.memory_bytes && x.borrowed_milli == y.borrowed_milli,
                    "recovery: tenant '{}' usage differs from the live scheduler", name);
    }
    for (const auto& [id, j] : jobs_) {
      CHECK_OR_FAIL(c.IsPreempting(id) == a_.IsPreempting(id), "recovery: '{}' preempting flag differs", id);
    }
    return Status::Ok();
  }

  // ---- the end: an idle, healthy cluster runs every job that can run ----

  bool QuotaBlocked(const JobRequest& r) const {
    auto t = tenants_.find(r.tenant);
    return t != tenants_.end() && t->second.borrow_limit >= 0 && r.milli() > int64_t{t->second.borrow_limit} * kWholeGpu;
  }

  Status Quiesce() {
    Log("quiesce: heal and undrain everything");
    for (NodeInfo& n : nodes_) {
      for (GpuInfo& g : n.gpus) g.healthy = true;
      n.schedulable = true;
      DROVER_RETURN_IF_ERROR(UpsertBoth(n));
    }
    for (int round = 0; round < 200; ++round, ++step_) {
      for (const std::string& id : JobsIn(Phase::kPreempting)) DROVER_RETURN_IF_ERROR(RequeueJob(id, "quiesce"));
      for (const std::string& id : JobsIn(Phase::kBound)) {
        a_.Remove(id, now_);
        b_.Remove(id, now_);
        Release(id);
        jobs_.erase(id);
      }
      // What can never run leaves the queue, as the server would reject it.
      for (const std::string& id : JobsIn(Phase::kPending)) {
        if (a_.NeverFits(jobs_[id].req) || QuotaBlocked(jobs_[id].req)) {
          a_.Remove(id, now_);
          b_.Remove(id, now_);
          jobs_.erase(id);
        }
      }
      DROVER_RETURN_IF_ERROR(CheckAll());
      if (JobsIn(Phase::kPending).empty()) return Status::Ok();
      DROVER_RETURN_IF_ERROR(SchedulePass(3'600'000));
      DROVER_RETURN_IF_ERROR(CheckAll());
      if (JobsIn(Phase::kBound).empty() && JobsIn(Phase::kPreempting).empty()) {
        std::string why;
        for (const std::string& id : JobsIn(Phase::kPending)) why += fmt::format("\n  {}: {}", id, a_.PendingReason(id));
        return Internal("an idle, healthy cluster starts none of these jobs, though NeverFits says each fits:" + why);
      }
    }
    return Internal("the queue did not drain in 200 passes on an idle cluster");
  }

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

std::vector<Policy> AllPolicies() {
  std::vector<Policy> out;
  for (QueuePolicy q : {QueuePolicy::kFifo, QueuePolicy::kPriority, QueuePolicy::kFairShare, QueuePolicy::kLas,
                        QueuePolicy::kSjf}) {
    for (PlacementPolicy p : {PlacementPolicy::kBinpack, PlacementPolicy::kSpread}) {
      for (bool backfill : {true, false}) {
        for (bool preemption : {true, false}) out.push_back({q, p, backfill, preemption});
      }
    }
  }
  return out;
}

class SchedulerPropertyTest : public testing::TestWithParam<Policy> {};

TEST_P(SchedulerPropertyTest, RandomEventsKeepEveryProperty) {
  std::vector<uint64_t> seeds = {1, 2, 3};
  if (int only = EnvInt("DROVER_PROPERTY_SEED", 0); only > 0) seeds = {static_cast<uint64_t>(only)};
  int steps = EnvInt("DROVER_PROPERTY_STEPS", 1500);
  for (uint64_t seed : seeds) {
    World w(seed, GetParam());
    Status s = w.Run(steps);
    if (!s.ok()) {
      ADD_FAILURE() << "seed " << seed << ", policy " << PolicyName(GetParam()) << ", step " << w.step() << ": "
                    << s.message() << "\ncluster (as it is now):\n"
                    << w.Cluster() << "last events:\n"
                    << w.Trace() << "replay: DROVER_PROPERTY_SEED=" << seed
                    << " sched_property_test --gtest_filter='*" << PolicyName(GetParam()) << "'";
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, SchedulerPropertyTest, testing::ValuesIn(AllPolicies()),
                         [](const testing::TestParamInfo<Policy>& param) { return PolicyName(param.param); });

}  // namespace
}  // namespace drover::sched
