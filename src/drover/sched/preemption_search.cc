// PreemptionSearch (preemption_search.h): the cheapest victims for a job
// that cannot be placed. Who may be a victim and the cost key: preemption.cc.
#include "drover/sched/preemption_search.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace drover::sched {
namespace {

// Candidate sets tried per node before the search settles for what it has.
constexpr int kNodeSearchBudget = 4096;
// Switch or rack domains searched per gang, the freest first.
constexpr int kPreemptDomains = 4;

__extension__ using Wide = __int128;

int64_t Capacity(const NodeState& n, int g) {
  return g < static_cast<int>(n.info.gpus.size()) ? n.info.gpus[g].memory_bytes : 0;
}

}  // namespace

// What Descend reads and changes, for one node: the node's plan, the counts
// asked, the best sets so far, and the view and tally of the current set.
struct PreemptionSearch::NodeSearch {
  const NodePlan& np;
  const int most;
  const Cost* const cap;  // a cost the caller already has, not worth matching
  std::vector<Option>* const best;
  const bool any_coupled;  // whether MayPreempt depends on the set (Coupled)
  Tally tally;             // what the current set releases, when any_coupled
  View v;                  // the node with the current set gone
  int budget = kNodeSearchBudget;
};

PreemptionSearch::PreemptionSearch(const State& s, int job, int64_t now)
    : s_(s), job_(job), now_(now), j_(s.jobs[job]), req_(j_.req), replicas_(req_.replicas) {}

// Copies only the node's own GPUs: see View.
PreemptionSearch::View PreemptionSearch::ViewOf(const NodeState& n) {
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

// Gives back (sign +1) or takes (-1) what `h` of `owner` holds, as Release
// and Hold would, on the view only.
void PreemptionSearch::Apply(View* v, const NodeState& n, const JobRequest& owner, const Held& h, int sign) {
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

// GPUs of node `ni` the job may not have: nominated for other jobs, and
// the reservation unless it may use it. The search asks node by node, many
// times each: the last answer is kept.
uint64_t PreemptionSearch::NotForIt(int ni) const {
  if (ni == others_node_) return others_mask_;
  const NodeState& n = s_.nodes[ni];
  uint64_t others = n.nominated;
  for (const auto& [nd, mine] : j_.nomination) {
    if (nd == ni) others &= ~mine;
  }
  if (n.reserved != 0 && !s_.MayUseReserved(job_, now_)) others |= n.reserved;
  others_node_ = ni;
  others_mask_ = others;
  return others;
}

// Where on node `ni` one replica of the job fits within `v`, if anywhere:
// placement's rules on a view, so that victims can be taken away first.
bool PreemptionSearch::Fit(int ni, const View& v, Pick* out) const {
  const NodeState& n = s_.nodes[ni];
  const NodeTopology& topo = s_.topos[n.topo];
  if ((n.info.cpu_milli > 0 && v.cpu < req_.cpu_milli) || (n.info.memory_bytes > 0 && v.host_mem < req_.memory_bytes)) {
    return false;
  }
  const uint64_t others = NotForIt(ni);
  for (const ClassSlot& slot : n.classes) {
    if (!s_.ClassMatches(req_, slot.cls)) continue;
    if (req_.fractional()) {
      for (uint64_t m = slot.mask & n.healthy & ~others; m != 0; m &= m - 1) {
        int g = std::countr_zero(m);
        if (v.milli[g] >= req_.gpu_milli && v.mem[g] >= req_.gpu_memory_bytes) {
          *out = Pick{ni, slot.cls, uint64_t{1} << g, req_.gpu_milli, req_.gpu_memory_bytes, Link::kFabric, 0};
          return true;
        }
      }
      continue;
    }
    uint64_t usable = v.whole_free & n.healthy & slot.mask & ~others;
    Topology within = WithinNode(req_.topology);
    Link q = Link::kFabric;
    uint64_t mask = topo.Choose(usable, req_.gpus, within, &q);
    if (mask != 0) {
      *out = Pick{ni, slot.cls, mask, kWholeGpu, 0, q, 0};
      return true;
    }
  }
  return false;
}

// Takes a pick's resources from the view: the next replica sees them gone.
void PreemptionSearch::Place(View* v, const Pick& p) const {
  Apply(v, s_.nodes[p.node], req_, Held{p.node, p.cls, p.mask, p.milli, p.mem}, -1);
}

// At least as many replicas as node `ni` could take were the GPUs of
// `could` free (whole GPUs, outside others' nominations and the
// reservation; a share is not bounded). Reads masks only: cheap next to
// MayPreempt's tenant checks and a view's copy, so it prunes before them.
int PreemptionSearch::Bound(int ni, uint64_t could) const {
  if (req_.fractional()) return replicas_;
  const NodeState& n = s_.nodes[ni];
  const uint64_t usable = could & n.healthy & ~NotForIt(ni);
  int k = 0;
  for (const ClassSlot& slot : n.classes) {
    if (s_.ClassMatches(req_, slot.cls)) k += std::popcount(usable & slot.mask) / req_.gpus;
  }
  return k;
}

// Replicas of the job that fit on node `ni` within `v`, one after the
// other, up to `most`: the true count that Bound only bounds.
int PreemptionSearch::CountFits(int ni, const View& v, int most) const {
  Pick p;
  if (!req_.fractional()) most = std::min(most, Bound(ni, v.whole_free));  // cheaper than a fit
  if (most <= 0 || !Fit(ni, v, &p)) return 0;
  if (most == 1) return 1;
  View w = v;
  int k = 0;
  do {
    Place(&w, p);
    ++k;
  } while (k < most && Fit(ni, w, &p));
  return k;
}

// What stopping `o` loses: its milli-GPUs times the time since its last
// checkpoint, or since it started when none is known (the cost key).
PreemptionSearch::Cost PreemptionSearch::Lost(int o) const {
  const JobState& v = s_.jobs[o];
  const int64_t ms = std::max<int64_t>(0, now_ - std::max(v.bound_ms, v.checkpoint_ms));
  const int64_t milli = v.req.milli();
  return Cost{ms > 0 && milli > INT64_MAX / ms ? INT64_MAX : milli * ms, milli};
}

// Gives back (+1) or takes again (-1) what victim `o` holds on node `ni`:
// the view of the node with `o` gone, only there.
void PreemptionSearch::ApplyOn(View* v, int ni, int o, int sign) const {
  for (const Held& h : s_.jobs[o].held) {
    if (h.node == ni) Apply(v, s_.nodes[ni], s_.jobs[o].req, h, sign);
  }
}

// Whether taking `o` may take its tenant below a guarantee together with
// other victims (MayPreempt then depends on the set, not on `o` alone).
bool PreemptionSearch::Coupled(int o) const {
  return s_.jobs[o].tenant != j_.tenant && !s_.tenants[s_.jobs[o].tenant].info.guaranteed_gpus.empty();
}

// Counts (+1) or uncounts (-1) what `victim` would release, so that
// MayPreempt judges the next victim with the set's earlier ones gone.
void PreemptionSearch::ReleaseTally(Tally* tally, int victim, int sign) const {
  for (const auto& [model, milli] : s_.MilliByModel(victim)) (*tally)[{s_.jobs[victim].tenant, model}] += sign * milli;
}

// The cheapest victims of priority <= `p` on plan `np`'s node for each
// count of replicas up to `most` ((*best)[k]); `cap`: a cost the caller
// already has, not worth matching. Exact but for kNodeSearchBudget: a
// node's victims are its own, so the knapsack over nodes can add them up.
void PreemptionSearch::SearchNode(const NodePlan& np, int p, int most, const Cost* cap, std::vector<Option>* best) {
  best->resize(static_cast<size_t>(most) + 1);  // reused: the sets keep their storage
  for (size_t k = 0; k < best->size(); ++k) {
    (*best)[k].ok = static_cast<int>(k) <= np.free_k;
    (*best)[k].cost = Cost{};
    (*best)[k].set.clear();
  }
  if (np.free_k >= most) return;
  RankCandidates(np, p);
  const bool any_coupled = std::any_of(order_.begin(), order_.end(), [this](int o) { return Coupled(o); });
  NodeSearch ns{np, most, cap, best, any_coupled, Tally{}, ViewOf(s_.nodes[np.node])};
  set_.clear();
  Descend(ns, 0, Cost{}, np.free_k);
  if (ns.budget >= 0 || any_coupled) return;
  TakeEveryCandidate(np, most, best);
}

// order_ / order_cost_: the node's candidates of priority <= `p`, cheapest
// first (ties: the newest first), so that the first sets Descend completes
// are cheap and prune the rest; suffix_[i]: the GPUs order_[i..] hold
// there, for Descend's bound on what the remaining ones could free.
void PreemptionSearch::RankCandidates(const NodePlan& np, int p) {
  const std::vector<JobState>& jobs = s_.jobs;
  ranked_.clear();
  for (size_t a = np.first; a < np.first + np.count && jobs[cands_[a]].priority <= p; ++a) {
    ranked_.emplace_back(Lost(cands_[a]), cands_[a]);
  }
  std::sort(ranked_.begin(), ranked_.end(), [&](const auto& x, const auto& y) {
    if (x.first < y.first || y.first < x.first) return x.first < y.first;
    return jobs[x.second].seq > jobs[y.second].seq;
  });
  order_.clear();
  order_cost_.clear();
  for (const auto& [c, o] : ranked_) {
    order_.push_back(o);
    order_cost_.push_back(c);
  }
  suffix_.assign(order_.size() + 1, 0);
  for (size_t i = order_.size(); i-- > 0;) {
    suffix_[i] = suffix_[i + 1];
    for (const Held& h : jobs[order_[i]].held) {
      if (h.node == np.node) suffix_[i] |= h.mask;
    }
  }
}

// Include-or-exclude over the candidates from order_[i] on, `cur` the cost
// of set_ and `fits` the replicas it lets fit. A branch stops when its set
// fits `most` replicas (more victims only cost more), when even its
// cheapest extension costs at least the best set for `most`, or when every
// remaining candidate gone would not fit one more replica than the set
// already does.
void PreemptionSearch::Descend(NodeSearch& ns, size_t i, Cost cur, int fits) {
  const int ni = ns.np.node;
  for (int k = ns.np.free_k + 1; k <= fits; ++k) {
    Option& o = (*ns.best)[k];
    if (!o.ok || cur < o.cost) {
      o.cost = cur;
      o.ok = true;
      o.set.assign(set_.begin(), set_.end());
    }
  }
  if (fits >= ns.most || i == order_.size() || --ns.budget < 0) return;
  const Option& full = (*ns.best)[ns.most];
  const Cost* ceiling = full.ok ? &full.cost : ns.cap;
  if (ceiling != nullptr && !(cur + order_cost_[i] < *ceiling)) return;
  if (!req_.fractional() && Bound(ni, ns.v.whole_free | suffix_[i]) <= fits) return;
  const int o = order_[i];
  if (!ns.any_coupled || s_.MayPreempt(job_, o, ns.tally, now_)) {
    ApplyOn(&ns.v, ni, o, +1);
    if (ns.any_coupled) ReleaseTally(&ns.tally, o, +1);
    set_.push_back(o);
    Descend(ns, i + 1, cur + order_cost_[i], CountFits(ni, ns.v, ns.most));
    set_.pop_back();
    if (ns.any_coupled) ReleaseTally(&ns.tally, o, -1);
    ApplyOn(&ns.v, ni, o, -1);
  }
  Descend(ns, i + 1, cur, fits);
}

// Out of budget before every count was reached: all the candidates, for
// the counts they reach (a set that fits, if not the cheapest).
void PreemptionSearch::TakeEveryCandidate(const NodePlan& np, int most, std::vector<Option>* best) const {
  const int ni = np.node;
  Cost all;
  for (const Cost& c : order_cost_) all = all + c;
  View every = ViewOf(s_.nodes[ni]);
  for (int o : order_) ApplyOn(&every, ni, o, +1);
  const int reach = CountFits(ni, every, most);
  for (int k = np.free_k + 1; k <= reach; ++k) {
    if (!(*best)[k].ok) (*best)[k] = Option{all, true, order_};
  }
}

// One domain (a switch, a rack, or every node the job may use: `within`,
// null for every node). `incumbent`: the best plan of the domains searched
// before; a domain that cannot beat it by priority, or by the work bound,
// is not searched.
std::optional<PreemptionSearch::Plan> PreemptionSearch::Evaluate(const std::vector<int>* within,
                                                                 const Plan* incumbent) {
  if (Walk(within) >= replicas_) {  // room without victims
    Plan plan;
    for (const NodePlan& np : plans_) {
      if (np.free_k > 0) plan.replicas.emplace_back(np.node, np.free_k);
    }
    return plan;
  }
  // Priority thresholds, lowest first: below the first at which every
  // victim allowed could let the job fit, the highest victim priority
  // cannot be; the bound may promise more than the search then finds, so
  // each later one is tried in turn.
  std::vector<int> thresholds;
  for (int o : cands_) thresholds.push_back(s_.jobs[o].priority);
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  for (int p : thresholds) {
    int total = 0;
    for (const NodePlan& np : plans_) total += FitsAt(np, p);
    if (total < replicas_) continue;
    // The domain's highest victim priority is at least p here.
    if (incumbent != nullptr && p > incumbent->top) return std::nullopt;
    if (incumbent != nullptr && p == incumbent->top && replicas_ > 1 && !req_.fractional() &&
        WorkBound(p) > incumbent->cost.work) {
      return std::nullopt;
    }
    Plan plan;
    if (replicas_ == 1 ? !OneReplica(p, &plan) : !Gang(p, &plan)) continue;
    if (Finish(&plan)) return plan;
  }
  return std::nullopt;
}

// Fills plans_, cands_ and steps_ for the nodes of `within` (AddNode);
// returns the replicas that fit there with no victim.
int PreemptionSearch::Walk(const std::vector<int>* within) {
  plans_.clear();
  cands_.clear();
  steps_.clear();
  int free_total = 0;
  s_.ForEachNode(within, [&](int ni) { free_total += AddNode(ni); });
  return free_total;
}

// Node `ni`'s NodePlan, when it may take a replica with or without victims:
// what fits now, its candidates, and the priorities at which what may fit
// rises (the thresholds' bound). Returns the replicas that fit now.
int PreemptionSearch::AddNode(int ni) {
  const std::vector<JobState>& jobs = s_.jobs;
  const NodeState& n = s_.nodes[ni];
  if (!s_.NodeMatches(req_, n) || Bound(ni, n.whole_free | n.victim_gpus) == 0) return 0;
  // A view only where something may fit in it: shares, or enough whole
  // free GPUs (on a full cluster most nodes have neither).
  const bool viewed = req_.fractional() || Bound(ni, n.whole_free) > 0;
  View v;
  if (viewed) v = ViewOf(n);
  NodePlan np;
  np.node = ni;
  np.free_k = viewed ? CountFits(ni, v, replicas_) : 0;
  np.first = cands_.size();
  for (int o : n.jobs) {
    if (s_.MayPreempt(job_, o, none_released_, now_)) cands_.push_back(o);
  }
  np.count = cands_.size() - np.first;
  if (np.count == 0 && np.free_k == 0) {
    return 0;
  }
  std::sort(cands_.begin() + static_cast<std::ptrdiff_t>(np.first), cands_.end(),
            [&](int a, int b) { return jobs[a].priority < jobs[b].priority; });
  np.step_first = steps_.size();
  uint64_t could = n.whole_free;
  int last = np.free_k;
  for (size_t a = np.first; a < cands_.size() && last < replicas_;) {
    const int p = jobs[cands_[a]].priority;
    for (; a < cands_.size() && jobs[cands_[a]].priority == p; ++a) {
      if (req_.fractional()) {
        ApplyOn(&v, ni, cands_[a], +1);
      } else {
        for (const Held& h : jobs[cands_[a]].held) could |= h.node == ni ? h.mask : 0;
      }
    }
    // Whole GPUs: the masks' bound (the search finds the true count);
    // a share: the count itself.
    const int k = req_.fractional() ? CountFits(ni, v, replicas_) : std::min(replicas_, Bound(ni, could));
    if (k > last) {
      steps_.push_back(Step{p, k});
      last = k;
    }
  }
  np.step_count = steps_.size() - np.step_first;
  plans_.push_back(np);
  return np.free_k;
}

// At most how many replicas plan `np`'s node may take with its candidates
// of priority <= `p` gone: which thresholds are worth a search.
int PreemptionSearch::FitsAt(const NodePlan& np, int p) const {
  int k = np.free_k;
  for (size_t s = np.step_first; s < np.step_first + np.step_count && steps_[s].priority <= p; ++s) k = steps_[s].k;
  return k;
}

// A lower bound on the work a gang's victims of priority <= `p` lose in
// the domain just walked (whole GPUs), to skip a domain that cannot beat
// the incumbent: per node, the GPUs it must free for k replicas (k x GPUs
// per replica less its usable free GPUs), taken from its candidates
// cheapest per GPU with the last one in part (the fractional knapsack,
// never above the least whole set), then the cheapest counts that add up.
// A victim on several nodes counts 0 (its cost is paid once).
int64_t PreemptionSearch::WorkBound(int p) {
  const int64_t kInf = INT64_MAX;
  const size_t width = static_cast<size_t>(replicas_) + 1;
  lb_dp_.assign(width, kInf);
  lb_dp_[0] = 0;
  for (const NodePlan& np : plans_) {
    const int most = std::min(replicas_, FitsAt(np, p));
    if (most == 0) continue;
    const int ni = np.node;
    const NodeState& n = s_.nodes[ni];
    const uint64_t usable = n.healthy & ~NotForIt(ni);
    uint64_t class_mask = 0;
    for (const ClassSlot& slot : n.classes) class_mask |= s_.ClassMatches(req_, slot.cls) ? slot.mask : 0;
    const int free = std::popcount(n.whole_free & usable & class_mask);
    per_gpu_.clear();
    for (size_t a = np.first; a < np.first + np.count && s_.jobs[cands_[a]].priority <= p; ++a) {
      const int o = cands_[a];
      uint64_t here = 0;
      bool elsewhere = false;
      for (const Held& h : s_.jobs[o].held) {
        if (h.node == ni) {
          here |= h.mask;
        } else {
          elsewhere = true;
        }
      }
      const int gpus = std::popcount(here & usable & class_mask);
      if (gpus > 0) per_gpu_.emplace_back(elsewhere ? 0 : Lost(o).work, gpus);
    }
    std::sort(per_gpu_.begin(), per_gpu_.end(),
              [](const auto& x, const auto& y) { return Wide{x.first} * y.second < Wide{y.first} * x.second; });
    lb_next_ = lb_dp_;
    for (int k = 1; k <= most; ++k) {
      int need = k * req_.gpus - free;
      int64_t work = 0;
      for (size_t i = 0; i < per_gpu_.size() && need > 0; ++i) {
        const auto [w, g] = per_gpu_[i];
        if (g <= need) {
          work = SatAdd(work, w);
        } else {  // floor(w x need / g), without overflow (need < g)
          work = SatAdd(work, (w / g) * need + (w % g) * need / g);
        }
        need -= std::min(need, g);
      }
      if (need > 0) break;  // even every candidate gone frees too few GPUs
      for (size_t r = 0; r < width; ++r) {
        if (lb_dp_[r] == kInf) continue;
        const size_t to = std::min(width - 1, r + static_cast<size_t>(k));
        lb_next_[to] = std::min(lb_next_[to], SatAdd(lb_dp_[r], work));
      }
    }
    lb_dp_.swap(lb_next_);
  }
  return lb_dp_[width - 1];
}

// One replica at threshold `p`: the cheapest node, each node's search
// capped by the best so far (a node that cannot beat it stops early).
bool PreemptionSearch::OneReplica(int p, Plan* plan) {
  Option best;
  int best_node = -1;
  if (options_.empty()) options_.emplace_back();
  std::vector<Option>& opt = options_[0];
  for (const NodePlan& np : plans_) {
    if (FitsAt(np, p) == 0) continue;
    SearchNode(np, p, 1, best.ok ? &best.cost : nullptr, &opt);
    if (opt[1].ok && (!best.ok || opt[1].cost < best.cost)) {
      std::swap(best, opt[1]);
      best_node = np.node;
    }
  }
  if (!best.ok) return false;
  plan->victims = std::move(best.set);
  plan->replicas.emplace_back(best_node, 1);
  return true;
}

// A gang at threshold `p`: the cheapest victims per node for each count of
// replicas there, then the cheapest counts that add up (a knapsack over the
// nodes: costs add, since each node's victims are its own).
bool PreemptionSearch::Gang(int p, Plan* plan) {
  used_.clear();
  for (size_t u = 0; u < plans_.size(); ++u) {
    const int most = std::min(replicas_, FitsAt(plans_[u], p));
    if (most == 0) continue;
    if (options_.size() == used_.size()) options_.emplace_back();  // kept across searches
    SearchNode(plans_[u], p, most, nullptr, &options_[used_.size()]);
    used_.push_back(u);
  }
  const size_t width = static_cast<size_t>(replicas_) + 1;
  const Cost kInf{INT64_MAX, INT64_MAX};
  std::vector<Cost> dp(width, kInf), next;
  dp[0] = Cost{};
  take_.assign(used_.size() * width, 0);
  prev_.assign(used_.size() * width, 0);
  for (size_t u = 0; u < used_.size(); ++u) {
    next = dp;
    for (size_t r = 0; r < width; ++r) prev_[u * width + r] = static_cast<int>(r);
    for (size_t r = 0; r < width; ++r) {
      if (!(dp[r] < kInf)) continue;
      for (size_t k = 1; k < options_[u].size(); ++k) {
        if (!options_[u][k].ok) continue;
        const size_t to = std::min(width - 1, r + k);
        const Cost c = dp[r] + options_[u][k].cost;
        if (c < next[to]) {
          next[to] = c;
          take_[u * width + to] = static_cast<int>(k);
          prev_[u * width + to] = static_cast<int>(r);
        }
      }
    }
    dp.swap(next);
  }
  if (!(dp[width - 1] < kInf)) return false;
  for (size_t u = used_.size(), r = width - 1; u-- > 0;) {
    const int k = take_[u * width + r];
    if (k > 0) {
      plan->replicas.emplace_back(plans_[used_[u]].node, k);
      const std::vector<int>& s = options_[u][static_cast<size_t>(k)].set;
      plan->victims.insert(plan->victims.end(), s.begin(), s.end());
    }
    r = static_cast<size_t>(prev_[u * width + r]);
  }
  return true;
}

// Dedups, costs and checks the set as a whole: the nodes' sets were found
// apart, so a victim on several nodes is in several, and together they may
// break a guarantee that each alone keeps.
bool PreemptionSearch::Finish(Plan* plan) const {
  const std::vector<JobState>& jobs = s_.jobs;
  std::sort(plan->victims.begin(), plan->victims.end(), [&](int a, int b) {
    return jobs[a].priority != jobs[b].priority ? jobs[a].priority < jobs[b].priority : jobs[a].seq < jobs[b].seq;
  });
  plan->victims.erase(std::unique(plan->victims.begin(), plan->victims.end()), plan->victims.end());
  const bool any_coupled =
      std::any_of(plan->victims.begin(), plan->victims.end(), [this](int o) { return Coupled(o); });
  Tally tally;
  for (int o : plan->victims) {
    if (Coupled(o) && !s_.MayPreempt(job_, o, tally, now_)) return false;  // together they break a guarantee
    if (any_coupled) ReleaseTally(&tally, o, +1);
    plan->top = std::max(plan->top, jobs[o].priority);
    plan->cost = plan->cost + Lost(o);
  }
  return true;
}

std::optional<PreemptionSearch::Plan> PreemptionSearch::Run() {
  if (replicas_ > 1 && (req_.topology == Topology::kSwitch || req_.topology == Topology::kRack)) {
    return SearchDomains();
  }
  return Evaluate(s_.SelectedNodes(req_), nullptr);
}

// Every replica in one domain: the domains with the most free GPUs the job
// accepts first (the fewest victims needed), those that could not hold the
// gang with every preemptible job gone left out, at most kPreemptDomains
// searched, each against the best so far.
std::optional<PreemptionSearch::Plan> PreemptionSearch::SearchDomains() {
  std::optional<Plan> best;
  const int level = req_.topology == Topology::kSwitch ? 0 : 1;
  std::vector<int> matching;
  for (size_t c = 0; c < s_.classes.size(); ++c) {
    if (s_.ClassMatches(req_, static_cast<int>(c))) matching.push_back(static_cast<int>(c));
  }
  std::vector<std::pair<int64_t, int>> by_free;
  for (int dm : s_.level_domains[level]) {
    int64_t free = 0;
    for (int c : matching) free += s_.domains[dm].free_by_class[c];
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
    for (int ni : s_.domains[dm].nodes) {
      const NodeState& n = s_.nodes[ni];
      if (s_.NodeMatches(req_, n)) could += Bound(ni, n.whole_free | n.victim_gpus);
      if (could >= replicas_) break;
    }
    if (could < replicas_) continue;
    ++searched;
    std::optional<Plan> plan = Evaluate(&s_.domains[dm].nodes, best ? &*best : nullptr);
    if (plan && (!best || plan->Before(*best))) best = std::move(plan);
    if (best && best->victims.empty()) break;
  }
  return best;
}

// Replays the plan node by node as placement will: a view with the victims
// gone, then one fit per replica, each taking its GPUs from the view.
bool PreemptionSearch::PlaceReplicas(const Plan& plan, std::vector<Pick>* picks) const {
  for (const auto& [ni, k] : plan.replicas) {
    View v = ViewOf(s_.nodes[ni]);
    for (int o : plan.victims) ApplyOn(&v, ni, o, +1);
    for (int r = 0; r < k; ++r) {
      Pick p;
      if (!Fit(ni, v, &p)) return false;  // cannot happen: the search fitted them so
      Place(&v, p);
      picks->push_back(p);
    }
  }
  return true;
}

}  // namespace drover::sched
