#pragma once
// PreemptionSearch: the search behind State::Preempt. Private to the sched
// library (preemption.cc and preemption_search.cc include it, nothing else).

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {

// For one job that cannot be placed, the cheapest set of running jobs whose
// GPUs would let every replica of it run, and where the replicas would go
// (preemption.cc says who may be a victim and what "cheapest" means). It
// reads the State and changes nothing in it: State::Preempt builds one on
// the stack per search, calls Run, then PlaceReplicas, and only then marks
// the victims stopping and nominates the GPUs. Not thread-safe: it lives
// within one call on the control loop, as the State it reads.
//
// How: the domain is a switch or rack for a gang that asks for one (every
// replica in it: SearchDomains), else every node the job may use. In it,
// per node (AddNode), the replicas that fit with no victim and (a bound
// from the GPU masks) with every allowed victim up to each priority gone
// give the lowest priority threshold at which the job may fit (no set can
// have a lower highest priority; where the search below finds no set, the
// next threshold is tried: Evaluate). Under that threshold, an exact search
// per node over subsets of its victims, cheapest first (SearchNode,
// Descend), finds the cheapest set for each count of replicas there (pruned
// by cost and by what the remaining victims could free; kNodeSearchBudget
// sets at most, then it takes what it has); a knapsack over the nodes
// (Gang) then finds the cheapest counts that add up to the gang. Switch and
// rack domains are searched the freest first (fewest victims needed), those
// that could not hold the gang with every preemptible job gone skipped,
// kPreemptDomains at most: exact over the domains searched, not over every
// domain of a large cluster. A domain whose lowest threshold is above the
// best set's highest priority, or whose work has a lower bound (WorkBound)
// above the best set's, is not searched further. One more exception: a
// victim with replicas on several nodes counts its whole cost on each node
// that takes it and frees only its GPUs there, so the set found lets the
// job fit but may cost more than the least (Finish costs it once).
// preemption_property_test checks minimality against an exhaustive search.
//
// Invariants, within one Evaluate (of one domain):
//   - plans_ holds one NodePlan per node of the domain that may take a
//     replica, with or without victims; its [first, first + count) range of
//     cands_ is that node's candidate victims (State::MayPreempt with nothing
//     released) by priority ascending, and its [step_first, step_first +
//     step_count) range of steps_ the priorities at which the replicas it
//     may take rise, both rising strictly.
//   - options_[u] is SearchNode's answer for plans_[used_[u]] (options_[0]
//     for one replica): entry k the cheapest set found for k replicas there.
//     Its vectors are kept across searches so that their storage is reused.
//   - NotForIt's memo (others_node_, others_mask_) stays true for the whole
//     object's life: nothing changes the State meanwhile.
//
// Worked example: node a has 8 GPUs, 2 free, and runs p=10 on 4 and p=20
// on 2; node b runs p=10 on 8; all preemptible, started an hour ago. A
// p=100 job asks for 6 GPUs, one replica. Run evaluates every node: AddNode
// gives a free_k 0, candidates (p10, p20) and one step (10, 1): 2 free + 4
// is 6 GPUs; b free_k 0, (p10), step (10, 1). The thresholds are 10 and 20;
// at 10 FitsAt adds up to 2 >= 1 replica. OneReplica searches a (its p=10
// job: 4 GPU-hours), then b capped at 4 GPU-hours: its only set costs 8,
// pruned. Finish: victims {a's p=10 job}, top 10, 4 GPU-hours.
// PlaceReplicas fits the replica on a's 6 GPUs with that job gone.
class PreemptionSearch {
 public:
  // What a set of victims loses, compared work first: milli-GPU x ms since
  // each victim's last checkpoint (else its start), then milli-GPUs stopped.
  // The highest victim priority comes before both (Plan::Before).
  struct Cost {
    int64_t work = 0;
    int64_t milli = 0;
    bool operator<(const Cost& o) const { return work != o.work ? work < o.work : milli < o.milli; }
    Cost operator+(const Cost& o) const { return Cost{SatAdd(work, o.work), SatAdd(milli, o.milli)}; }
  };
  // A domain's cheapest victims and where the replicas go.
  struct Plan {
    int top = INT_MIN;  // the highest victim priority (INT_MIN: none)
    Cost cost;
    std::vector<int> victims;
    std::vector<std::pair<int, int>> replicas;  // (node, replicas there)
    bool Before(const Plan& o) const { return top != o.top ? top < o.top : cost < o.cost; }
  };

  // For `job` (it asks for GPUs) at `now`; `s` must outlive the search and
  // not change while it lasts.
  PreemptionSearch(const State& s, int job, int64_t now);
  PreemptionSearch(const PreemptionSearch&) = delete;
  PreemptionSearch& operator=(const PreemptionSearch&) = delete;

  // The cheapest plan, or nothing when no set of victims lets the job fit.
  // A plan without victims: the job fits as things are (on GPUs its
  // placement left out).
  std::optional<Plan> Run();
  // One pick per replica of `plan`, its victims gone; false only if one does
  // not fit (cannot happen: the search fitted them so).
  bool PlaceReplicas(const Plan& plan, std::vector<Pick>* picks) const;

 private:
  // Released milli-GPUs by (tenant, model), for State::MayPreempt.
  using Tally = std::map<std::pair<int, std::string>, int64_t>;
  // A node's free resources as a search changes them. Only the node's own
  // GPUs are filled in (and only they are read: every access goes through
  // masks of present GPUs); a search makes one per node it looks at, so the
  // other 56 of 64 entries are left uninitialised rather than cleared.
  struct View {
    uint64_t whole_free = 0;
    int64_t cpu = 0;  // host resources left
    int64_t host_mem = 0;
    std::array<int, kMaxGpusPerNode> milli;
    std::array<int64_t, kMaxGpusPerNode> mem;
  };
  // The cheapest victims found on one node for some count of replicas.
  struct Option {
    Cost cost;
    bool ok = false;  // a set was found
    std::vector<int> set;
  };
  // A node's part in a search of one domain: the replicas that fit with no
  // victim, its candidate victims (a range of cands_, by priority
  // ascending) and at most how many replicas could fit with every candidate
  // up to each priority gone (a range of steps_, where that count rises; for
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
  struct NodeSearch;  // one SearchNode's state, shared by its Descend calls

  static int64_t SatAdd(int64_t a, int64_t b) { return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b; }
  // The methods below are called only from preemption_search.cc, which
  // defines them. `inline` keeps the hint the lambdas and file-local
  // helpers they replace had: GCC inlines the small hot ones (NotForIt,
  // Bound, Apply, ...) into the node search again (bench/sched_bench).
  static inline View ViewOf(const NodeState& n);
  static inline void Apply(View* v, const NodeState& n, const JobRequest& owner, const Held& h, int sign);

  // ---- the job on one node ----
  inline uint64_t NotForIt(int ni) const;
  inline bool Fit(int ni, const View& v, Pick* out) const;
  inline void Place(View* v, const Pick& p) const;
  inline int Bound(int ni, uint64_t could) const;
  inline int CountFits(int ni, const View& v, int most) const;
  // ---- victims ----
  inline Cost Lost(int o) const;
  inline void ApplyOn(View* v, int ni, int o, int sign) const;
  inline bool Coupled(int o) const;
  inline void ReleaseTally(Tally* tally, int victim, int sign) const;
  // ---- one node's victims ----
  inline void SearchNode(const NodePlan& np, int p, int most, const Cost* cap, std::vector<Option>* best);
  inline void RankCandidates(const NodePlan& np, int p);
  inline void Descend(NodeSearch& ns, size_t i, Cost cur, int fits);
  inline void TakeEveryCandidate(const NodePlan& np, int most, std::vector<Option>* best) const;
  // ---- one domain ----
  inline std::optional<Plan> Evaluate(const std::vector<int>* within, const Plan* incumbent);
  inline int Walk(const std::vector<int>* within);
  inline int AddNode(int ni);
  inline int FitsAt(const NodePlan& np, int p) const;
  inline int64_t WorkBound(int p);
  inline bool OneReplica(int p, Plan* plan);
  inline bool Gang(int p, Plan* plan);
  inline bool Finish(Plan* plan) const;
  // ---- which domains ----
  inline std::optional<Plan> SearchDomains();

  const State& s_;
  const int job_;
  const int64_t now_;
  const JobState& j_;
  const JobRequest& req_;
  const int replicas_;
  const Tally none_released_;  // MayPreempt's `released` for AddNode's candidates

  // NotForIt's last answer: the search asks node by node, many times each.
  mutable int others_node_ = -1;
  mutable uint64_t others_mask_ = 0;

  // One domain (Evaluate), reused from domain to domain.
  std::vector<NodePlan> plans_;
  std::vector<int> cands_;   // per plan, by priority ascending
  std::vector<Step> steps_;  // per plan, by priority ascending
  // One node's search (SearchNode), reused from node to node.
  std::vector<std::pair<Cost, int>> ranked_;
  std::vector<int> order_;  // its candidates, cheapest first
  std::vector<Cost> order_cost_;
  std::vector<uint64_t> suffix_;  // GPUs of order_[i..] on the node
  std::vector<int> set_;          // Descend's current set
  // A threshold's node searches (OneReplica, Gang) and the knapsack's choices.
  std::vector<std::vector<Option>> options_;
  std::vector<size_t> used_;
  std::vector<int> take_, prev_;  // per (used plan, replicas so far)
  // WorkBound's scratch.
  std::vector<std::pair<int64_t, int>> per_gpu_;  // (work, GPUs here)
  std::vector<int64_t> lb_dp_, lb_next_;
};

}  // namespace drover::sched
