// Preemption: for a job that cannot be placed, the smallest set of running
// jobs whose GPUs would let it run.
//
// Who may be preempted (MayPreempt): only preemptible jobs not already
// stopping and not bound in this very pass; of the same tenant, only lower
// priority; of another tenant, only a job whose removal leaves that tenant
// at or above its guarantee of each GPU model the job holds (it runs on
// borrowed GPUs), and then either for a higher priority or because the
// job's tenant is below its own guarantee of that model (quota reclaim).
// Under the LAS queue policy a job may also preempt one at a higher LAS
// level (more attained GPU service, Config::las_thresholds) and of no
// higher priority, within the same limits (Tiresias' preemptive 2D-LAS).
//
// Which set: per node, victims are added lowest priority first (then most
// recently started, then fewest GPUs) until the job fits, then any victim
// not needed is dropped again. The node whose set costs least wins, by
// (milli-GPUs lost, highest victim priority, most recent start). A gang
// repeats this replica by replica over a tentative view of the cluster.
//
// Worked example: node a runs p=10 x4 GPUs and p=20 x2 GPUs (preemptible),
// node b runs p=10 x8 GPUs. A p=100 job needing 6 GPUs: on a (2 free) the
// p=10 job alone frees 6 -> cost 4 GPUs; on b the p=10 job frees 8 -> cost
// 8 GPUs. Node a wins; the p=20 job keeps running.
#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <map>
#include <unordered_map>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {
namespace {

// A node's free resources as a search changes them. Only the node's own
// GPUs are filled in (and only they are read: every access goes through
// masks of present GPUs); a search makes one per node it looks at, so the
// other 56 of 64 entries are left uninitialised rather than cleared.
struct View {
  uint64_t whole_free = 0;
  int64_t cpu = 0;       // host resources left
  int64_t host_mem = 0;
  std::array<int, kMaxGpusPerNode> milli;
  std::array<int64_t, kMaxGpusPerNode> mem;
};

View ViewOf(const NodeState& n) {
  View v;
  v.whole_free = n.whole_free;
  v.cpu = n.free_cpu;
  v.host_mem = n.free_host_mem;
  const int gpus = 64 - std::countl_zero(n.present);
  for (int g = 0; g < gpus; ++g) {
    v.milli[g] = n.free_milli[g];
    v.mem[g] = n.free_mem[g];
  }
  return v;
}

int64_t Capacity(const NodeState& n, int g) {
  return g < static_cast<int>(n.info.gpus.size()) ? n.info.gpus[g].memory_bytes : 0;
}

void Apply(View* v, const NodeState& n, const JobRequest& owner, const Held& h, int sign) {
  v->cpu += sign * owner.cpu_milli;
  v->host_mem += sign * owner.memory_bytes;
  // Only GPUs the node still has: a job may hold one its new inventory
  // dropped, and the view has no slot filled in for it.
  for (uint64_t m = h.mask & n.present; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    v->milli[g] += sign * h.milli;
    v->mem[g] += sign * (h.milli == kWholeGpu ? Capacity(n, g) : h.mem);
    uint64_t bit = uint64_t{1} << g;
    if (v->milli[g] == kWholeGpu && (n.present & bit) != 0) {
      v->whole_free |= bit;
    } else {
      v->whole_free &= ~bit;
    }
  }
}

}  // namespace

int64_t State::AttainedNow(int job, int64_t now) const {
  const JobState& j = jobs[job];
  if (j.held.empty()) return j.attained;
  return j.attained + j.req.milli() * std::max<int64_t>(0, now - j.bound_ms) / kWholeGpu;
}

void State::MarkStopping(int job) {
  JobState& j = jobs[job];
  j.preempting = true;
  ++preempt_epoch;
  for (const Held& h : j.held) {
    ++nodes[h.node].version;  // its end reads as now
    CountVictim(h, -1);       // no longer a candidate victim
  }
  preemptible_priorities.erase(preemptible_priorities.find(j.req.priority));
  for (const auto& [model, milli] : MilliByModel(job)) tenants[j.tenant].stopping[model] += milli;
}

bool State::LasAhead(int job, int victim, int64_t now) const {
  if (config.queue != QueuePolicy::kLas || jobs[victim].req.priority > jobs[job].req.priority) return false;
  return LasLevel(config, AttainedNow(victim, now)) > LasLevel(config, jobs[job].attained);
}

bool State::MayPreempt(int job, int victim, const std::map<std::pair<int, std::string>, int64_t>& released,
                       int64_t now) const {
  const JobState& j = jobs[job];
  const JobState& v = jobs[victim];
  if (victim == job || !v.preemptible || v.preempting || v.held.empty() || v.bound_pass == pass) return false;
  if (v.tenant == j.tenant) return v.priority < j.priority || LasAhead(job, victim, now);
  // Another tenant's job: only while that tenant stays at or above its
  // guarantee of every model the job holds once this job (and the victims
  // chosen before it) are gone, i.e. the job runs on borrowed GPUs.
  const TenantState& jt = tenants[j.tenant];
  const bool ahead = v.priority < j.priority || LasAhead(job, victim, now);
  if (!ahead && jt.info.guaranteed_gpus.empty()) return false;  // neither ahead nor owed GPUs
  const TenantState& vt = tenants[v.tenant];
  bool reclaim = false;
  for (const auto& [model, milli] : MilliByModel(victim)) {
    auto u = vt.by_model.find(model);
    int64_t used = u == vt.by_model.end() ? 0 : u->second;
    auto st = vt.stopping.find(model);
    if (st != vt.stopping.end()) used -= st->second;  // preempted in an earlier decision, still stopping
    auto r = released.find({v.tenant, model});
    if (r != released.end()) used -= r->second;
    auto q = vt.info.guaranteed_gpus.find(model);
    int64_t guaranteed = q == vt.info.guaranteed_gpus.end() ? 0 : int64_t{q->second} * kWholeGpu;
    if (used - milli < guaranteed) return false;
    // Quota reclaim: the job's tenant is owed GPUs of this model.
    auto jq = jt.info.guaranteed_gpus.find(model);
    if (jq != jt.info.guaranteed_gpus.end() && (j.req.gpu_model.empty() || j.req.gpu_model == model)) {
      auto ju = jt.by_model.find(model);
      int64_t jused = ju == jt.by_model.end() ? 0 : ju->second;
      if (jused + j.req.milli() <= int64_t{jq->second} * kWholeGpu) reclaim = true;
    }
  }
  return reclaim || ahead;
}

bool State::HasCandidates(int job) const {
  if (preemptible_priorities.empty()) return false;
  const JobState& j = jobs[job];
  if (j.req.gpus == 0) return false;  // CPU-only work does not preempt
  if (*preemptible_priorities.begin() < j.req.priority) return true;
  // LAS: a preemptible job at or below its priority may have reached a
  // higher level (Preempt checks each; levels change only with time).
  if (config.queue == QueuePolicy::kLas && LasLevel(config, j.attained) < static_cast<int>(config.las_thresholds.size()) &&
      *preemptible_priorities.begin() <= j.req.priority) {
    return true;
  }
  // Quota reclaim needs the job's tenant below a guarantee it fits in, and
  // another tenant above its own guarantee of that model.
  const TenantState& t = tenants[j.tenant];
  for (const auto& [model, gpus] : t.info.guaranteed_gpus) {
    if (!j.req.gpu_model.empty() && j.req.gpu_model != model) continue;
    auto u = t.by_model.find(model);
    int64_t used = u == t.by_model.end() ? 0 : u->second;
    if (used + j.req.milli() > int64_t{gpus} * kWholeGpu) continue;
    for (const TenantState& o : tenants) {
      if (&o == &t) continue;
      auto ou = o.by_model.find(model);
      auto oq = o.info.guaranteed_gpus.find(model);
      int64_t oused = ou == o.by_model.end() ? 0 : ou->second;
      int64_t oguaranteed = oq == o.info.guaranteed_gpus.end() ? 0 : int64_t{oq->second} * kWholeGpu;
      if (oused > oguaranteed) return true;
    }
  }
  return false;
}

void State::ClearNomination(int job) {
  JobState& j = jobs[job];
  if (!j.nomination.empty() || !j.victims.empty()) ++preempt_epoch;
  for (const auto& [node, mask] : j.nomination) {
    nodes[node].nominated &= ~mask;
    ++nodes[node].version;
  }
  j.nomination.clear();
  j.nominee = false;
  j.victims.clear();
}

void State::Nominate(int job, int victim) {
  JobState& j = jobs[job];
  ++preempt_epoch;
  j.victims.push_back(jobs[victim].req.id);
  for (const Held& h : jobs[victim].held) {
    if (h.milli != kWholeGpu) continue;
    nodes[h.node].nominated |= h.mask;
    ++nodes[h.node].version;
    j.nomination.emplace_back(h.node, h.mask);
    j.nominee = true;
  }
  j.why = Why{WhyCode::kAwaitingPreemption, -1, 0, 0, jobs[victim].held.front().node, 0};
}

bool State::KnownWithoutVictims(int job) const {
  const JobState& j = jobs[job];
  return config.queue != QueuePolicy::kLas && j.no_victims_epoch == preempt_epoch &&
         j.no_victims_reservation == reservation_sig;
}

bool State::Preempt(int job, int64_t now, Decisions* d) {
  JobState& j = jobs[job];
  ++d->preemption_searches;
  // Kept only if the search fails: a success raises the epoch.
  j.no_victims_epoch = preempt_epoch;
  j.no_victims_reservation = reservation_sig;
  const JobRequest& req = j.req;
  std::unordered_map<int, View> views;
  std::vector<int> chosen;
  std::vector<Pick> picks;
  std::map<std::pair<int, std::string>, int64_t> released;  // by (tenant, model), for MayPreempt
  auto release_tally = [&](std::map<std::pair<int, std::string>, int64_t>* tally, int victim, int sign) {
    for (const auto& [model, milli] : MilliByModel(victim)) (*tally)[{jobs[victim].tenant, model}] += sign * milli;
  };

  auto view_of = [&](int ni) -> View { auto it = views.find(ni); return it == views.end() ? ViewOf(nodes[ni]) : it->second; };
  auto release_everywhere = [&](int victim) {
    for (const Held& h : jobs[victim].held) {
      View v = view_of(h.node);
      Apply(&v, nodes[h.node], jobs[victim].req, h, +1);
      views[h.node] = v;
    }
  };
  // GPUs of node `ni` the job may not have: nominated for other jobs, and
  // the reservation unless it may use it.
  auto not_for_it = [&](int ni) {
    const NodeState& n = nodes[ni];
    uint64_t others = n.nominated;
    for (const auto& [nd, mine] : j.nomination) {
      if (nd == ni) others &= ~mine;
    }
    if (n.reserved != 0 && !MayUseReserved(job, now)) others |= n.reserved;
    return others;
  };
  // Where on node `ni` the job's replica fits within `v`, if anywhere.
  auto fit = [&](int ni, const View& v, Pick* out) {
    const NodeState& n = nodes[ni];
    const NodeTopology& topo = topos[n.topo];
    if ((n.info.cpu_milli > 0 && v.cpu < req.cpu_milli) || (n.info.memory_bytes > 0 && v.host_mem < req.memory_bytes)) {
      return false;
    }
    const uint64_t others = not_for_it(ni);
    for (const ClassSlot& slot : n.classes) {
      if (!ClassMatches(req, slot.cls)) continue;
      if (req.fractional()) {
        for (uint64_t m = slot.mask & n.healthy & ~others; m != 0; m &= m - 1) {
          int g = std::countr_zero(m);
          if (v.milli[g] >= req.gpu_milli && v.mem[g] >= req.gpu_memory_bytes) {
            *out = Pick{ni, slot.cls, uint64_t{1} << g, req.gpu_milli, req.gpu_memory_bytes, Link::kFabric, 0};
            return true;
          }
        }
        continue;
      }
      uint64_t usable = v.whole_free & n.healthy & slot.mask & ~others;
      Topology within = (req.topology == Topology::kIsland || req.topology == Topology::kNuma) ? req.topology
                                                                                                : Topology::kBestEffort;
      Link q = Link::kFabric;
      uint64_t mask = topo.Choose(usable, req.gpus, within, &q);
      if (mask != 0) {
        *out = Pick{ni, slot.cls, mask, kWholeGpu, 0, q, 0};
        return true;
      }
    }
    return false;
  };

  // Whether no set of victims can make room for a replica on node `ni`
  // (`whole_free`: its whole free GPUs in the search's view): even with
  // every GPU that any victim could free, no GPU class has enough whole GPUs
  // outside others' nominations and the reservation. An upper bound, cheap
  // next to MayPreempt's tenant checks; fractional requests are not bounded
  // here.
  auto hopeless = [&](int ni, uint64_t whole_free) {
    if (req.fractional()) return false;
    const NodeState& n = nodes[ni];
    // Jobs bound in this pass count too: a looser bound, never a wrong one
    // (MayPreempt passes them over on the nodes not ruled out here).
    const uint64_t could_free = whole_free | n.victim_gpus;
    const uint64_t others = not_for_it(ni);
    for (const ClassSlot& slot : n.classes) {
      if (ClassMatches(req, slot.cls) && std::popcount(could_free & n.healthy & slot.mask & ~others) >= req.gpus) {
        return false;
      }
    }
    return true;
  };

  std::vector<int> cands;
  std::vector<int> added;
  for (int r = 0; r < req.replicas; ++r) {
    struct Best {
      int64_t lost = 0;
      int top_priority = 0;
      int64_t latest = 0;
      std::vector<int> victims;
      Pick pick;
    };
    std::optional<Best> best;
    // Only a rare selector's nodes can match (in index order, as the walk of
    // every node would meet them).
    const std::vector<int>* selected = SelectedNodes(req);
    const size_t walk = selected != nullptr ? selected->size() : nodes.size();
    for (size_t w = 0; w < walk; ++w) {
      const size_t ni = selected != nullptr ? static_cast<size_t>((*selected)[w]) : w;
      const NodeState& n = nodes[ni];
      if (!NodeMatches(req, n)) continue;
      // The bound first: it reads the node's masks and classes only, where
      // a view copies the free share and memory of every GPU.
      auto seen = views.find(static_cast<int>(ni));
      if (hopeless(static_cast<int>(ni), seen == views.end() ? n.whole_free : seen->second.whole_free)) continue;
      View base = seen == views.end() ? ViewOf(n) : seen->second;
      cands.clear();
      added.clear();
      for (int o : n.jobs) {
        if (MayPreempt(job, o, released, now) && std::find(chosen.begin(), chosen.end(), o) == chosen.end()) cands.push_back(o);
      }
      Pick p;
      bool ok = fit(static_cast<int>(ni), base, &p);
      if (!ok && cands.empty()) continue;
      std::sort(cands.begin(), cands.end(), [&](int a, int b) {
        const JobState& x = jobs[a];
        const JobState& y = jobs[b];
        if (x.priority != y.priority) return x.priority < y.priority;
        if (x.bound_ms != y.bound_ms) return x.bound_ms > y.bound_ms;
        if (x.req.milli() != y.req.milli()) return x.req.milli() < y.req.milli();
        return x.seq > y.seq;  // the later submission first
      });
      View v = base;
      std::map<std::pair<int, std::string>, int64_t> tally;  // `released`, copied only when victims are tried
      if (!ok) tally = released;
      for (size_t k = 0; !ok && k < cands.size(); ++k) {
        if (!MayPreempt(job, cands[k], tally, now)) continue;  // taking it too would break a guarantee
        release_tally(&tally, cands[k], +1);
        for (const Held& h : jobs[cands[k]].held) {
          if (h.node == static_cast<int>(ni)) Apply(&v, n, jobs[cands[k]].req, h, +1);
        }
        added.push_back(cands[k]);
        ok = fit(static_cast<int>(ni), v, &p);
      }
      if (!ok) continue;
      // Drop victims that turned out not to be needed, the most valuable first.
      for (size_t k = added.size(); k-- > 0;) {
        View without = base;
        for (size_t o = 0; o < added.size(); ++o) {
          if (o == k) continue;
          for (const Held& h : jobs[added[o]].held) {
            if (h.node == static_cast<int>(ni)) Apply(&without, n, jobs[added[o]].req, h, +1);
          }
        }
        Pick q;
        if (fit(static_cast<int>(ni), without, &q)) {
          added.erase(added.begin() + static_cast<std::ptrdiff_t>(k));
          p = q;
        }
      }
      Best b;
      b.pick = p;
      b.victims = added;
      for (int o : added) {
        b.lost += jobs[o].req.milli();
        b.top_priority = std::max(b.top_priority, jobs[o].req.priority);
        b.latest = std::max(b.latest, jobs[o].bound_ms);
      }
      auto key = [](const Best& x) { return std::make_tuple(x.lost, x.top_priority, -x.latest); };
      if (!best || key(b) < key(*best)) best = std::move(b);
      if (best->lost == 0) break;
    }
    if (!best) return false;
    for (int o : best->victims) {
      chosen.push_back(o);
      release_everywhere(o);
      release_tally(&released, o, +1);
    }
    View v = view_of(best->pick.node);
    Apply(&v, nodes[best->pick.node], req, Held{best->pick.node, best->pick.cls, best->pick.mask, best->pick.milli, best->pick.mem}, -1);
    views[best->pick.node] = v;
    picks.push_back(best->pick);
  }
  if (chosen.empty()) {
    // It fits without victims: on GPUs its placement left out, or where its
    // placement may not go (the search does not keep a switch or rack gang
    // in one domain). A failure to keep unless time alone may change it:
    // only the reservation reads the clock here (MayUseReserved), and not
    // when there is none, the job holds it, the job has no estimate, or the
    // reservation starts now (signed as such: Reserve). Kept, a switch gang
    // that no switch can take is not searched for again every pass while
    // nothing changes (each search walks every node per replica).
    const bool timeless = reservation_job < 0 || reservation_job == job || req.runtime_estimate_ms <= 0 ||
                          reservation_ms == now;
    if (!timeless) j.no_victims_epoch = 0;
    return false;
  }

  ClearNomination(job);
  for (int o : chosen) {
    JobState& v = jobs[o];
    MarkStopping(o);
    std::string reason;
    if (v.req.priority < j.req.priority) {
      reason = fmt::format("priority {} > {}", j.req.priority, v.req.priority);
    } else if (LasAhead(job, o, now)) {
      // Before the victim's attained service is settled by its release.
      reason = fmt::format("least attained service: level {} < {} ({:.2f} < {:.2f} GPU-hours)",
                           LasLevel(config, j.attained), LasLevel(config, AttainedNow(o, now)),
                           static_cast<double>(j.attained) / 3.6e6, static_cast<double>(AttainedNow(o, now)) / 3.6e6);
    } else {
      reason = fmt::format("tenant '{}' reclaims its guaranteed GPUs from borrowing tenant '{}'",
                           tenants[j.tenant].info.name, tenants[v.tenant].info.name);
    }
    d->preemptions.push_back(Preemption{v.req.id, req.id, std::move(reason), config.preemption_grace_ms});
    j.victims.push_back(v.req.id);
  }
  for (const Pick& p : picks) {
    nodes[p.node].nominated |= p.mask;
    ++nodes[p.node].version;
    j.nomination.emplace_back(p.node, p.mask);
    j.nominee = true;
  }
  ++preempt_epoch;
  j.why = Why{WhyCode::kAwaitingPreemption, -1, 0, now, picks.front().node, now};
  return true;
}

Status Scheduler::SetCheckpoint(const std::string& job_id, int64_t at_ms) {
  State& s = *s_;
  const int idx = s.FindJob(job_id);
  if (idx < 0 || s.jobs[idx].held.empty()) return NotFound(fmt::format("job '{}' is not bound", job_id));
  ++s.generation;  // a pass may now pick other victims
  s.jobs[idx].checkpoint_ms = at_ms;
  return Status::Ok();
}

}  // namespace drover::sched
