// Preemption: for a job that cannot be placed, the cheapest set of running
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
// Which set: the cheapest by a key of two parts. First the highest victim
// priority: a job of higher priority is never stopped to spare lower ones
// their work. Then the work lost: each victim's milli-GPUs times the time
// since its last checkpoint (Scheduler::SetCheckpoint), or since it started
// when none is known; then the milli-GPUs stopped.
//
// How: the domain is a switch or rack for a gang that asks for one (every
// replica in it), else every node the job may use. In it, per node, the
// replicas that fit with no victim and (a bound from the GPU masks) with
// every allowed victim up to each priority gone give the lowest priority
// threshold at which the job may fit (no set can have a lower highest
// priority; where the search below finds no set, the next threshold is
// tried). Under that threshold, an exact search per node over subsets of
// its victims, cheapest first, finds
// the cheapest set for each count of replicas there (pruned by cost and by
// what the remaining victims could free; kNodeSearchBudget sets at most,
// then it takes what it has); a knapsack over the nodes then finds the
// cheapest counts that add up to the gang. Switch and rack domains are
// searched the freest first (fewest victims needed), those that could not
// hold the gang with every preemptible job gone skipped, kPreemptDomains
// at most: exact over the domains searched, not over every domain of a
// large cluster. A domain whose lowest threshold is above the best set's
// highest priority, or whose work has a lower bound (the GPUs each node
// must free, from its candidates cheapest per GPU) above the best set's,
// is not searched further. One more exception: a victim with replicas on several
// nodes counts its whole cost on each node that takes it and frees only its
// GPUs there, so the set found lets the job fit but may cost more than the
// least. preemption_property_test checks minimality against an exhaustive
// search (single-node victims, a few switches).
//
// Worked example: node a runs p=10 x4 GPUs and p=20 x2 GPUs, node b runs
// p=10 x8 GPUs, all preemptible and started an hour ago. A p=100 job
// needs 6 GPUs. At threshold 10 it fits on a (2 free + the p=10 job's 4)
// and on b (8), so no set with the p=20 job is looked at. a's set loses 4
// GPU-hours, b's 8: a's p=10 job is stopped. Had it started three hours
// ago (12 GPU-hours), or b's job checkpointed a minute ago (8 GPU-minutes),
// b's job would lose less and be the one stopped.
#include <algorithm>
#include <bit>
#include <climits>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <optional>

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

int64_t SatAdd(int64_t a, int64_t b) { return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b; }

// What a set of victims loses, compared work first: milli-GPU x ms since
// each victim's last checkpoint (else its start), then milli-GPUs stopped.
// The highest victim priority comes before both (Plan::Before).
struct Cost {
  int64_t work = 0;
  int64_t milli = 0;
  bool operator<(const Cost& o) const { return work != o.work ? work < o.work : milli < o.milli; }
  Cost operator+(const Cost& o) const { return Cost{SatAdd(work, o.work), SatAdd(milli, o.milli)}; }
};

// The cheapest victims found on one node for some count of replicas.
struct Option {
  Cost cost;
  bool ok = false;  // a set was found
  std::vector<int> set;
};

// A node's part in a search of one domain: the replicas that fit with no
// victim, its candidate victims (a range of a shared vector, by priority
// ascending) and at most how many replicas could fit with every candidate
// up to each priority gone (a range of Steps, where that count rises; for
// whole GPUs a bound from the GPU masks, for shares the count itself).
struct NodePlan {
  int node = -1;
  int free_k = 0;
  size_t first = 0;
  size_t count = 0;
  size_t step_first = 0;
  size_t step_count = 0;
};
struct Step {
  int priority = 0;
  int k = 0;
};

// A domain's cheapest victims and where the replicas go.
struct Plan {
  int top = INT_MIN;  // the highest victim priority (INT_MIN: none)
  Cost cost;
  std::vector<int> victims;
  std::vector<std::pair<int, int>> replicas;  // (node, replicas there)
  bool Before(const Plan& o) const { return top != o.top ? top < o.top : cost < o.cost; }
};

// Candidate sets tried per node before the search settles for what it has.
constexpr int kNodeSearchBudget = 4096;
// Switch or rack domains searched per gang, the freest first.
constexpr int kPreemptDomains = 4;

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
  if (req.gpus == 0) return false;  // CPU-only work does not preempt
  const int replicas = req.replicas;
  using Tally = std::map<std::pair<int, std::string>, int64_t>;  // released by (tenant, model), for MayPreempt
  static const Tally kNone;
  auto release_tally = [&](Tally* tally, int victim, int sign) {
    for (const auto& [model, milli] : MilliByModel(victim)) (*tally)[{jobs[victim].tenant, model}] += sign * milli;
  };
  // GPUs of node `ni` the job may not have: nominated for other jobs, and
  // the reservation unless it may use it.
  // The search asks node by node, many times each: the last answer is kept.
  int others_node = -1;
  uint64_t others_mask = 0;
  auto not_for_it = [&](int ni) {
    if (ni == others_node) return others_mask;
    const NodeState& n = nodes[ni];
    uint64_t others = n.nominated;
    for (const auto& [nd, mine] : j.nomination) {
      if (nd == ni) others &= ~mine;
    }
    if (n.reserved != 0 && !MayUseReserved(job, now)) others |= n.reserved;
    others_node = ni;
    others_mask = others;
    return others;
  };
  // Where on node `ni` one replica of the job fits within `v`, if anywhere.
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
      Topology within = WithinNode(req.topology);
      Link q = Link::kFabric;
      uint64_t mask = topo.Choose(usable, req.gpus, within, &q);
      if (mask != 0) {
        *out = Pick{ni, slot.cls, mask, kWholeGpu, 0, q, 0};
        return true;
      }
    }
    return false;
  };
  auto place = [&](View* v, const Pick& p) {
    Apply(v, nodes[p.node], req, Held{p.node, p.cls, p.mask, p.milli, p.mem}, -1);
  };
  // At least as many replicas as node `ni` could take were the GPUs of
  // `could` free (whole GPUs, outside others' nominations and the
  // reservation; a share is not bounded). Reads masks only: cheap next to
  // MayPreempt's tenant checks and a view's copy.
  auto bound = [&](int ni, uint64_t could) {
    if (req.fractional()) return replicas;
    const NodeState& n = nodes[ni];
    const uint64_t usable = could & n.healthy & ~not_for_it(ni);
    int k = 0;
    for (const ClassSlot& slot : n.classes) {
      if (ClassMatches(req, slot.cls)) k += std::popcount(usable & slot.mask) / req.gpus;
    }
    return k;
  };
  // Replicas of the job that fit on node `ni` within `v`, one after the
  // other, up to `most`.
  auto count_fits = [&](int ni, const View& v, int most) {
    Pick p;
    if (!req.fractional()) most = std::min(most, bound(ni, v.whole_free));  // cheaper than a fit
    if (most <= 0 || !fit(ni, v, &p)) return 0;
    if (most == 1) return 1;
    View w = v;
    int k = 0;
    do {
      place(&w, p);
      ++k;
    } while (k < most && fit(ni, w, &p));
    return k;
  };
  // What stopping `o` loses: its milli-GPUs times the time since its last
  // checkpoint, or since it started when none is known.
  auto lost = [&](int o) {
    const JobState& v = jobs[o];
    const int64_t ms = std::max<int64_t>(0, now - std::max(v.bound_ms, v.checkpoint_ms));
    const int64_t milli = v.req.milli();
    return Cost{ms > 0 && milli > INT64_MAX / ms ? INT64_MAX : milli * ms, milli};
  };
  auto apply_on = [&](View* v, int ni, int o, int sign) {
    for (const Held& h : jobs[o].held) {
      if (h.node == ni) Apply(v, nodes[ni], jobs[o].req, h, sign);
    }
  };
  // Whether taking `o` may take its tenant below a guarantee together with
  // other victims (MayPreempt then depends on the set, not on `o` alone).
  auto coupled = [&](int o) {
    return jobs[o].tenant != j.tenant && !tenants[jobs[o].tenant].info.guaranteed_gpus.empty();
  };

  // ---- one domain (a switch, a rack, or every node the job may use) ----
  std::vector<NodePlan> plans;
  std::vector<int> cands;   // per plan, by priority ascending
  std::vector<Step> steps;  // per plan, by priority ascending
  auto fits_at = [&](const NodePlan& np, int p) {
    int k = np.free_k;
    for (size_t s = np.step_first; s < np.step_first + np.step_count && steps[s].priority <= p; ++s) k = steps[s].k;
    return k;
  };
  std::vector<std::pair<Cost, int>> ranked;
  std::vector<int> order;
  std::vector<Cost> order_cost;
  std::vector<uint64_t> suffix;
  std::vector<int> set;
  // The cheapest victims of priority <= `p` on plan `np`'s node for each
  // count of replicas up to `most` ((*best)[k]); `cap`: a cost the caller
  // already has, not worth matching.
  auto search = [&](const NodePlan& np, int p, int most, const Cost* cap, std::vector<Option>* best) {
    const int ni = np.node;
    best->resize(static_cast<size_t>(most) + 1);  // reused: the sets keep their storage
    for (size_t k = 0; k < best->size(); ++k) {
      (*best)[k].ok = static_cast<int>(k) <= np.free_k;
      (*best)[k].cost = Cost{};
      (*best)[k].set.clear();
    }
    if (np.free_k >= most) return;
    ranked.clear();
    for (size_t a = np.first; a < np.first + np.count && jobs[cands[a]].priority <= p; ++a) {
      ranked.emplace_back(lost(cands[a]), cands[a]);
    }
    std::sort(ranked.begin(), ranked.end(), [&](const auto& x, const auto& y) {
      if (x.first < y.first || y.first < x.first) return x.first < y.first;
      return jobs[x.second].seq > jobs[y.second].seq;
    });
    order.clear();
    order_cost.clear();
    for (const auto& [c, o] : ranked) {
      order.push_back(o);
      order_cost.push_back(c);
    }
    suffix.assign(order.size() + 1, 0);
    for (size_t i = order.size(); i-- > 0;) {
      suffix[i] = suffix[i + 1];
      for (const Held& h : jobs[order[i]].held) {
        if (h.node == ni) suffix[i] |= h.mask;
      }
    }
    const bool any_coupled = std::any_of(order.begin(), order.end(), coupled);
    Tally tally;
    View v = ViewOf(nodes[ni]);
    set.clear();
    int budget = kNodeSearchBudget;
    // Include-or-exclude over the candidates, cheapest first. A branch
    // stops when its set fits `most` replicas (more victims only cost
    // more), when even its cheapest extension costs at least the best set
    // for `most`, or when every remaining candidate gone would not fit one
    // more replica than the set already does.
    auto dfs = [&](auto& self, size_t i, Cost cur, int fits) -> void {
      for (int k = np.free_k + 1; k <= fits; ++k) {
        Option& o = (*best)[k];
        if (!o.ok || cur < o.cost) {
          o.cost = cur;
          o.ok = true;
          o.set.assign(set.begin(), set.end());
        }
      }
      if (fits >= most || i == order.size() || --budget < 0) return;
      const Option& full = (*best)[most];
      const Cost* ceiling = full.ok ? &full.cost : cap;
      if (ceiling != nullptr && !(cur + order_cost[i] < *ceiling)) return;
      if (!req.fractional() && bound(ni, v.whole_free | suffix[i]) <= fits) return;
      const int o = order[i];
      if (!any_coupled || MayPreempt(job, o, tally, now)) {
        apply_on(&v, ni, o, +1);
        if (any_coupled) release_tally(&tally, o, +1);
        set.push_back(o);
        self(self, i + 1, cur + order_cost[i], count_fits(ni, v, most));
        set.pop_back();
        if (any_coupled) release_tally(&tally, o, -1);
        apply_on(&v, ni, o, -1);
      }
      self(self, i + 1, cur, fits);
    };
    dfs(dfs, 0, Cost{}, np.free_k);
    if (budget >= 0 || any_coupled) return;
    // Out of budget before every count was reached: all the candidates,
    // for the counts they reach.
    Cost all;
    for (const Cost& c : order_cost) all = all + c;
    View every = ViewOf(nodes[ni]);
    for (int o : order) apply_on(&every, ni, o, +1);
    const int reach = count_fits(ni, every, most);
    for (int k = np.free_k + 1; k <= reach; ++k) {
      if (!(*best)[k].ok) (*best)[k] = Option{all, true, order};
    }
  };
  std::vector<std::vector<Option>> options;
  std::vector<size_t> used;
  std::vector<int> take, prev;  // per (used plan, replicas so far)
  auto finish = [&](Plan* plan) {  // dedup, cost and check the set as a whole
    std::sort(plan->victims.begin(), plan->victims.end(), [&](int a, int b) {
      return jobs[a].priority != jobs[b].priority ? jobs[a].priority < jobs[b].priority : jobs[a].seq < jobs[b].seq;
    });
    plan->victims.erase(std::unique(plan->victims.begin(), plan->victims.end()), plan->victims.end());
    const bool any_coupled = std::any_of(plan->victims.begin(), plan->victims.end(), coupled);
    Tally tally;
    for (int o : plan->victims) {
      if (coupled(o) && !MayPreempt(job, o, tally, now)) return false;  // together they break a guarantee
      if (any_coupled) release_tally(&tally, o, +1);
      plan->top = std::max(plan->top, jobs[o].priority);
      plan->cost = plan->cost + lost(o);
    }
    return true;
  };
  // A lower bound on the work a gang's victims of priority <= `p` lose in
  // the domain just walked (whole GPUs): per node, the GPUs it must free for
  // k replicas (k x GPUs per replica less its usable free GPUs), taken from
  // its candidates cheapest per GPU with the last one in part (the
  // fractional knapsack, never above the least whole set), then the
  // cheapest counts that add up. A victim on several nodes counts 0 (its
  // cost is paid once).
  __extension__ using Wide = __int128;
  std::vector<std::pair<int64_t, int>> per_gpu;  // (work, GPUs here)
  std::vector<int64_t> lb_dp, lb_next;
  auto work_bound = [&](int p) {
    const int64_t kInf = INT64_MAX;
    const size_t width = static_cast<size_t>(replicas) + 1;
    lb_dp.assign(width, kInf);
    lb_dp[0] = 0;
    for (const NodePlan& np : plans) {
      const int most = std::min(replicas, fits_at(np, p));
      if (most == 0) continue;
      const int ni = np.node;
      const NodeState& n = nodes[ni];
      const uint64_t usable = n.healthy & ~not_for_it(ni);
      uint64_t class_mask = 0;
      for (const ClassSlot& slot : n.classes) class_mask |= ClassMatches(req, slot.cls) ? slot.mask : 0;
      const int free = std::popcount(n.whole_free & usable & class_mask);
      per_gpu.clear();
      for (size_t a = np.first; a < np.first + np.count && jobs[cands[a]].priority <= p; ++a) {
        const int o = cands[a];
        uint64_t here = 0;
        bool elsewhere = false;
        for (const Held& h : jobs[o].held) {
          if (h.node == ni) {
            here |= h.mask;
          } else {
            elsewhere = true;
          }
        }
        const int gpus = std::popcount(here & usable & class_mask);
        if (gpus > 0) per_gpu.emplace_back(elsewhere ? 0 : lost(o).work, gpus);
      }
      std::sort(per_gpu.begin(), per_gpu.end(), [](const auto& x, const auto& y) {
        return Wide{x.first} * y.second < Wide{y.first} * x.second;
      });
      lb_next = lb_dp;
      for (int k = 1; k <= most; ++k) {
        int need = k * req.gpus - free;
        int64_t work = 0;
        for (size_t i = 0; i < per_gpu.size() && need > 0; ++i) {
          const auto [w, g] = per_gpu[i];
          if (g <= need) {
            work = SatAdd(work, w);
          } else {  // floor(w x need / g), without overflow (need < g)
            work = SatAdd(work, (w / g) * need + (w % g) * need / g);
          }
          need -= std::min(need, g);
        }
        if (need > 0) break;  // even every candidate gone frees too few GPUs
        for (size_t r = 0; r < width; ++r) {
          if (lb_dp[r] == kInf) continue;
          const size_t to = std::min(width - 1, r + static_cast<size_t>(k));
          lb_next[to] = std::min(lb_next[to], SatAdd(lb_dp[r], work));
        }
      }
      lb_dp.swap(lb_next);
    }
    return lb_dp[width - 1];
  };
  // `incumbent`: the best plan of the domains searched before; a domain
  // that cannot beat it by priority, or by the work bound, is not searched.
  auto evaluate = [&](const std::vector<int>* within, const Plan* incumbent) -> std::optional<Plan> {
    plans.clear();
    cands.clear();
    steps.clear();
    int free_total = 0;
    ForEachNode(within, [&](int ni) {
      const NodeState& n = nodes[ni];
      if (!NodeMatches(req, n) || bound(ni, n.whole_free | n.victim_gpus) == 0) return;
      // A view only where something may fit in it: shares, or enough whole
      // free GPUs (on a full cluster most nodes have neither).
      const bool viewed = req.fractional() || bound(ni, n.whole_free) > 0;
      View v;
      if (viewed) v = ViewOf(n);
      NodePlan np;
      np.node = ni;
      np.free_k = viewed ? count_fits(ni, v, replicas) : 0;
      np.first = cands.size();
      for (int o : n.jobs) {
        if (MayPreempt(job, o, kNone, now)) cands.push_back(o);
      }
      np.count = cands.size() - np.first;
      if (np.count == 0 && np.free_k == 0) {
        return;
      }
      std::sort(cands.begin() + static_cast<std::ptrdiff_t>(np.first), cands.end(),
                [&](int a, int b) { return jobs[a].priority < jobs[b].priority; });
      np.step_first = steps.size();
      uint64_t could = n.whole_free;
      int last = np.free_k;
      for (size_t a = np.first; a < cands.size() && last < replicas;) {
        const int p = jobs[cands[a]].priority;
        for (; a < cands.size() && jobs[cands[a]].priority == p; ++a) {
          if (req.fractional()) {
            apply_on(&v, ni, cands[a], +1);
          } else {
            for (const Held& h : jobs[cands[a]].held) could |= h.node == ni ? h.mask : 0;
          }
        }
        // Whole GPUs: the masks' bound (the search finds the true count);
        // a share: the count itself.
        const int k = req.fractional() ? count_fits(ni, v, replicas) : std::min(replicas, bound(ni, could));
        if (k > last) {
          steps.push_back(Step{p, k});
          last = k;
        }
      }
      np.step_count = steps.size() - np.step_first;
      free_total += np.free_k;
      plans.push_back(np);
    });
    if (free_total >= replicas) {  // room without victims
      Plan plan;
      for (const NodePlan& np : plans) {
        if (np.free_k > 0) plan.replicas.emplace_back(np.node, np.free_k);
      }
      return plan;
    }
    // Priority thresholds, lowest first: below the first at which every
    // victim allowed could let the job fit, the highest victim priority
    // cannot be; the bound may promise more than the search then finds, so
    // each later one is tried in turn.
    std::vector<int> thresholds;
    for (int o : cands) thresholds.push_back(jobs[o].priority);
    std::sort(thresholds.begin(), thresholds.end());
    thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
    for (int p : thresholds) {
      int total = 0;
      for (const NodePlan& np : plans) total += fits_at(np, p);
      if (total < replicas) continue;
      // The domain's highest victim priority is at least p here.
      if (incumbent != nullptr && p > incumbent->top) return std::nullopt;
      if (incumbent != nullptr && p == incumbent->top && replicas > 1 && !req.fractional() &&
          work_bound(p) > incumbent->cost.work) {
        return std::nullopt;
      }
      Plan plan;
      if (replicas == 1) {
        // One replica: the cheapest node, each search capped by the best so far.
        Option best;
        int best_node = -1;
        if (options.empty()) options.emplace_back();
        std::vector<Option>& opt = options[0];
        for (const NodePlan& np : plans) {
          if (fits_at(np, p) == 0) continue;
          search(np, p, 1, best.ok ? &best.cost : nullptr, &opt);
          if (opt[1].ok && (!best.ok || opt[1].cost < best.cost)) {
            std::swap(best, opt[1]);
            best_node = np.node;
          }
        }
        if (!best.ok) continue;
        plan.victims = std::move(best.set);
        plan.replicas.emplace_back(best_node, 1);
      } else {
        // A gang: the cheapest victims per node for each count of replicas
        // there, then the cheapest counts that add up (a knapsack over the
        // nodes: costs add, since each node's victims are its own).
        used.clear();
        for (size_t u = 0; u < plans.size(); ++u) {
          const int most = std::min(replicas, fits_at(plans[u], p));
          if (most == 0) continue;
          if (options.size() == used.size()) options.emplace_back();  // kept across searches
          search(plans[u], p, most, nullptr, &options[used.size()]);
          used.push_back(u);
        }
        const size_t width = static_cast<size_t>(replicas) + 1;
        const Cost kInf{INT64_MAX, INT64_MAX};
        std::vector<Cost> dp(width, kInf), next;
        dp[0] = Cost{};
        take.assign(used.size() * width, 0);
        prev.assign(used.size() * width, 0);
        for (size_t u = 0; u < used.size(); ++u) {
          next = dp;
          for (size_t r = 0; r < width; ++r) prev[u * width + r] = static_cast<int>(r);
          for (size_t r = 0; r < width; ++r) {
            if (!(dp[r] < kInf)) continue;
            for (size_t k = 1; k < options[u].size(); ++k) {
              if (!options[u][k].ok) continue;
              const size_t to = std::min(width - 1, r + k);
              const Cost c = dp[r] + options[u][k].cost;
              if (c < next[to]) {
                next[to] = c;
                take[u * width + to] = static_cast<int>(k);
                prev[u * width + to] = static_cast<int>(r);
              }
            }
          }
          dp.swap(next);
        }
        if (!(dp[width - 1] < kInf)) continue;
        for (size_t u = used.size(), r = width - 1; u-- > 0;) {
          const int k = take[u * width + r];
          if (k > 0) {
            plan.replicas.emplace_back(plans[used[u]].node, k);
            const std::vector<int>& s = options[u][static_cast<size_t>(k)].set;
            plan.victims.insert(plan.victims.end(), s.begin(), s.end());
          }
          r = static_cast<size_t>(prev[u * width + r]);
        }
      }
      if (finish(&plan)) return plan;
    }
    return std::nullopt;
  };

  // ---- which domains ----
  std::optional<Plan> best;
  if (replicas > 1 && (req.topology == Topology::kSwitch || req.topology == Topology::kRack)) {
    // Every replica in one domain: the domains with the most free GPUs the
    // job accepts first (the fewest victims needed), those that could not
    // hold the gang with every preemptible job gone left out, at most
    // kPreemptDomains searched.
    const int level = req.topology == Topology::kSwitch ? 0 : 1;
    std::vector<int> matching;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (ClassMatches(req, static_cast<int>(c))) matching.push_back(static_cast<int>(c));
    }
    std::vector<std::pair<int64_t, int>> by_free;
    for (int dm : level_domains[level]) {
      int64_t free = 0;
      for (int c : matching) free += domains[dm].free_by_class[c];
      by_free.emplace_back(-free, dm);
    }
    // A heap: only the first few are taken (a full sort of a large
    // cluster's domains costs more than the search).
    std::make_heap(by_free.begin(), by_free.end(), std::greater<>());
    int searched = 0;
    while (!by_free.empty() && searched < kPreemptDomains) {
      std::pop_heap(by_free.begin(), by_free.end(), std::greater<>());
      const int dm = by_free.back().second;
      by_free.pop_back();
      int could = 0;
      for (int ni : domains[dm].nodes) {
        const NodeState& n = nodes[ni];
        if (NodeMatches(req, n)) could += bound(ni, n.whole_free | n.victim_gpus);
        if (could >= replicas) break;
      }
      if (could < replicas) continue;
      ++searched;
      std::optional<Plan> plan = evaluate(&domains[dm].nodes, best ? &*best : nullptr);
      if (plan && (!best || plan->Before(*best))) best = std::move(plan);
      if (best && best->victims.empty()) break;
    }
  } else {
    best = evaluate(SelectedNodes(req), nullptr);
  }
  if (!best) return false;
  if (best->victims.empty()) {
    // It fits without victims: on GPUs its placement left out (a
    // nomination, the reservation, or a switch or rack beyond those its
    // placement tries). A failure to keep unless time alone may change it:
    // only the reservation reads the clock here (MayUseReserved), and not
    // when there is none, the job holds it, the job has no estimate, or the
    // reservation starts now (signed as such: Reserve). Kept, a gang the
    // search would send where its placement does not go is not searched
    // for again every pass while nothing changes.
    const bool timeless = reservation_job < 0 || reservation_job == job || req.runtime_estimate_ms <= 0 ||
                          reservation_ms == now;
    if (!timeless) j.no_victims_epoch = 0;
    return false;
  }
  std::vector<Pick> picks;
  for (const auto& [ni, k] : best->replicas) {
    View v = ViewOf(nodes[ni]);
    for (int o : best->victims) apply_on(&v, ni, o, +1);
    for (int r = 0; r < k; ++r) {
      Pick p;
      if (!fit(ni, v, &p)) return false;  // cannot happen: the search fitted them so
      place(&v, p);
      picks.push_back(p);
    }
  }
  const std::vector<int>& chosen = best->victims;

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
