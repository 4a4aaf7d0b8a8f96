#include "drover/sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <queue>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {
namespace {

// Preemption searches walk the cluster; a pass makes at most this many, for
// the first jobs in queue order that cannot be placed.
constexpr int kPreemptionSearchesPerPass = 4;
// Gangs larger than this are refused as malformed.
constexpr int kMaxReplicas = 4096;

Status ValidateRequest(const JobRequest& job) {
  if (job.id.empty()) return InvalidArgument("job id is empty");
  if (job.replicas < 1 || job.replicas > kMaxReplicas) {
    return InvalidArgument(
        fmt::format("job '{}' asks for {} replicas, outside 1..{}", job.id, job.replicas, kMaxReplicas));
  }
  if (job.gpus < 0 || job.gpus > kMaxGpusPerNode) {
    return InvalidArgument(
        fmt::format("job '{}' asks for {} GPUs per replica, outside 0..{}", job.id, job.gpus, kMaxGpusPerNode));
  }
  if (job.cpu_milli < 0 || job.memory_bytes < 0) {
    return InvalidArgument(fmt::format("job '{}' asks for negative CPU or host memory", job.id));
  }
  if (job.gpu_milli < 1 || job.gpu_milli > kWholeGpu) {
    return InvalidArgument(
        fmt::format("job '{}' asks for {} milli-GPU, outside 1..{}", job.id, job.gpu_milli, kWholeGpu));
  }
  if (job.fractional() && (job.gpus != 1 || job.replicas != 1)) {
    return InvalidArgument(
        fmt::format("job '{}' asks for a share of a GPU, which needs gpus = 1 and replicas = 1", job.id));
  }
  if (job.gpu_memory_bytes < 0 || job.runtime_estimate_ms < 0) {
    return InvalidArgument(fmt::format("job '{}' has a negative memory size or runtime estimate", job.id));
  }
  return Status::Ok();
}

// Whether node `a` and `b` look alike to NeverFits, which judges every GPU
// of every node as if idle: all but GPU health and schedulability count.
bool SameForNeverFits(const NodeInfo& a, const NodeInfo& b) {
  if (a.cpu_milli != b.cpu_milli || a.memory_bytes != b.memory_bytes || a.labels != b.labels || a.links != b.links ||
      a.gpus.size() != b.gpus.size()) {
    return false;
  }
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const GpuInfo& x = a.gpus[i];
    const GpuInfo& y = b.gpus[i];
    if (x.index != y.index || x.vendor != y.vendor || x.model != y.model || x.memory_bytes != y.memory_bytes ||
        x.numa_node != y.numa_node) {
      return false;
    }
  }
  return true;
}

}  // namespace

Scheduler::Scheduler(Config config) : s_(std::make_unique<State>()) {
  s_->config = config;
  s_->rng = Rng(config.seed);
}
Scheduler::~Scheduler() = default;
Scheduler::Scheduler(Scheduler&&) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&&) noexcept = default;
const Config& Scheduler::config() const { return s_->config; }

// ---- bookkeeping ----

int State::FindJob(const std::string& id) const {
  auto it = job_ids.find(id);
  return it == job_ids.end() ? -1 : it->second;
}

int State::NewJob() {
  if (!free_jobs.empty()) {
    int j = free_jobs.back();
    free_jobs.pop_back();
    return j;
  }
  jobs.emplace_back();
  return static_cast<int>(jobs.size()) - 1;
}

void State::AddPending(int job) {
  JobState& j = jobs[job];
  j.pending = true;
  j.pending_pos = static_cast<int>(pending.size());
  j.why = Why{};
  pending.push_back(job);
}

void State::DropPending(int job) {
  JobState& j = jobs[job];
  if (!j.pending) return;
  int moved = pending.back();
  pending[j.pending_pos] = moved;
  jobs[moved].pending_pos = j.pending_pos;
  pending.pop_back();
  j.pending = false;
  j.pending_pos = -1;
}

void State::FreeJob(int job) {
  job_ids.erase(jobs[job].req.id);
  jobs[job] = JobState{};
  free_jobs.push_back(job);
}

// ---- cluster ----

Status Scheduler::UpsertNode(const NodeInfo& info) {
  ++s_->generation;
  ++s_->preempt_epoch;
  State& s = *s_;
  size_t n = info.gpus.size();
  if (info.name.empty()) return InvalidArgument("node name is empty");
  if (n > static_cast<size_t>(kMaxGpusPerNode)) {
    return InvalidArgument(fmt::format("node '{}' has {} GPUs, more than {}", info.name, n, kMaxGpusPerNode));
  }
  for (size_t i = 0; i < n; ++i) {
    const GpuInfo& g = info.gpus[i];
    if (g.index != static_cast<int>(i)) {
      return InvalidArgument(fmt::format("node '{}' GPU {} has index {}", info.name, i, g.index));
    }
    if (g.memory_bytes < 0) return InvalidArgument(fmt::format("node '{}' GPU {} has negative memory", info.name, i));
  }
  if (info.cpu_milli < 0 || info.memory_bytes < 0) {
    return InvalidArgument(fmt::format("node '{}' has negative CPU or memory capacity", info.name));
  }
  if (!info.links.empty() && info.links.size() != n * n) {
    return InvalidArgument(
        fmt::format("node '{}' has a link matrix of {} entries, expected {} x {}", info.name, info.links.size(), n, n));
  }
  for (Link l : info.links) {
    if (static_cast<int>(l) > static_cast<int>(Link::kFabric)) {
      return InvalidArgument(fmt::format("node '{}' has an unknown link kind {}", info.name, static_cast<int>(l)));
    }
  }
  auto [it, inserted] = s.node_ids.emplace(info.name, static_cast<int>(s.nodes.size()));
  int idx = it->second;
  if (inserted) {
    s.nodes.emplace_back();
    s.nodes.back().shared_key.fill(-1);
  }
  NodeState& node = s.nodes[idx];
  ++node.version;
  // Take the node out of every index, then rebuild it.
  node.info.schedulable = false;
  s.Recount(idx);
  for (size_t i = 0; i < node.classes.size(); ++i) s.SetBucket(idx, node.classes[i], static_cast<int>(i), 0);
  s.capacity_cpu -= node.info.cpu_milli;
  for (uint64_t m = node.present & node.healthy; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    s.capacity_milli -= kWholeGpu;
    s.capacity_mem -= node.info.gpus[g].memory_bytes;
  }
  for (int d : {node.switch_domain, node.rack_domain}) {
    if (d >= 0) std::erase(s.domains[d].nodes, idx);
  }
  if (inserted || !SameForNeverFits(node.info, info)) s.never_fits.clear();
  if (inserted || node.info.labels != info.labels) {
    if (!inserted) {
      for (const auto& label : node.info.labels) std::erase(s.label_nodes[label], idx);
    }
    for (const auto& label : info.labels) {  // kept in index order: Reserve and Preempt walk them in it
      std::vector<int>& list = s.label_nodes[label];
      list.insert(std::lower_bound(list.begin(), list.end(), idx), idx);
    }
  }
  node.info = info;
  s.capacity_cpu += info.cpu_milli;
  node.topo = s.TopoFor(info);
  node.present = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  node.healthy = 0;
  node.gpu_class.assign(n, 0);
  node.classes.clear();
  for (size_t i = 0; i < n; ++i) {
    const GpuInfo& g = info.gpus[i];
    if (g.healthy) node.healthy |= uint64_t{1} << i;
    int cls = s.ClassFor(g);
    node.gpu_class[i] = cls;
    auto slot =
        std::find_if(node.classes.begin(), node.classes.end(), [&](const ClassSlot& c) { return c.cls == cls; });
    if (slot == node.classes.end()) {
      node.classes.push_back(ClassSlot{cls, 0, 0, -1});
      slot = node.classes.end() - 1;
    }
    slot->mask |= uint64_t{1} << i;
    if (g.healthy) {
      s.capacity_milli += kWholeGpu;
      s.capacity_mem += g.memory_bytes;
    }
  }
  node.switch_domain = node.rack_domain = -1;
  if (auto l = info.labels.find("switch"); l != info.labels.end())
    node.switch_domain = s.DomainFor("switch", l->second);
  if (auto l = info.labels.find("rack"); l != info.labels.end()) node.rack_domain = s.DomainFor("rack", l->second);
  for (int d : {node.switch_domain, node.rack_domain}) {
    if (d >= 0) s.domains[d].nodes.push_back(idx);
  }
  // Free capacity from scratch, then the holds of the jobs bound here.
  for (int g = 0; g < kMaxGpusPerNode; ++g) {
    node.free_milli[g] = kWholeGpu;
    node.free_mem[g] = g < static_cast<int>(n) ? info.gpus[g].memory_bytes : 0;
  }
  node.free_cpu = info.cpu_milli;
  node.free_host_mem = info.memory_bytes;
  for (int j : node.jobs) {
    for (const Held& h : s.jobs[j].held) {
      if (h.node != idx) continue;
      node.free_cpu -= s.jobs[j].req.cpu_milli;
      node.free_host_mem -= s.jobs[j].req.memory_bytes;
      for (uint64_t m = h.mask; m != 0; m &= m - 1) {
        int g = std::countr_zero(m);
        node.free_milli[g] = static_cast<int16_t>(node.free_milli[g] - h.milli);
        node.free_mem[g] -= h.milli == kWholeGpu ? (g < static_cast<int>(n) ? info.gpus[g].memory_bytes : 0) : h.mem;
      }
    }
  }
  node.whole_free = 0;
  for (uint64_t m = node.present; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    if (node.free_milli[g] == kWholeGpu) node.whole_free |= uint64_t{1} << g;
  }
  s.Recount(idx);
  return Status::Ok();
}

void Scheduler::SetSchedulable(const std::string& name, bool schedulable) {
  ++s_->generation;
  ++s_->preempt_epoch;
  auto it = s_->node_ids.find(name);
  if (it == s_->node_ids.end()) return;
  s_->nodes[it->second].info.schedulable = schedulable;
  ++s_->nodes[it->second].version;
  s_->Recount(it->second);
}

void Scheduler::SetNodeImages(const std::string& name, const std::vector<std::string>& images) {
  auto it = s_->node_ids.find(name);
  if (it == s_->node_ids.end()) return;
  const int node = it->second;
  std::vector<std::string>& held = s_->nodes[node].images;
  for (const std::string& image : held) {
    auto n = s_->image_nodes.find(image);
    if (n == s_->image_nodes.end()) continue;
    std::erase(n->second, node);
    if (n->second.empty()) s_->image_nodes.erase(n);
  }
  held = images;
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  for (const std::string& image : held) {
    std::vector<int>& nodes = s_->image_nodes[image];
    nodes.insert(std::lower_bound(nodes.begin(), nodes.end(), node), node);
  }
}

Status Scheduler::SetTenant(const TenantInfo& tenant) {
  ++s_->generation;
  ++s_->preempt_epoch;
  if (tenant.name.empty()) return InvalidArgument("tenant name is empty");
  if (!(tenant.weight > 0) || tenant.weight > 1e6) {
    return InvalidArgument(fmt::format("tenant '{}' has weight {}, outside (0, 1e6]", tenant.name, tenant.weight));
  }
  if (tenant.borrow_limit < -1) {
    return InvalidArgument(
        fmt::format("tenant '{}' has borrowing limit {}; use -1 for none", tenant.name, tenant.borrow_limit));
  }
  for (const auto& [model, gpus] : tenant.guaranteed_gpus) {
    if (gpus < 0)
      return InvalidArgument(fmt::format("tenant '{}' has a negative guarantee for '{}'", tenant.name, model));
  }
  for (const auto& [model, gpus] : tenant.max_gpus) {
    if (gpus < 0)
      return InvalidArgument(fmt::format("tenant '{}' has a negative GPU quota for '{}'", tenant.name, model));
  }
  if (tenant.max_gpu_memory_bytes < -1) {
    return InvalidArgument(
        fmt::format("tenant '{}' has GPU memory quota {}; use -1 for none", tenant.name, tenant.max_gpu_memory_bytes));
  }
  if (tenant.max_cpu_milli < -1) {
    return InvalidArgument(
        fmt::format("tenant '{}' has CPU quota {} milli-CPUs; use -1 for none", tenant.name, tenant.max_cpu_milli));
  }
  s_->tenants[s_->TenantFor(tenant.name)].info = tenant;
  return Status::Ok();
}

// ---- jobs ----

Status Scheduler::Enqueue(const JobRequest& req, int64_t now_ms) {
  ++s_->generation;
  State& s = *s_;
  DROVER_RETURN_IF_ERROR(ValidateRequest(req));
  if (s.job_ids.contains(req.id))
    return AlreadyExists(fmt::format("job '{}' is already known to the scheduler", req.id));
  int idx = s.NewJob();
  JobState& j = s.jobs[idx];
  j.req = req;
  if (j.req.tenant.empty()) j.req.tenant = "default";
  j.tenant = s.TenantFor(j.req.tenant);
  j.priority = req.priority;
  j.preemptible = req.preemptible;
  j.seq = s.next_seq++;
  j.submit_ms = now_ms;
  j.queued_ms = req.queued_ms > 0 ? req.queued_ms : now_ms;
  j.attained = std::max<int64_t>(0, req.attained_gpu_ms);
  s.job_ids[req.id] = idx;
  s.AddPending(idx);
  // The workload's shapes (and CPU per GPU, for placements that avoid
  // stranding GPUs: ShapeStats::StrandCpuPerMilli).
  if (req.gpus > 0) s.shapes.Observe(req);
  if (auto r = s.restored_victims.find(req.id); r != s.restored_victims.end()) {
    for (const std::string& victim : r->second) {
      int v = s.FindJob(victim);
      if (v >= 0 && s.jobs[v].preempting) s.Nominate(idx, v);
    }
    s.restored_victims.erase(r);
  }
  return Status::Ok();
}

Status Scheduler::Restore(const JobRequest& req, const Binding& binding, int64_t started_ms) {
  ++s_->generation;
  State& s = *s_;
  DROVER_RETURN_IF_ERROR(ValidateRequest(req));
  if (s.job_ids.contains(req.id))
    return AlreadyExists(fmt::format("job '{}' is already known to the scheduler", req.id));
  if (binding.replicas.size() != static_cast<size_t>(req.replicas)) {
    return InvalidArgument(
        fmt::format("job '{}' has {} placements for {} replicas", req.id, binding.replicas.size(), req.replicas));
  }
  int idx = s.NewJob();
  JobState& j = s.jobs[idx];
  j.req = req;
  if (j.req.tenant.empty()) j.req.tenant = "default";
  j.tenant = s.TenantFor(j.req.tenant);
  j.priority = req.priority;
  j.preemptible = req.preemptible;
  j.seq = s.next_seq++;
  j.submit_ms = started_ms;
  j.attained = std::max<int64_t>(0, req.attained_gpu_ms);  // before this run
  s.job_ids[req.id] = idx;
  std::vector<Held> held;
  auto fail = [&](Status st) {
    for (auto it = held.rbegin(); it != held.rend(); ++it) s.Release(idx, *it);
    s.FreeJob(idx);
    return st;
  };
  for (const Placement& p : binding.replicas) {
    auto n = s.node_ids.find(p.node);
    if (n == s.node_ids.end())
      return fail(FailedPrecondition(fmt::format("job '{}' is bound to unknown node '{}'", req.id, p.node)));
    NodeState& node = s.nodes[n->second];
    if (p.gpu_indices.size() != static_cast<size_t>(req.gpus)) {
      return fail(InvalidArgument(fmt::format("job '{}' holds {} GPUs on node '{}', expected {}", req.id,
                                              p.gpu_indices.size(), p.node, req.gpus)));
    }
    uint64_t mask = 0;
    for (int i : p.gpu_indices) {
      if (i < 0 || i >= kMaxGpusPerNode || (node.present & (uint64_t{1} << i)) == 0) {
        return fail(InvalidArgument(
            fmt::format("job '{}' holds GPU index {} that node '{}' does not have", req.id, i, p.node)));
      }
      mask |= uint64_t{1} << i;
    }
    Held h{n->second, mask == 0 ? -1 : node.gpu_class[std::countr_zero(mask)], mask, req.gpu_milli,
           req.fractional() ? req.gpu_memory_bytes : 0};
    for (uint64_t m = mask; m != 0; m &= m - 1) {
      int g = std::countr_zero(m);
      bool taken = req.fractional() ? (node.free_milli[g] < h.milli || node.free_mem[g] < h.mem)
                                    : (node.whole_free & (uint64_t{1} << g)) == 0;
      if (taken) {
        return fail(FailedPrecondition(
            fmt::format("job '{}' holds GPU {} of node '{}' that other jobs hold", req.id, g, p.node)));
      }
    }
    s.Hold(idx, h);
    held.push_back(h);
  }
  // A recovered job is part of the workload too: a restarted server learns
  // the shapes of what it recovers, as it did of the arrivals (kFrag).
  if (req.gpus > 0) s.shapes.Observe(req);
  s.Bind(idx, std::move(held), started_ms, nullptr);
  return Status::Ok();
}

Status Scheduler::MarkPreempting(const std::string& job_id, const std::string& for_job) {
  ++s_->generation;
  State& s = *s_;
  int idx = s.FindJob(job_id);
  if (idx < 0 || s.jobs[idx].held.empty()) return NotFound(fmt::format("job '{}' is not bound", job_id));
  JobState& j = s.jobs[idx];
  if (!j.req.preemptible) return FailedPrecondition(fmt::format("job '{}' is not preemptible", job_id));
  if (j.preempting) return Status::Ok();
  s.MarkStopping(idx);
  if (for_job.empty()) return Status::Ok();
  int p = s.FindJob(for_job);
  if (p >= 0 && s.jobs[p].pending) {
    s.Nominate(p, idx);
  } else if (p < 0) {
    s.restored_victims[for_job].push_back(job_id);
  }
  return Status::Ok();
}

Status Scheduler::Requeue(const std::string& job_id, int64_t now_ms) {
  ++s_->generation;
  State& s = *s_;
  int idx = s.FindJob(job_id);
  if (idx < 0 || s.jobs[idx].held.empty()) return NotFound(fmt::format("job '{}' is not bound", job_id));
  s.Unbind(idx, now_ms);
  s.jobs[idx].queued_ms = now_ms;
  s.AddPending(idx);
  return Status::Ok();
}

int64_t Scheduler::Attained(const std::string& job_id, int64_t now_ms) const {
  int idx = s_->FindJob(job_id);
  return idx < 0 ? 0 : s_->AttainedNow(idx, now_ms);
}

void Scheduler::Remove(const std::string& job_id, int64_t now_ms) {
  ++s_->generation;
  State& s = *s_;
  int idx = s.FindJob(job_id);
  if (idx < 0) return;
  if (s.reservation_job == idx) s.ClearReservation();
  s.DropPending(idx);
  s.ClearNomination(idx);
  if (!s.jobs[idx].held.empty()) s.Unbind(idx, now_ms);
  s.FreeJob(idx);
}

// ---- the pass ----

int State::PromoteStarving(int64_t now) {
  if (config.queue != QueuePolicy::kLas || config.las_starvation_factor <= 0) return 0;
  int promoted = 0;
  for (int job : pending) {
    JobState& j = jobs[job];
    const int64_t milli = j.req.milli();
    if (j.attained <= 0 || milli <= 0 || LasLevel(config, j.attained) == 0) continue;
    // Waited / ran >= factor, where ran = attained GPU-ms over its GPUs.
    const double ran_ms = static_cast<double>(j.attained) * kWholeGpu / static_cast<double>(milli);
    if (static_cast<double>(now - j.queued_ms) < config.las_starvation_factor * ran_ms) continue;
    j.attained = 0;
    ++promoted;
  }
  return promoted;
}

std::vector<int> State::Order(int64_t now) const {
  struct Key {
    int64_t a, b;
    uint64_t seq;
    int job;
  };
  std::vector<Key> keys;
  keys.reserve(pending.size());
  for (int job : pending) {
    const JobState& j = jobs[job];
    Key k{0, 0, j.seq, job};
    switch (config.queue) {
      case QueuePolicy::kFifo:
      case QueuePolicy::kFairShare:  // not used: fair share orders dynamically
        break;
      case QueuePolicy::kPriority: {
        int64_t aged = config.aging_ms > 0 ? std::max<int64_t>(0, now - j.submit_ms) / config.aging_ms : 0;
        k.a = -(j.req.priority + aged);
        break;
      }
      case QueuePolicy::kLas: k.a = LasLevel(config, j.attained); break;
      case QueuePolicy::kSjf:
        k.a = j.req.runtime_estimate_ms > 0 ? 0 : 1;
        k.b = j.req.runtime_estimate_ms;
        break;
    }
    keys.push_back(k);
  }
  std::sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.a != y.a) return x.a < y.a;
    if (x.b != y.b) return x.b < y.b;
    return x.seq < y.seq;
  });
  std::vector<int> out;
  out.reserve(keys.size());
  for (const Key& k : keys) out.push_back(k.job);
  return out;
}

void State::Consider(int job, int64_t now, bool* blocked, int* blocker, std::vector<int>* preempt_later, Decisions* d) {
  JobState& j = jobs[job];
  j.considered_pass = pass;
  if (*blocked) {
    j.why = Why{WhyCode::kBehind, *blocker, jobs[*blocker].seq, 0, -1, now};
    return;
  }
  ++d->considered;
  auto block = [&] {
    if (!config.backfill) {
      *blocked = true;
      *blocker = job;
    }
  };
  quota_hit = false;
  reserved_hit = false;
  const TenantInfo& ti = tenants[j.tenant].info;
  const bool limited = ti.borrow_limit >= 0 || !ti.max_gpus.empty() || ti.max_gpu_memory_bytes >= 0;
  // Over the limit on every class it could use, however full the cluster:
  // one check per GPU class, not one per node.
  const auto refused_everywhere = [&] {
    bool any = false;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (!ClassMatches(j.req, static_cast<int>(c))) continue;
      any = true;
      int64_t need = j.req.fractional() ? j.req.gpu_milli : int64_t{j.req.gpus} * kWholeGpu;
      int64_t mem = j.req.fractional() ? j.req.gpu_memory_bytes : int64_t{j.req.gpus} * classes[c].memory_bytes;
      if (CanCharge(j.tenant, classes[c].model, need, mem)) return false;
    }
    return any;
  };
  // Checked before placing: every node the placement would visit refuses
  // the job for its tenant's limit (PickOnNode and PickFraction ask the
  // same or more of each class), so a tenant at its quota with thousands of
  // pending jobs costs O(GPU classes) per job, not a walk of the buckets.
  // Not for CPU-only jobs (no GPU to charge) nor the FGD baselines, which
  // charge one GPU's share without its memory.
  const bool baseline = config.placement == PlacementPolicy::kBestFit || config.placement == PlacementPolicy::kRandom;
  const bool checked_first = limited && j.req.gpus > 0 && !baseline;
  // A CPU quota holds back any job, with GPUs or without: every replica
  // charges its cpu_milli.
  const bool over_cpu =
      ti.max_cpu_milli >= 0 && tenants[j.tenant].cpu + int64_t{j.req.replicas} * j.req.cpu_milli > ti.max_cpu_milli;
  bool quota = over_cpu || (checked_first && refused_everywhere());
  if (!quota) {
    // A job of a shape whose placement already found nothing this pass
    // fails too (no_fit): not for the random baseline (its draws would
    // shift) nor a job with GPUs promised to it (it may use them).
    const bool memo = config.placement != PlacementPolicy::kRandom && j.nomination.empty();
    const bool known = memo && NoFitKnown(j.req);
    std::vector<Held> held;
    host_miss_cpu = host_miss_mem = -1;
    if ((!known || config.verify_memos) && PlaceJob(job, now, &held)) {
      if (known && memo_mismatch.empty()) {
        memo_mismatch = fmt::format("'{}' was placed after a job of its shape found no fit in the pass", j.req.id);
      }
      Bind(job, std::move(held), now, d);
      return;
    }
    if (memo && !known && !quota_hit && !reserved_hit) RecordNoFit(j.req);
    // A failed placement charges nothing: a check made before stands.
    quota = quota_hit || (limited && !checked_first && refused_everywhere());
  }
  if (!j.victims.empty()) {
    bool stopping = std::any_of(j.victims.begin(), j.victims.end(), [&](const std::string& id) {
      int v = FindJob(id);
      return v >= 0 && jobs[v].preempting;
    });
    if (stopping) {
      j.why.code = WhyCode::kAwaitingPreemption;
      block();
      return;
    }
    ClearNomination(job);  // the victims are gone and it still does not fit: look again
  }
  // Preemption is searched for after every placement of the pass, so that
  // it judges tenants' usage as the pass leaves it.
  if (config.preemption && !quota && j.req.may_preempt && HasCandidates(job)) preempt_later->push_back(job);
  if (config.backfill && !quota && reservation_job < 0 && Reserve(job, now)) return;
  j.why = Why{quota ? WhyCode::kQuota : WhyCode::kNoFit, -1, 0, 0, -1, now};
  // Would it fit but for the reservation? Then say so. Only a placement
  // that left reserved GPUs out can (Config::verify_memos probes anyway).
  const bool left_out = reserved_hit;
  if (!quota && reservation_job >= 0 && (left_out || (config.verify_memos && memo_mismatch.empty()))) {
    int saved = reservation_job;
    int64_t saved_ms = reservation_ms;
    reservation_job = job;
    std::vector<Held> probe;
    if (PlaceJob(job, now, &probe)) {
      for (auto it = probe.rbegin(); it != probe.rend(); ++it) Release(job, *it);
      if (left_out) {
        j.why = Why{WhyCode::kBehindReservation, saved, jobs[saved].seq, saved_ms, -1, now};
      } else {
        memo_mismatch = fmt::format("'{}' fits on reserved GPUs that its placement never left out", j.req.id);
      }
    }
    reservation_job = saved;
    reservation_ms = saved_ms;
  }
  // A job held by its own tenant's limit does not hold up other tenants'
  // jobs behind it (as Slurm's QOS limits): nothing it waits for is theirs.
  if (!quota) block();
}

// Within a pass placements only take capacity (bindings; preemption comes
// after every placement), so a shape that found no node finds none later in
// the pass, and neither does one asking for as much CPU and memory or more,
// or more than any node that refused it for its host request had left: a
// node refused it either for its GPUs (as it refuses this job) or for its
// CPU or memory. A gang's search is not exact (greedy per replica, a few
// domains), so for a gang only the same request counts.
bool State::NoFitKnown(const JobRequest& req) {
  if (no_fit_pass != pass || no_fit.empty()) return false;
  auto it = no_fit.find(req);
  if (it == no_fit.end()) return false;
  for (const NoFit& f : it->second) {
    if (req.replicas > 1) {
      if (req.cpu_milli == f.cpu && req.memory_bytes == f.mem) return true;
      continue;
    }
    if ((req.cpu_milli >= f.cpu && req.memory_bytes >= f.mem) || req.cpu_milli > f.cpu_left ||
        req.memory_bytes > f.mem_left) {
      return true;
    }
  }
  return false;
}

void State::RecordNoFit(const JobRequest& req) {
  // Shapes and requests remembered per pass, at most (the memo only saves
  // work; what it does not hold is placed as usual).
  constexpr size_t kMaxShapes = 1024;
  constexpr size_t kMaxRequests = 8;
  if (no_fit_pass != pass) {
    no_fit.clear();
    no_fit_pass = pass;
  }
  auto it = no_fit.find(req);
  if (it == no_fit.end()) {
    if (no_fit.size() >= kMaxShapes) return;
    it = no_fit.emplace(ShapeOf(req), std::vector<NoFit>{}).first;
  }
  if (it->second.size() < kMaxRequests)
    it->second.push_back(NoFit{req.cpu_milli, req.memory_bytes, host_miss_cpu, host_miss_mem});
}

Decisions Scheduler::Schedule(int64_t now_ms) {
  State& s = *s_;
  Decisions d;
  s.ClearReservation();
  ++s.pass;
  ++s.generation;  // the reservation moved; bindings below change the cluster
  if (s.pending.empty()) return d;
  bool blocked = false;
  int blocker = -1;
  std::vector<int> later;
  // Jobs that preempted for GPUs go first: their GPUs are promised to them,
  // and nothing ahead of them in the queue may wait on those GPUs. Fair
  // share orders the rest itself: only these are ordered here (in
  // submission order, as Order puts them under fair share).
  std::vector<int> order;
  d.promotions = s.PromoteStarving(now_ms);
  if (s.config.queue != QueuePolicy::kFairShare) {
    order = s.Order(now_ms);
  } else {
    for (int job : s.pending) {
      if (s.jobs[job].nominee) order.push_back(job);
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) { return s.jobs[a].seq < s.jobs[b].seq; });
  }
  for (int job : order) {
    if (s.jobs[job].nominee) s.Consider(job, now_ms, &blocked, &blocker, &later, &d);
  }
  if (s.config.queue != QueuePolicy::kFairShare) {
    for (int job : order) {
      if (s.jobs[job].considered_pass != s.pass) s.Consider(job, now_ms, &blocked, &blocker, &later, &d);
    }
  } else {
    s.FairShare(now_ms, &blocked, &blocker, &later, &d);
  }
  int budget = kPreemptionSearchesPerPass;
  for (int job : later) {
    if (budget == 0) break;
    if (!s.jobs[job].pending || !s.jobs[job].victims.empty() || !s.HasCandidates(job)) continue;
    if (s.KnownWithoutVictims(job)) {  // it failed, and nothing it reads has changed
      if (s.config.verify_memos && s.memo_mismatch.empty()) {
        State fresh = s;
        Decisions scratch;
        if (fresh.Preempt(job, now_ms, &scratch)) {
          s.memo_mismatch = fmt::format("a preemption search for '{}' known to fail succeeds", s.jobs[job].req.id);
        }
      }
      continue;
    }
    --budget;
    s.Preempt(job, now_ms, &d);
  }
  // The jobs bound in this pass may be preempted from the next one on.
  if (!d.bindings.empty()) ++s.preempt_epoch;
  return d;
}

void State::FairShare(int64_t now_ms, bool* blocked, int* blocker, std::vector<int>* later, Decisions* d) {
  State& s = *this;
  // Weighted DRF: repeatedly serve the tenant with the smallest dominant
  // share (GPUs, GPU memory or CPU, whichever is largest, divided by
  // weight; CPU-only work counts by its CPU);
  // tenants below their guarantee come first. Within a tenant: priority,
  // then submission order.
  std::vector<std::vector<int>> per(s.tenants.size());
  for (int job : s.pending) per[s.jobs[job].tenant].push_back(job);
  auto key = [&](int t) {
    const TenantState& ts = s.tenants[t];
    int64_t guaranteed = 0;
    for (const auto& [model, gpus] : ts.info.guaranteed_gpus) guaranteed += int64_t{gpus} * kWholeGpu;
    double gpu = s.capacity_milli > 0 ? static_cast<double>(ts.milli) / static_cast<double>(s.capacity_milli) : 0;
    double mem = s.capacity_mem > 0 ? static_cast<double>(ts.mem) / static_cast<double>(s.capacity_mem) : 0;
    double cpu = s.capacity_cpu > 0 ? static_cast<double>(ts.cpu) / static_cast<double>(s.capacity_cpu) : 0;
    return std::make_tuple(ts.milli < guaranteed ? 0 : 1, std::max({gpu, mem, cpu}) / ts.info.weight, t);
  };
  using Entry = std::tuple<int, double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  std::vector<size_t> cursor(per.size(), 0);
  for (size_t t = 0; t < per.size(); ++t) {
    if (per[t].empty()) continue;
    std::sort(per[t].begin(), per[t].end(), [&](int a, int b) {
      const JobState& x = s.jobs[a];
      const JobState& y = s.jobs[b];
      if (x.priority != y.priority) return x.priority > y.priority;
      return x.seq < y.seq;
    });
    heap.push(key(static_cast<int>(t)));
  }
  while (!heap.empty()) {
    int t = std::get<2>(heap.top());
    heap.pop();
    int job = per[t][cursor[t]++];
    if (s.jobs[job].considered_pass != s.pass) s.Consider(job, now_ms, blocked, blocker, later, d);
    if (cursor[t] < per[t].size()) heap.push(key(t));
  }
}

// ---- questions ----

size_t Scheduler::pending() const { return s_->pending.size(); }
size_t Scheduler::bound() const { return s_->bound_count; }
uint64_t Scheduler::generation() const { return s_->generation; }

bool Scheduler::IsPending(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  return idx >= 0 && s_->jobs[idx].pending;
}

bool Scheduler::IsBound(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  return idx >= 0 && !s_->jobs[idx].held.empty();
}

bool Scheduler::IsPreempting(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  return idx >= 0 && s_->jobs[idx].preempting;
}

uint64_t Scheduler::HeldMask(const std::string& node) const {
  auto it = s_->node_ids.find(node);
  if (it == s_->node_ids.end()) return 0;
  const NodeState& n = s_->nodes[it->second];
  return n.present & ~n.whole_free;
}

Scheduler::TenantUsage Scheduler::Usage(const std::string& tenant) const {
  auto it = s_->tenant_ids.find(tenant);
  if (it == s_->tenant_ids.end()) return {};
  const TenantState& t = s_->tenants[it->second];
  return TenantUsage{t.milli, t.mem, s_->Beyond(t)};
}

bool Scheduler::HeldByTenantLimit(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  return idx >= 0 && s_->jobs[idx].pending && s_->jobs[idx].why.code == WhyCode::kQuota;
}

std::string Scheduler::PendingReason(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  if (idx < 0 || !s_->jobs[idx].pending) return {};
  return s_->Reason(idx);
}

std::string_view Scheduler::PendingClass(const std::string& job_id) const {
  int idx = s_->FindJob(job_id);
  if (idx < 0 || !s_->jobs[idx].pending) return {};
  switch (s_->jobs[idx].why.code) {
    case WhyCode::kNew: return "new";
    case WhyCode::kQuota: return "quota";
    case WhyCode::kBehind: return "queue_order";
    case WhyCode::kBehindReservation: return "backfill";
    case WhyCode::kAwaitingPreemption: return "preemption";
    case WhyCode::kNoFit:
    case WhyCode::kReserved: break;
  }
  return "no_fit";
}

}  // namespace drover::sched
