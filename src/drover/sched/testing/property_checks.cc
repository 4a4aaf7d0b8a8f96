// See property_model.h: a scheduling pass and what its decisions must
// satisfy, the shadow books and the checks against them, recovery, and the
// end of a run (an idle, healthy cluster runs every job that can run).

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"
#include "drover/sched/testing/property_model.h"

namespace drover::sched::testing {

// ---- a pass, and what the decisions must satisfy ----

Status World::SchedulePass(int64_t advance_ms) {
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
  for (const Preemption& p : d.preemptions)
    summary += fmt::format(" preempt {} for {} ({});", p.job_id, p.for_job, p.reason);
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

Status World::ApplyBinding(const Binding& b) {
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
    CHECK_OR_FAIL(static_cast<int>(p.gpu_indices.size()) == want, "job '{}' replica {} has {} GPUs, wants {}", r.id,
                  rep, p.gpu_indices.size(), want);
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
        CHECK_OR_FAIL(u.shared_milli + r.gpu_milli <= kWholeGpu, "GPU {}/{} over-shared: {}m + {}m for '{}'", n.name, i,
                      u.shared_milli, r.gpu_milli, r.id);
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
      CHECK_OR_FAIL(l != n.labels.end(), "{} job '{}' placed on '{}', which has no '{}' label", label, r.id, n.name,
                    label);
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

Status World::ApplyPreemption(const Preemption& p, const std::map<std::string, int64_t>& borrowing) {
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
  // LAS: the victim (its earlier runs and this one) has reached a higher
  // level than the job waiting, at no higher priority.
  const int64_t victim_attained =
      v->second.attained + victim.milli() * std::max<int64_t>(0, now_ - v->second.bound_ms) / kWholeGpu;
  bool by_las = config_.queue == QueuePolicy::kLas && victim.priority <= for_job.priority &&
                LasLevel(config_, victim_attained) > LasLevel(config_, f->second.attained);
  CHECK_OR_FAIL(by_priority || reclaim || by_las,
                "'{}' (priority {}, tenant {}, {} GPU-ms) preempted for '{}' (priority {}, tenant {}, {} GPU-ms) which "
                "is neither higher priority, nor reclaiming from a borrower, nor at a lower LAS level: {}",
                p.job_id, victim.priority, victim.tenant, victim_attained, p.for_job, for_job.priority, for_job.tenant,
                f->second.attained, p.reason);
  // Across tenants, LAS too takes only borrowed GPUs.
  CHECK_OR_FAIL(by_priority || reclaim || victim.tenant == for_job.tenant,
                "'{}' of tenant '{}' preempted for '{}' of tenant '{}' by LAS, but '{}' does not borrow: {}", p.job_id,
                victim.tenant, p.for_job, for_job.tenant, victim.tenant, p.reason);
  v->second.phase = Phase::kPreempting;
  if (by_las && !by_priority && victim.tenant != for_job.tenant) {
    // Across tenants LAS takes borrowed GPUs only: the victim's tenant keeps
    // its guarantee without this victim and every other one still stopping.
    for (const auto& [model, milli] : MilliByModel(v->second)) {
      int64_t after = usage_[victim.tenant].by_model[model] - PreemptingMilli(victim.tenant, model);
      int64_t guaranteed = int64_t{Guarantees(victim.tenant)[model]} * kWholeGpu;
      CHECK_OR_FAIL(after >= guaranteed,
                    "LAS preempts '{}' of tenant '{}' for '{}', leaving {}m of '{}' below its guarantee of {} GPUs: {}",
                    p.job_id, victim.tenant, p.for_job, after, model, guaranteed / kWholeGpu, p.reason);
    }
  }
  if (!by_priority && !by_las) {
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
Status World::CheckStrictOrder(std::vector<std::string> before, const Decisions& d) {
  if (config_.backfill || (config_.queue != QueuePolicy::kFifo && config_.queue != QueuePolicy::kSjf)) {
    return Status::Ok();
  }
  auto key = [&](const std::string& id) {
    const ShadowJob& j = jobs_[id];
    int64_t est =
        config_.queue == QueuePolicy::kSjf && j.req.runtime_estimate_ms > 0 ? j.req.runtime_estimate_ms : kNever;
    return std::pair{config_.queue == QueuePolicy::kSjf ? est : 0, j.seq};
  };
  std::sort(before.begin(), before.end(), [&](const std::string& x, const std::string& y) { return key(x) < key(y); });
  // A job held by its own tenant's limit holds up nobody.
  auto first_waiting = std::find_if(before.begin(), before.end(), [&](const std::string& id) {
    return jobs_[id].phase == Phase::kPending && !a_.HeldByTenantLimit(id);
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

void World::Charge(const JobRequest& r, const NodeInfo& n, const Placement& p, int sign) {
  ShadowTenant& t = usage_[r.tenant];
  for (int i : p.gpu_indices) {
    const GpuInfo& g = n.gpus[static_cast<size_t>(i)];
    int64_t milli = r.fractional() ? r.gpu_milli : kWholeGpu;
    t.milli += sign * milli;
    t.memory += sign * (r.fractional() ? r.gpu_memory_bytes : g.memory_bytes);
    t.by_model[g.model] += sign * milli;
  }
}

void World::Release(const std::string& id) {
  ShadowJob& j = jobs_[id];
  for (const Placement& p : j.placements) {
    const NodeInfo& n =
        *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
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

std::map<std::string, int> World::Guarantees(const std::string& tenant) const {
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? std::map<std::string, int>{} : t->second.guaranteed_gpus;
}

std::map<std::string, int64_t> World::MilliByModel(const ShadowJob& j) const {
  std::map<std::string, int64_t> out;
  for (const Placement& p : j.placements) {
    const NodeInfo& n =
        *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
    for (int i : p.gpu_indices)
      out[n.gpus[static_cast<size_t>(i)].model] += j.req.fractional() ? j.req.gpu_milli : kWholeGpu;
  }
  return out;
}

// Milli-GPUs of `model` that the tenant's preempted, still stopping jobs hold.
int64_t World::PreemptingMilli(const std::string& tenant, const std::string& model) const {
  int64_t total = 0;
  for (const auto& [id, j] : jobs_) {
    if (j.phase != Phase::kPreempting || j.req.tenant != tenant) continue;
    for (const Placement& p : j.placements) {
      const NodeInfo& n =
          *std::find_if(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == p.node; });
      for (int i : p.gpu_indices) {
        if (n.gpus[static_cast<size_t>(i)].model == model) total += j.req.fractional() ? j.req.gpu_milli : kWholeGpu;
      }
    }
  }
  return total;
}

int64_t World::Borrowed(const std::string& tenant) {
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
Status World::CheckAll() {
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
    CHECK_OR_FAIL(a_.HeldMask(n.name) == held, "node '{}' held mask {:#x}, books {:#x}", n.name, a_.HeldMask(n.name),
                  held);
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
Status World::CheckRecovery() {
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
    CHECK_OR_FAIL(
        x.milli_gpus == y.milli_gpus && x.memory_bytes == y.memory_bytes && x.borrowed_milli == y.borrowed_milli,
        "recovery: tenant '{}' usage differs from the live scheduler", name);
  }
  for (const auto& [id, j] : jobs_) {
    CHECK_OR_FAIL(c.IsPreempting(id) == a_.IsPreempting(id), "recovery: '{}' preempting flag differs", id);
  }
  return Status::Ok();
}

// ---- the end: an idle, healthy cluster runs every job that can run ----

bool World::QuotaBlocked(const JobRequest& r) const {
  auto t = tenants_.find(r.tenant);
  return t != tenants_.end() && t->second.borrow_limit >= 0 && r.milli() > int64_t{t->second.borrow_limit} * kWholeGpu;
}

Status World::Quiesce() {
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

}  // namespace drover::sched::testing
