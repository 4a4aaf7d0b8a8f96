#pragma once
// Scheduler: decides which pending job runs on which GPUs, and which
// running jobs must yield to it.
//
// Pure: no threads, no clocks, no I/O, no logging. The caller feeds it events
// (nodes, tenants, jobs queued, jobs ended) with the time as an argument and
// asks for decisions; it persists the decisions and only then acts on them.
// The server, the simulator and the tests drive the same object: same
// inputs, same decisions.
//
// One pass (Schedule) walks the queue in the order of the queue policy and
// for each job either binds it (placement policy), preempts for it, gives it
// the pass's reservation (EASY backfill), or records why it waits. See
// docs/scheduler.md for the policies and a worked example.
//
// Complexity (N nodes, C GPU classes, P pending, G GPUs per node, B bound
// jobs on one node; a GPU class is one vendor/model/memory triple):
//  - UpsertNode, SetSchedulable: O(G) plus O(G log) for fractional indexes.
//  - Enqueue, Remove, Requeue: O(1) expected (hash and swap-remove).
//  - One decision for a whole-GPU replica: O(C) to find the first non-empty
//    free-count bucket (a 64-bit bitmap per class), then O(subsets of G)
//    on the chosen node from the node topology's precomputed subset table;
//    nodes are only walked when a reservation, a nomination, host fit or a
//    topology requirement rejects the first candidates. A job whose
//    tenant's limits refuse it on every class it accepts costs O(C), before
//    any node. A node selector whose rarest label is on at most an eighth
//    of the nodes walks only that label's nodes (here, in Reserve and in
//    the preemption search): O(L log L) for L such nodes.
//  - A fractional job: O(log S) over the class's shared GPUs ordered by
//    free share (S shared GPUs), else one whole-GPU decision.
//  - A pass: O(P log P) to order the queue plus one decision per job;
//    at most one reservation (O(N B)) and preemption searches (O(N B)) only
//    for jobs that cannot be placed and have candidates.
//
// Invariants (CheckInvariants verifies all of them; tests run it after every
// step):
//  - no GPU is over-committed: whole-GPU holders are exclusive; shares on
//    one GPU sum to at most kWholeGpu and their memory to at most the GPU's;
//  - a job is pending, bound (every replica placed) or unknown, never two;
//  - the free-count buckets, shared-GPU indexes and per-tenant usage equal
//    what the bound jobs imply;
//  - tenant usage beyond guarantees stays within the borrowing limit;
//  - only preemptible jobs are ever marked for preemption.
//
// Not thread-safe, const methods included (NeverFits remembers its answers):
// owned by the server's control loop (or the simulator).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/model.h"

namespace drover::sched {

struct State;  // scheduler_state.h; private to the sched library

class Scheduler {
 public:
  explicit Scheduler(Config config = {});
  ~Scheduler();
  Scheduler(Scheduler&&) noexcept;
  Scheduler& operator=(Scheduler&&) noexcept;

  // ---- cluster ----
  // Adds a node or replaces its inventory. GPUs held by bound jobs stay held
  // (a bound job whose GPU disappeared keeps its claim until it ends).
  // kInvalidArgument on a malformed inventory (too many GPUs, bad indices,
  // a link matrix of the wrong size).
  Status UpsertNode(const NodeInfo& node);
  void SetSchedulable(const std::string& node, bool schedulable);
  // The images (references and digests) a node's store holds, replacing
  // what it held: a job's JobRequest::image breaks ties towards them.
  void SetNodeImages(const std::string& node, const std::vector<std::string>& images);
  // Adds or replaces a tenant. kInvalidArgument on a bad weight or limit.
  Status SetTenant(const TenantInfo& tenant);

  // ---- jobs ----
  // Queues a job. kAlreadyExists if known, kInvalidArgument if malformed.
  Status Enqueue(const JobRequest& job, int64_t now_ms);
  // Records a binding made earlier (recovery from the store); `started_ms`
  // is when it was bound. The GPUs must be free; kFailedPrecondition otherwise.
  Status Restore(const JobRequest& job, const Binding& binding, int64_t started_ms);
  // Marks a restored job as already being preempted (recovery) for
  // `for_job`, whose GPUs they become again (promised to it, and no new
  // victims chosen for it while these stop). `for_job` may be queued before
  // or after this call, or be empty when unknown.
  Status MarkPreempting(const std::string& job_id, const std::string& for_job = "");
  // A bound job stopped without finishing (preempted, or its node was lost):
  // frees its GPUs and queues it again with its original submission order
  // and the GPU service it attained. kNotFound unless bound.
  Status Requeue(const std::string& job_id, int64_t now_ms);
  // The GPU service (GPU-ms) a job has attained as LAS counts it: earlier
  // runs, plus the current one up to `now_ms` while bound. 0 when unknown.
  int64_t Attained(const std::string& job_id, int64_t now_ms) const;
  // Forgets a job, queued or bound (finished, cancelled), and frees its
  // GPUs. No-op when unknown.
  void Remove(const std::string& job_id, int64_t now_ms);
  // A bound job saved a checkpoint it can resume from at `at_ms`: a
  // preemption weighs the work a victim would lose as its GPUs times the
  // time since its last checkpoint (else since it started). kNotFound
  // unless bound. preemption.cc.
  Status SetCheckpoint(const std::string& job_id, int64_t at_ms);

  // One scheduling pass.
  Decisions Schedule(int64_t now_ms);

  // ---- questions ----
  // Empty when some node could hold `job` once idle (drained, disconnected
  // or busy nodes count); otherwise why it never can, in words. Answers are
  // remembered per request shape until a node is added or its inventory,
  // links, labels or host capacity change: O(1) expected for a shape asked
  // before, else a scan of the nodes that stops once enough replicas fit.
  std::optional<std::string> NeverFits(const JobRequest& job) const;
  // Why a pending job waits, in words; empty when it is not pending.
  std::string PendingReason(const std::string& job_id) const;
  // The class of that reason, a short fixed name for metrics and alerts:
  // "new", "no_fit", "quota", "queue_order", "backfill", "preemption";
  // empty when it is not pending.
  std::string_view PendingClass(const std::string& job_id) const;
  // True when a pending job waits, at the last pass, only for its own
  // tenant's limit (borrowing limit or quota); such a job does not hold up
  // the jobs behind it, even in strict order.
  bool HeldByTenantLimit(const std::string& job_id) const;
  // Every invariant in the header comment; the first broken one as an error.
  Status CheckInvariants() const;

  size_t pending() const;
  size_t bound() const;
  // Raised by every call that changes the cluster, the tenants or the jobs
  // (a pass's own bindings included). A pass over an unchanged generation
  // decides what the last one did, except as priority aging moves with the
  // clock: the server skips it.
  uint64_t generation() const;
  bool IsPending(const std::string& job_id) const;
  bool IsBound(const std::string& job_id) const;
  bool IsPreempting(const std::string& job_id) const;
  // GPUs of `node` held wholly or in part, as a mask over node-local indices.
  uint64_t HeldMask(const std::string& node) const;
  struct TenantUsage {
    int64_t milli_gpus = 0;      // whole GPUs count kWholeGpu each
    int64_t memory_bytes = 0;    // GPU memory held (a whole GPU holds all of its)
    int64_t borrowed_milli = 0;  // beyond the tenant's guarantees
  };
  TenantUsage Usage(const std::string& tenant) const;
  const Config& config() const;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace drover::sched
