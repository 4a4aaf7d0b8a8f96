#pragma once
// Scheduler::State: the data structures behind the decisions. Private to the
// sched library; see scheduler.h for what they promise.

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "drover/common/rng.h"
#include "drover/sched/frag.h"
#include "drover/sched/scheduler.h"
#include "drover/sched/topology.h"

namespace drover::sched {

// One vendor/model/memory triple. Nodes are bucketed by how many whole free
// GPUs of the class they have.
//
// Invariants: node i with k > 0 free healthy GPUs of this class on a
// schedulable node sits in buckets[k] exactly once (at the position its
// ClassSlot records); bit k-1 of `nonempty` is set iff buckets[k] is
// non-empty; `shared` holds (free milli, node * 64 + gpu) for each healthy,
// partly held GPU with free share left on a schedulable node.
// The CPU and memory left on the nodes of one bucket, by position, as a max
// tree: a job's walk of the bucket skips, a subtree at a time, the nodes
// whose host resources are too few for it (every node it would refuse for
// its CPU or memory request), so their number does not add to its cost.
// A node that does not limit a resource counts as kUnbounded.
class HostTree {
 public:
  struct Max {
    int64_t cpu = kNone;
    int64_t mem = kNone;
  };
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  void Set(size_t pos, int64_t cpu, int64_t mem);
  void Clear(size_t pos) { Set(pos, kNone, kNone); }
  Max At(size_t pos) const { return pos < size_ ? tree_[size_ + pos] : Max{}; }
  // The highest position <= `pos` whose node has at least `cpu` and `mem`
  // left, or -1; `skipped` gets the most left over every node passed over
  // (an upper bound: whole subtrees are skipped by their maxima).
  int64_t Prev(int64_t pos, int64_t cpu, int64_t mem, Max* skipped) const;
  // The lowest position >= `pos` so, or -1.
  int64_t Next(int64_t pos, int64_t cpu, int64_t mem, Max* skipped) const;
  // Whether every inner entry is the max of its two children.
  bool Consistent() const;

 private:
  // The last (forward: first) position on the walk's side of `pos` that
  // fits, within node's range [lo, hi).
  int64_t Find(size_t node, size_t lo, size_t hi, int64_t pos, bool forward, int64_t cpu, int64_t mem,
               Max* skipped) const;
  size_t size_ = 0;        // leaves: a power of two
  std::vector<Max> tree_;  // [1, size_): inner, [size_, 2 size_): leaves
};

struct GpuClass {
  std::string vendor;
  std::string model;
  int64_t memory_bytes = 0;
  std::array<std::vector<std::pair<int, int>>, kMaxGpusPerNode + 1> buckets;  // (node, slot)
  std::array<HostTree, kMaxGpusPerNode + 1> host;                             // per bucket, by position
  // By node index: the host resources left of each node with a GPU in
  // `shared` (how many in shared_on), for the shares' walk.
  HostTree shared_host;
  std::vector<uint16_t> shared_on;
  uint64_t nonempty = 0;
  std::set<std::pair<int, int>> shared;
};

// A node's GPUs of one class, and where the node sits in that class's buckets.
struct ClassSlot {
  int cls = 0;
  uint64_t mask = 0;
  int count = 0;  // the bucket it sits in; 0 = none
  int pos = -1;   // index in buckets[count]
};

// A job's topology requirement within one node (island or NUMA; anything
// else is best effort there).
Topology WithinNode(Topology t);

// Reserve's answer on one node for one job, kept while nothing it read
// changed: the node's version, and the time, as long as no job end it
// sorted by lies between the pass that computed it and now (before that
// end every end compares as it did; the ends already past read as now).
struct ReserveMemo {
  uint64_t key = 0;  // whose answer (reservation.cc's ReserveKey); 0: none
  uint64_t version = 0;
  int64_t computed_at = 0;  // the pass's time (a clock stepped back recomputes)
  int64_t valid_until = 0;  // the first job end after the time it was computed
  bool found = false;
  bool at_now = false;  // `at` was the pass's time: read as the new pass's
  int64_t at = 0;
  int missing = 0;
  uint64_t mask = 0;
};

// Laid out for passes over cold caches: the first two lines hold what a
// placement or a preemption search reads of every node it visits (the GPU
// masks, host resources left, topology, its classes), the third the node's
// schedulability and host capacity (NodeInfo's first fields); the per-GPU
// arrays and the reservation memo come after.
struct alignas(64) NodeState {
  uint64_t healthy = 0;
  uint64_t whole_free = 0;  // not held at all, in whole or in part
  uint64_t nominated = 0;   // promised to preemptors, waiting for victims to stop
  uint64_t reserved = 0;    // the pass's EASY reservation
  // GPUs held (whole or shared) by preemptible jobs not already being
  // preempted (the count per GPU in victim_jobs): all a preemption search
  // could free here, read without visiting the jobs (CountVictim).
  uint64_t victim_gpus = 0;
  int64_t free_cpu = 0;  // host resources left (meaningful when info.cpu_milli > 0)
  uint64_t present = 0;  // GPUs in the inventory
  int topo = 0;
  int switch_domain = -1;
  std::vector<ClassSlot> classes;
  int64_t free_host_mem = 0;  // (when info.memory_bytes > 0)
  int rack_domain = -1;
  std::vector<int> jobs;  // bound jobs with a replica here
  NodeInfo info;
  // Raised by every change Reserve reads here: holds and releases, the
  // inventory, health, schedulability, nominations, a job here stopping.
  uint64_t version = 0;
  ReserveMemo reserve_memo;
  std::array<int16_t, kMaxGpusPerNode> free_milli{};
  std::array<int64_t, kMaxGpusPerNode> free_mem{};
  std::array<int16_t, kMaxGpusPerNode> shared_key{};  // the key in GpuClass::shared, -1 if none
  std::array<uint16_t, kMaxGpusPerNode> victim_jobs{};
  std::vector<int> gpu_class;  // per GPU
  std::vector<std::string> images;  // what its store holds (SetNodeImages), sorted
};

// A set of nodes sharing a label value ("switch" or "rack").
struct Domain {
  std::string value;
  std::vector<int> nodes;
  std::vector<int64_t> free_by_class;  // whole free healthy GPUs on schedulable nodes
  // The keys this domain has in its level's DomainRank (-1: none yet), and
  // whether free_by_class changed since they were set.
  int level = 0;  // 0: "switch", 1: "rack"
  int64_t ranked_total = -1;
  std::vector<int64_t> ranked_by_class;
  bool rank_dirty = false;
};

// The domains of one level ordered by their free GPUs, over all classes and
// per class, so that a gang finds the fewest (or most) that suffice without
// a scan of every domain. Kept lazily: SetBucket only marks a domain dirty;
// State::RankDomains brings the sets up to date before a gang reads them.
struct DomainRank {
  std::set<std::pair<int64_t, int>> total;                  // (free over all classes, domain)
  std::vector<std::set<std::pair<int64_t, int>>> by_class;  // [class]: (free of the class, domain)
};

// Where one replica sits, by index.
struct Held {
  int node = -1;
  int cls = -1;
  uint64_t mask = 0;
  int milli = kWholeGpu;  // per GPU
  int64_t mem = 0;        // per GPU when shared
};

enum class WhyCode : uint8_t {
  kNew,                 // not yet considered by a pass
  kNoFit,               // no place now
  kQuota,               // the tenant's borrowing limit
  kBehind,              // strict order: behind a job that cannot start
  kReserved,            // holds the pass's reservation
  kBehindReservation,   // would fit, but would delay the reserved job
  kAwaitingPreemption,  // victims are stopping
};

struct Why {
  WhyCode code = WhyCode::kNew;
  int other = -1;  // the job it waits behind / for (index)
  uint64_t other_seq = 0;
  int64_t at_ms = 0;  // reservation: expected start
  int node = -1;
  int64_t pass_ms = 0;  // when the pass that wrote this ran
};

// The first cache line holds what a pass reads of every job it passes over
// (the queue's order, the preemption search's scan of each node's jobs): a
// pass over a cold cache (the server's loop does other work between passes)
// then costs one line per job instead of three or four. `priority` and
// `preemptible` repeat the request's, which never changes once queued.
struct alignas(64) JobState {
  uint64_t seq = 0;              // 0 = free slot
  uint64_t bound_pass = 0;       // the pass that bound it: not preempted in that same pass
  uint64_t considered_pass = 0;  // the last pass that looked at it
  int tenant = 0;
  int priority = 0;  // req.priority
  bool pending = false;
  bool preempting = false;
  bool preemptible = false;  // req.preemptible
  bool nominee = false;      // !nomination.empty()
  std::vector<Held> held;
  JobRequest req;  // four lines: a pass reads the first three
  // One line: what every pass writes of a job it considers, and reads next.
  Why why;
  std::vector<std::string> victims;  // stopping for this job
  int64_t submit_ms = 0;
  int pending_pos = -1;
  int64_t bound_ms = 0;
  int64_t checkpoint_ms = 0;  // the last checkpoint it reported (0: unknown; SetCheckpoint)
  int64_t queued_ms = 0;      // when it last became pending (the LAS starvation guard)
  int64_t attained = 0;       // milli-GPU x ms of service received before
  // The preemption epoch and reservation under which a search for victims
  // last failed for this job (0: none failed since they last changed).
  uint64_t no_victims_epoch = 0;
  uint64_t no_victims_reservation = 0;
  // Milli-GPUs held per GPU model while bound (MilliByModel): set by Bind,
  // cleared by Unbind; preemption asks for it per candidate victim.
  std::map<std::string, int64_t> by_model;
  std::vector<std::pair<int, uint64_t>> nomination;  // GPUs promised to this job
};

struct TenantState {
  TenantInfo info;
  int64_t milli = 0;
  int64_t mem = 0;
  int64_t cpu = 0;                          // CPU milli held by every replica (CPU-only ones too)
  std::map<std::string, int64_t> by_model;  // milli held per GPU model
  // Of by_model, what its preempted jobs still hold while they stop: those
  // GPUs are already on their way out, so a guarantee is judged without them.
  std::map<std::string, int64_t> stopping;
};

// One candidate for one replica.
struct Pick {
  int node = -1;
  int cls = -1;
  uint64_t mask = 0;
  int milli = kWholeGpu;
  int64_t mem = 0;
  Link quality = Link::kFabric;
  int fill = 0;          // usable GPUs of the class on the node before the pick
  int64_t stranded = 0;  // milli-GPU the pick leaves on the node without CPU to use them
};

// Hash and equality of a request's shape: the fields NeverFits' scan of the
// nodes reads (GPUs, share, memory, model, vendor, selector, host resources,
// replicas, topology), and none it does not (id, tenant, priority, estimate,
// preemptible), so that jobs of one shape share one answer. explain.cc.
struct ShapeHash {
  size_t operator()(const JobRequest& r) const;
};
struct ShapeEq {
  bool operator()(const JobRequest& a, const JobRequest& b) const;
};
// The same without the host resources (CPU, memory): the key of the pass's
// memo of placements that found nothing (State::no_fit).
struct GpuShapeHash {
  size_t operator()(const JobRequest& r) const;
};
struct GpuShapeEq {
  bool operator()(const JobRequest& a, const JobRequest& b) const;
};

// The fields of `req` that ShapeHash and ShapeEq read, and nothing else.
JobRequest ShapeOf(const JobRequest& req);

// A host resource a node does not limit.
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// What Release() undoes and Hold() redoes during tentative searches.
struct State {
  Config config;
  std::vector<NodeTopology> topos;
  std::map<std::string, int> topo_ids;  // key: serialized layout
  std::vector<GpuClass> classes;
  std::vector<NodeState> nodes;
  // Calls f(node index) for each node of `within`, or for every node when
  // it is null (the candidates of one placement).
  template <typename F>
  void ForEachNode(const std::vector<int>* within, F&& f) const {
    if (within != nullptr) {
      for (int ni : *within) f(ni);
      return;
    }
    for (size_t ni = 0; ni < nodes.size(); ++ni) f(static_cast<int>(ni));
  }
  std::unordered_map<std::string, int> node_ids;
  std::vector<Domain> domains;
  std::map<std::pair<std::string, std::string>, int> domain_ids;  // (label, value)
  std::array<std::vector<int>, 2> level_domains;                  // [0]: "switch" domains, [1]: "rack"
  std::array<DomainRank, 2> domain_rank;                          // by level, as level_domains
  std::vector<int> rank_dirty;                                    // domains whose free counts changed since RankDomains
  // Nodes by label (key, value), for node selectors (SelectedNodes).
  // Invariant: node i is in the list of each of its labels, once, and in no
  // other; each list is in ascending node index.
  std::map<std::pair<std::string, std::string>, std::vector<int>> label_nodes;
  // Nodes by image held (NodeState::images), in ascending node index.
  std::unordered_map<std::string, std::vector<int>> image_nodes;
  mutable bool quota_hit = false;  // a pick was refused by a borrowing limit
  // A pick left out GPUs of the pass's reservation: only then may the job
  // fit but for the reservation (Consider's probe).
  mutable bool reserved_hit = false;
  mutable Rng rng{1};  // PlacementPolicy::kRandom only
  // PlacementPolicy::kFrag: the request shapes seen so far (every policy
  // learns them, so a policy switch starts informed), the class count the
  // typical set was built for, and each node's fragmentation under it.
  ShapeStats shapes;
  // PickFrag: confines PickWhole, PickFraction and PickOnNode to one GPU
  // class while it asks them for that class's candidate (-1: any class).
  mutable int pick_class = -1;
  int frag_classes = -1;
  struct FragMemo {
    uint64_t node_version = 0;
    uint64_t shapes_version = 0;
    bool valid = false;
    double f = 0;
  };
  mutable std::vector<FragMemo> frag_memo;  // by node index

  std::vector<JobState> jobs;
  std::vector<int> free_jobs;
  std::unordered_map<std::string, int> job_ids;
  std::vector<int> pending;  // job indices, unordered
  size_t bound_count = 0;
  uint64_t next_seq = 1;
  std::vector<TenantState> tenants;
  std::unordered_map<std::string, int> tenant_ids;
  int64_t capacity_milli = 0;  // healthy GPUs of every node, for fair shares
  int64_t capacity_mem = 0;
  int64_t capacity_cpu = 0;                   // CPU milli of every node, for fair shares
  std::multiset<int> preemptible_priorities;  // of bound, preemptible, not preempting jobs
  std::vector<int> reserved_nodes;            // nodes with a pass reservation
  uint64_t pass = 0;                          // passes run so far
  uint64_t generation = 0;                    // raised by every public mutator (Scheduler::generation)
  // Restored victims by the id of the job they stop for, until it is queued.
  std::unordered_map<std::string, std::vector<std::string>> restored_victims;
  int reservation_job = -1;
  int64_t reservation_ms = kNever;
  uint64_t reservation_sig = 0;  // the reservation's job, time and GPUs, hashed (0: none)
  // Shapes (ReserveKey with the replica count) for which Reserve found too
  // few nodes in pass `reserve_failed_pass`: another job of the shape in
  // the same pass would walk the nodes to fail again (what a node could
  // hold once its jobs end changes only with nominations, health and
  // schedulability, which a pass's placements do not touch).
  uint64_t reserve_failed_pass = 0;
  std::vector<uint64_t> reserve_failed;
  // Placements that found nothing in pass `no_fit_pass`, by GPU shape: the
  // (CPU, memory) requests that failed, the least of them only. Within a
  // pass placements only take capacity, so a job of the shape that asks as
  // much or more (exactly as much for a gang, whose search is not exact)
  // fails too, and is not placed again: a stream of pending jobs that no
  // node can host costs one walk of the nodes per shape, not one per job.
  // Kept only for failures that no tenant limit, reservation or nomination
  // had a part in (NoFitKnown, RecordNoFit; scheduler.cc).
  struct NoFit {
    int64_t cpu = 0, mem = 0;  // the failed request
    // The most CPU and memory left on any node that refused it for its
    // host request (kUnbounded: one without that limit): a request above
    // either is refused by those nodes too. -1: none refused so.
    int64_t cpu_left = -1, mem_left = -1;
  };
  uint64_t no_fit_pass = 0;
  std::unordered_map<JobRequest, std::vector<NoFit>, GpuShapeHash, GpuShapeEq> no_fit;
  mutable bool plain_walk = false;     // WalkBuckets visits every node (Config::verify_memos' check)
  mutable int64_t host_miss_cpu = -1;  // HostFits' refusals since Consider reset them
  mutable int64_t host_miss_mem = -1;
  // Raised by every change a preemption search reads: bindings (tenant
  // usage, who runs where), victims marked stopping, nominations, nodes and
  // tenants, and the end of a pass that bound jobs (a job is not preempted
  // in the pass that bound it, but may be in the next). With the
  // reservation's signature it keys a failed search, which is not run again
  // while both stay the same: it would fail again. Not under the LAS queue
  // policy, whose levels move with time.
  uint64_t preempt_epoch = 1;
  // Config::verify_memos: the first reused result that differed from a
  // fresh one (empty: none).
  mutable std::string memo_mismatch;
  // NeverFits' verdict on the node set by request shape (explain.cc), before
  // tenant limits, which are checked on every call. It depends only on each
  // node's static description (GPUs, links, labels, host capacity), never on
  // what runs, health or schedulability: UpsertNode clears it when a node is
  // added or that description changes. Emptied when it would exceed
  // kNeverFitsCacheMax shapes.
  //
  // Invariant: every entry equals what NeverFitsOnNodes would answer now.
  mutable std::unordered_map<JobRequest, std::optional<std::string>, ShapeHash, ShapeEq> never_fits;

  // ---- placement.cc ----
  int ClassFor(const GpuInfo& g);
  int TopoFor(const NodeInfo& info);
  int DomainFor(const std::string& label, const std::string& value);
  int TenantFor(const std::string& name);
  bool ClassMatches(const JobRequest& job, int cls) const;
  // ClassMatches, within the class a pick is confined to (pick_class >= 0).
  bool PickMayUse(const JobRequest& job, int cls) const {
    return (pick_class < 0 || cls == pick_class) && ClassMatches(job, cls);
  }
  bool NodeMatches(const JobRequest& job, const NodeState& node) const;
  // The node's CPU and host memory can take one more replica of `job`.
  bool HostFits(const JobRequest& job, const NodeState& node) const;
  // Milli-GPU of `node` left unusable for lack of CPU once `gpu_milli` and
  // `cpu` more are taken (0 when the node or the workload tracks no CPU).
  int64_t Stranded(const NodeState& node, int64_t gpu_milli, int64_t cpu) const;
  // The FGD paper's reference baselines (best-fit, random): a scan of every
  // node; baselines.cc.
  bool PickBaseline(int job, int64_t now, const std::vector<int>* within, Pick* out) const;
  // ---- frag_placement.cc ----
  // Rebuilds the typical shapes when ShapeStats says so or GPU classes were added.
  void FragRefresh();
  void FragNodeOf(const NodeState& n, FragNode* out) const;
  double FragOf(int node) const;  // the node's fragmentation now (cached)
  // `p`'s node as fragmentation sees it once one replica of `req` took `p`.
  void FragAfter(const JobRequest& req, const Pick& p, FragNode* out) const;
  // How much `p` raises its node's fragmentation for one replica of `req`.
  double FragRise(const JobRequest& req, const Pick& p) const;
  // A replica under PlacementPolicy::kFrag (frag_placement.cc): bin-pack's
  // candidate per accepted GPU class, the classes ranked by the share of
  // arrivals that may use them; CPU-only replicas by the rise in fragmentation.
  bool PickFrag(int job, int64_t now, const std::vector<int>* within, Pick* out);
  bool PickFragHostOnly(int job, const std::vector<int>* within, Pick* out);
  // A replica of a CPU-only job (gpus == 0).
  bool PickHostOnly(int job, const std::vector<int>* within, Pick* out) const;
  void Recount(int node);  // buckets, domains and shared GPUs of one node
  void SetBucket(int node, ClassSlot& slot, int slot_index, int count);
  HostTree::Max HostLeft(const NodeState& n) const;
  void RefreshHostLeft(int node);  // the node's entries in its buckets' HostTrees
  void MarkRankDirty(int domain);
  void RankDomains();  // brings domain_rank up to date (the dirty domains only)
  // The first `max` domains of `level` with at least `need` free GPUs of the
  // classes in `matching` (every class if `all`), fewest first (most first
  // if `spread`), ties by domain index; false when no index serves the
  // class set (several classes but not all): the caller scans.
  bool RankedDomains(int level, const std::vector<int>& matching, bool all, int64_t need, bool spread, size_t max,
                     std::vector<int>* out);
  void UpdateShared(int node, int gpu);
  // Adds (sign +1) or removes a replica of a preemptible job, not being
  // preempted, to its node's victim_gpus and victim_jobs.
  void CountVictim(const Held& h, int sign);
  void Hold(int job, const Held& h);
  void Release(int job, const Held& h);
  // Adds (sign +1) or removes a replica's GPUs to its tenant's usage, and to
  // its stopping usage while the job is preempting.
  void Charge(int job, const Held& h, int sign);
  // The milli-GPUs a bound job holds per GPU model (CPU-only replicas hold none).
  const std::map<std::string, int64_t>& MilliByModel(int job) const { return jobs[job].by_model; }
  int64_t Beyond(const TenantState& t) const;  // milli beyond guarantees
  // Whether `tenant` may hold `milli` more of `model` (and `mem` more GPU
  // memory bytes) within its borrowing limit and quotas.
  bool CanCharge(int tenant, const std::string& model, int64_t milli, int64_t mem = 0) const;
  // GPUs of `node` that `job` may take whole now, honouring nominations
  // and the pass reservation.
  uint64_t UsableWhole(int job, const NodeState& node, uint64_t class_mask, int64_t now) const;
  bool MayUseReserved(int job, int64_t now) const;
  bool OnlyMine(int job, int node, uint64_t mask) const;  // nomination check
  // Best whole-GPU replica on one node; quality and fill for ranking.
  // `req` is the job's request or a variant of it (one GPU of a share).
  bool PickOnNode(int job, const JobRequest& req, int node, int64_t now, Pick* out) const;
  bool PickFraction(int job, int64_t now, const std::vector<int>* within, Pick* out) const;
  bool PickFractionWalk(int job, int64_t now, const std::vector<int>* within, Pick* out) const;
  bool PickWhole(int job, const JobRequest& req, int64_t now, const std::vector<int>* within, Pick* out) const;
  // The nodes carrying the rarest label of `req`'s node selector (empty when
  // no node has one of them), or nullptr: no selector, or even its rarest
  // label is on more than an eighth of the nodes (walk the buckets instead).
  const std::vector<int>* SelectedNodes(const JobRequest& req) const;
  // PickWhole's walk over the free-count buckets, or over `selected` in
  // bucket order when not null.
  bool WalkBuckets(int job, const JobRequest& req, int64_t now, const std::vector<int>* selected, Pick* out) const;
  void PreferImage(int job, const JobRequest& req, int64_t now, Pick* out) const;
  // Places every replica (held on success, nothing held on failure).
  bool PlaceJob(int job, int64_t now, std::vector<Held>* out);
  bool NoFitKnown(const JobRequest& req);
  void RecordNoFit(const JobRequest& req);
  bool PlaceReplicas(int job, int64_t now, const std::vector<int>* within, std::vector<Held>* out);
  void Bind(int job, std::vector<Held> held, int64_t now, Decisions* d);
  void Unbind(int job, int64_t now);
  // ---- reservation.cc ----
  // EASY: reserve GPUs for a job that cannot start; true when reserved.
  bool Reserve(int job, int64_t now);
  // Where and when `job` could start on node `ni`, as Reserve weighs it
  // (`ends` is scratch space).
  ReserveMemo ReserveOnNode(int job, int ni, int64_t now, std::vector<std::pair<int64_t, int>>* ends) const;
  void ClearReservation();

  // ---- preemption.cc ----
  // `released`: milli already taken from each (tenant, model) by this
  // preemption, so that reclaim never takes a tenant below its guarantee.
  bool MayPreempt(int job, int victim, const std::map<std::pair<int, std::string>, int64_t>& released,
                  int64_t now) const;
  // GPU-ms of service: earlier runs plus the current one until `now`.
  int64_t AttainedNow(int job, int64_t now) const;
  // A bound job was preempted: it stops holding its place among the
  // preemptible and its GPUs count as stopping for its tenant until they are
  // released (Charge).
  void MarkStopping(int job);
  // kLas: `victim` is at a higher level than `job` and not of a higher priority.
  bool LasAhead(int job, int victim, int64_t now) const;
  bool HasCandidates(int job) const;
  bool Preempt(int job, int64_t now, Decisions* d);
  // A search for `job` failed before and nothing it reads has changed.
  bool KnownWithoutVictims(int job) const;
  void ClearNomination(int job);
  // Promises the GPUs of `victim` (being preempted) to `job`.
  void Nominate(int job, int victim);

  // ---- scheduler.cc ----
  int FindJob(const std::string& id) const;
  int NewJob();
  void AddPending(int job);
  void DropPending(int job);
  void FreeJob(int job);
  std::vector<int> Order(int64_t now) const;
  // kLas: promotes the pending jobs that waited too long for their service
  // (Config::las_starvation_factor); returns how many.
  int PromoteStarving(int64_t now);
  // One job of a pass: bind it, or record why not; jobs that may preempt go
  // to `preempt_later`, searched once the pass has placed what it can.
  void Consider(int job, int64_t now, bool* blocked, int* blocker, std::vector<int>* preempt_later, Decisions* d);
  void FairShare(int64_t now, bool* blocked, int* blocker, std::vector<int>* preempt_later, Decisions* d);

  // ---- explain.cc ----
  std::string Reason(int job) const;
  std::string Shortfall(int job) const;
  // Why `req` could never run (tenant limits, then the node set as if idle),
  // or nothing when it could. O(1) expected for a shape already asked since
  // the node set last changed.
  std::optional<std::string> NeverFits(const JobRequest& req) const;
  // The node-set part of NeverFits, uncached: a scan of the nodes that stops
  // as soon as enough replicas fit (in one domain for switch / rack gangs).
  std::optional<std::string> NeverFitsOnNodes(const JobRequest& req) const;
};

}  // namespace drover::sched
