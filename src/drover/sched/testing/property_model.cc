// See property_model.h: the helpers, and the World's random setup and
// events. The checks of a pass and the shadow books are property_checks.cc.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"
#include "drover/sched/testing/property_model.h"

namespace drover::sched::testing {

std::string PolicyName(const Policy& p) {
  std::string q(QueuePolicyName(p.queue));
  std::replace(q.begin(), q.end(), '-', '_');
  std::string placement(PlacementPolicyName(p.placement));
  std::replace(placement.begin(), placement.end(), '-', '_');
  return fmt::format("{}_{}_{}_{}", q, placement, p.backfill ? "backfill" : "strict",
                     p.preemption ? "preempt" : "nopreempt");
}

std::vector<Policy> AllPolicies() {
  std::vector<Policy> out;
  for (QueuePolicy q :
       {QueuePolicy::kFifo, QueuePolicy::kPriority, QueuePolicy::kFairShare, QueuePolicy::kLas, QueuePolicy::kSjf}) {
    for (PlacementPolicy p : {PlacementPolicy::kFrag, PlacementPolicy::kBinpack, PlacementPolicy::kSpread}) {
      for (bool backfill : {true, false}) {
        for (bool preemption : {true, false}) out.push_back({q, p, backfill, preemption});
      }
    }
  }
  // The reference baselines under one queue policy, with everything on.
  for (PlacementPolicy p : {PlacementPolicy::kBestFit, PlacementPolicy::kRandom}) {
    out.push_back({QueuePolicy::kPriority, p, true, true});
  }
  return out;
}

std::string Describe(const Placement& p) {
  std::string idx;
  for (int i : p.gpu_indices) idx += fmt::format("{}{}", idx.empty() ? "" : ",", i);
  if (p.gpu_milli < kWholeGpu)
    return fmt::format("{}[{}]@{}m/{}", p.node, idx, p.gpu_milli, FormatBytes(p.gpu_memory_bytes));
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
    if (x.job_id != y.job_id || x.for_job != y.for_job || x.reason != y.reason || x.grace_ms != y.grace_ms)
      return false;
  }
  return true;
}

Link LinkBetween(const NodeInfo& n, int i, int j) {
  if (n.links.empty()) {
    return n.gpus[static_cast<size_t>(i)].numa_node == n.gpus[static_cast<size_t>(j)].numa_node ? Link::kSameNuma
                                                                                                : Link::kCrossSocket;
  }
  return n.links[static_cast<size_t>(i) * n.gpus.size() + static_cast<size_t>(j)];
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

// ---------------------------------------------------------------- World --

World::World(uint64_t seed, const Policy& policy) : rng_(seed) {
  config_.queue = policy.queue;
  config_.placement = policy.placement;
  config_.backfill = policy.backfill;
  config_.preemption = policy.preemption;
  config_.aging_ms = 5 * 60'000;
  config_.preemption_grace_ms = 30'000;
  config_.verify_memos = true;
  a_ = Scheduler(config_);
  b_ = Scheduler(config_);
}

Status World::Run(int steps) {
  DROVER_RETURN_IF_ERROR(Setup());
  for (step_ = 0; step_ < steps; ++step_) {
    DROVER_RETURN_IF_ERROR(StopDueVictims());
    DROVER_RETURN_IF_ERROR(RandomEvent());
    DROVER_RETURN_IF_ERROR(CheckAll());
    if (step_ % 50 == 49) DROVER_RETURN_IF_ERROR(CheckRecovery());
  }
  return Quiesce();
}

std::string World::Trace() const {
  std::string out;
  for (const std::string& t : trace_) out += "  " + t + "\n";
  return out;
}

std::string World::Cluster() const {
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

// ---- setup ----

NodeInfo World::RandomNode(int i) {
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
        Link l = n.gpus[static_cast<size_t>(x)].numa_node == n.gpus[static_cast<size_t>(y)].numa_node
                     ? Link::kSameNuma
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
  if (rng_.Bernoulli(0.5)) {  // host resources tracked
    n.cpu_milli = U(4, 64) * 1000;
    n.memory_bytes = U(16, 512) * kGiB;
  }
  n.schedulable = !rng_.Bernoulli(0.1);
  return n;
}

Status World::Setup() {
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

JobRequest World::RandomJob() {
  JobRequest j;
  j.id = fmt::format("j{}", next_job_++);
  j.tenant = Pick(tenant_names_);
  j.priority = static_cast<int>(Pick<int64_t>({0, 0, 10, 10, 100, 1000, U(0, 5)}));
  int64_t shape = U(0, 99);
  if (shape < 5) {
    j.gpus = 0;  // CPU-only
    j.cpu_milli = U(1, 32) * 1000;
  } else if (shape < 15) {
    j.gpu_milli = static_cast<int>(Pick<int64_t>({100, 250, 500, 750}));
    j.gpu_memory_bytes = U(1, 48) * kGiB;
  } else if (shape < 30) {
    j.replicas = static_cast<int>(U(2, 4));
    j.gpus = static_cast<int>(Pick<int64_t>({1, 2, 4, 8}));
  } else {
    j.gpus = static_cast<int>(Pick<int64_t>({1, 1, 1, 2, 2, 4, 8, U(1, 16)}));
  }
  if (rng_.Bernoulli(0.4)) {
    j.cpu_milli = U(1, 16) * 1000;
    j.memory_bytes = U(1, 128) * kGiB;
  }
  if (rng_.Bernoulli(0.15)) {
    j.gpu_model = kClasses[U(0, kClassCount - 1)].model;
  } else if (rng_.Bernoulli(0.05)) {
    j.gpu_models = {kClasses[U(0, kClassCount - 1)].model, kClasses[U(0, kClassCount - 1)].model};
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

std::vector<std::string> World::JobsIn(Phase phase) const {
  std::vector<std::string> out;
  for (const auto& [id, j] : jobs_) {
    if (j.phase == phase) out.push_back(id);
  }
  return out;
}

Status World::RandomEvent() {
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

Status World::Enqueue() {
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

Status World::FinishRandom(Phase phase) {
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
Status World::LoseRandom() {
  std::vector<std::string> ids = JobsIn(Phase::kBound);
  if (ids.empty()) return Status::Ok();
  return RequeueJob(Pick(ids), "lost");
}

Status World::RequeueJob(const std::string& id, std::string_view why) {
  Log(fmt::format("requeue {} ({})", id, why));
  Status s = a_.Requeue(id, now_);
  DROVER_RETURN_IF_ERROR(Twin(s, b_.Requeue(id, now_), "Requeue"));
  CHECK_OR_FAIL(s.ok(), "requeue of bound job '{}' failed: {}", id, s.ToString());
  Release(id);
  ShadowJob& j = jobs_[id];
  j.attained += j.req.milli() * std::max<int64_t>(0, now_ - j.bound_ms) / kWholeGpu;
  j.phase = Phase::kPending;
  j.stop_at_step = -1;
  return Status::Ok();
}

// Victims stop a few steps after their preemption, like an agent would.
Status World::StopDueVictims() {
  for (const std::string& id : JobsIn(Phase::kPreempting)) {
    if (jobs_[id].stop_at_step <= step_) DROVER_RETURN_IF_ERROR(RequeueJob(id, "preempted, stopped"));
  }
  return Status::Ok();
}

Status World::UpsertBoth(const NodeInfo& n) {
  Status s = a_.UpsertNode(n);
  DROVER_RETURN_IF_ERROR(Twin(s, b_.UpsertNode(n), "UpsertNode"));
  CHECK_OR_FAIL(s.ok(), "re-sent node '{}' refused: {}", n.name, s.ToString());
  return Status::Ok();
}

Status World::ToggleDrain() {
  NodeInfo& n = nodes_[static_cast<size_t>(U(0, static_cast<int64_t>(nodes_.size()) - 1))];
  n.schedulable = !n.schedulable;
  Log(fmt::format("{} {}", n.schedulable ? "undrain" : "drain", n.name));
  a_.SetSchedulable(n.name, n.schedulable);
  b_.SetSchedulable(n.name, n.schedulable);
  return Status::Ok();
}

Status World::ToggleHealth() {
  NodeInfo& n = nodes_[static_cast<size_t>(U(0, static_cast<int64_t>(nodes_.size()) - 1))];
  GpuInfo& g = n.gpus[static_cast<size_t>(U(0, static_cast<int64_t>(n.gpus.size()) - 1))];
  g.healthy = !g.healthy;
  Log(fmt::format("GPU {}/{} {}", n.name, g.index, g.healthy ? "healthy" : "unhealthy"));
  return UpsertBoth(n);
}

Status World::ProbeNeverFits() {
  JobRequest j = RandomJob();
  if (!j.fractional() && rng_.Bernoulli(0.3)) j.gpus = static_cast<int>(U(1, 64));
  std::optional<std::string> a = a_.NeverFits(j);
  std::optional<std::string> b = b_.NeverFits(j);
  CHECK_OR_FAIL(a == b, "twin schedulers disagree on NeverFits({})", j.id);
  CHECK_OR_FAIL(!a || !a->empty(), "NeverFits({}) gave an empty reason", j.id);
  // A job larger than every node can never fit.
  bool some_node_has_enough = std::any_of(nodes_.begin(), nodes_.end(),
                                          [&](const NodeInfo& n) { return static_cast<int>(n.gpus.size()) >= j.gpus; });
  CHECK_OR_FAIL(some_node_has_enough || a.has_value(), "NeverFits says a {}-GPU replica fits, no node has that many",
                j.gpus);
  return Status::Ok();
}

// Calls that must fail, and how.
Status World::ExpectErrors() {
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

}  // namespace drover::sched::testing
