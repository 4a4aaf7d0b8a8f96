#pragma once
// JobLifecycle: the one place a job's state changes. One function per edge
// of the job state diagram, each refusing an illegal transition
// (kFailedPrecondition, nothing changed) and each doing its own record in
// the open batch, its resend marks (the nodes whose desired workloads
// change) and its call to the scheduler; one ResetRun() for what belongs
// to an attempt. What agents report about workloads (running, exited,
// lost, checkpoints) and what happens to nodes (lost, drained, a sick GPU)
// are turned into these edges here too.
//
//            submit        bind         start
//   (new) ---------> PENDING ----> BOUND ------> RUNNING ---finish---> SUCCEEDED | FAILED
//                     ^  |           |              |
//                     |  |           +----stop------+--> PREEMPTING ---finish---> SUCCEEDED | FAILED
//                     |  |           |              |       |
//                     |  +-cancel-+  +---cancel-----+-------+--> CANCELLING --finish--> CANCELLED | FAILED
//                     |           v                         |
//                     |       CANCELLED                     |
//                     +------------requeue------------------+  (also from BOUND and RUNNING: a lost node)
//   every terminal state --archive--> (out of the table, into the archive)
//
// A preempted or failing job is stopped like a cancelled one (it leaves its
// node's desired set, with a Stop that carries its grace); it keeps its
// GPUs in the scheduler until the agent reports the process gone, so a job
// placed on them never overlaps it. Gangs (replicas > 1) run one workload
// per replica (job_reports.cc).
//
// Example: j-000007 is PENDING; the scheduler binds it to gpu-a (Bind:
// BOUND, attempt 1, gpu-a marked for resend); gpu-a reports it running
// (Start: RUNNING); a job of higher priority preempts it (Stop: PREEMPTING,
// gpu-a gets a Stop with the grace); gpu-a reports it gone (Requeue:
// PENDING, attempt 1 ended "preempted: ...", the scheduler queues it again
// in its submission order).
//
// Not thread-safe: owned by the control loop, on its thread.

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/sched/scheduler.h"
#include "drover/server/batch.h"
#include "drover/server/job_table.h"
#include "drover/server/launch_contract.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// Why a job that holds GPUs is stopped.
struct StopCause {
  enum class Kind {
    kPreempted,  // for another job (the scheduler's decision): queued again
    kFailure,    // not the job's doing (a sick GPU, a lost node, a fence, a limit): its restart policy decides
    kDrained,    // its node is drained with requeue: queued again
  };
  Kind kind = Kind::kFailure;
  std::string text;         // the reason (preemption, drain node) or the failure
  std::string for_job;      // kPreempted: the job it yields to
  int64_t grace_ms = 0;     // kPreempted: the scheduler's preemption grace
  bool no_restart = false;  // kFailure: ends FAILED whatever its restart policy

  static StopCause Preempted(std::string for_job, std::string reason, int64_t grace_ms) {
    return {Kind::kPreempted, std::move(reason), std::move(for_job), grace_ms, false};
  }
  static StopCause Failure(std::string failure, bool no_restart = false) {
    return {Kind::kFailure, std::move(failure), "", 0, no_restart};
  }
  static StopCause Drained(std::string node) { return {Kind::kDrained, std::move(node), "", 0, false}; }
};

class JobLifecycle {
 public:
  // The node registry's part of a job's end: the nodes it ran on may drop
  // its checkpoints now.
  using EndedOn = std::function<void(const v1::Job& job, const std::set<std::string>& nodes)>;

  JobLifecycle(sched::Scheduler* sched, Batch* batch, Clock* clock, EndedOn ended_on)
      : sched_(sched), batch_(batch), clock_(clock), ended_on_(std::move(ended_on)) {}

  const JobTable& table() const { return table_; }

  // Where a deployment's replica that resolved no image digest of its own
  // finds its revision's (DeploymentStatus.image_digest), so that every
  // replica of a revision runs the image its first replica ran. Unset or
  // empty: the agent resolves the reference.
  using RevisionDigest = std::function<std::string(const v1::Job& replica)>;
  void SetRevisionDigest(RevisionDigest f) { revision_digest_ = std::move(f); }

  // Where a binding finds its nodes' advertised addresses and launch port
  // ranges (the node registry's records). Unset: node names and the
  // default range.
  void SetNodeLookup(NodeLookup f) { node_of_ = std::move(f); }

  // ---- rebuilding (recovery) ----
  struct Rebuilt {
    JobTable table;
    size_t queued = 0;
    size_t bound = 0;
    std::vector<std::pair<int64_t, uint64_t>> ended;  // finished jobs: (end ns, seq), unsorted
  };
  // The table of `jobs` as stored, queued and restored into `sched` (a
  // fresh scheduler; the live one is untouched): pending ones in submission
  // order, through their array gates; bound ones on their GPUs.
  static Result<Rebuilt> Rebuild(JobTable::Map jobs, uint64_t next_seq, sched::Scheduler* sched, int64_t now_ns);
  // Swaps in a rebuilt table (with the scheduler it was rebuilt into).
  void Replace(JobTable table) { table_ = std::move(table); }

  // ---- the edges ----
  // (new) -> PENDING: stores `jobs` (specs and array tasks set, ids not)
  // under consecutive sequence numbers from table().next_seq(), and queues
  // them (through their array's gate); all or none.
  Result<std::vector<uint64_t>> Submit(std::vector<v1::Job> jobs);
  // PENDING -> BOUND, a new attempt on the binding's GPUs. A binding of a
  // job that is not pending here is given back to the scheduler.
  Status Bind(const sched::Binding& binding);
  // BOUND -> RUNNING, from when the agent started it.
  Status Start(v1::Job* job, int64_t start_ns);
  // BOUND | RUNNING -> PREEMPTING (not a gang already failing): the agent
  // stops it with the grace the cause allows; Requeue follows once it is
  // gone.
  Status Stop(v1::Job* job, const StopCause& cause);
  // PENDING -> CANCELLED at once; BOUND | RUNNING | PREEMPTING ->
  // CANCELLING (CANCELLED once its process is gone); CANCELLING stays.
  Status Cancel(v1::Job* job);
  // BOUND | RUNNING | PREEMPTING -> PENDING: queued again in its
  // submission order, or FAILED when it was stopped for a failure its
  // restart policy does not retry.
  Status Requeue(v1::Job* job);
  // -> a terminal state, its GPUs freed: PENDING -> CANCELLED; BOUND |
  // RUNNING | PREEMPTING -> SUCCEEDED | FAILED; CANCELLING -> CANCELLED |
  // FAILED.
  Status Finish(v1::Job* job, v1::JobState state, int exit_code, int signal, int64_t end_ns, std::string message);
  // PENDING (held back by its array or its dependencies, not in the
  // scheduler) -> FAILED: the scheduler refused it when its gate let it in,
  // or a dependency ended as its condition refuses.
  Status Reject(v1::Job* job, std::string why);
  // terminal -> gone: out of the table and the store (the archive holds it).
  Status Archive(uint64_t seq);

  // ---- dependencies (job_dependencies.cc) ----
  // The archive's copy of a job that left the table; null when it has none.
  using ArchivedJob = std::function<Result<std::shared_ptr<const v1::Job>>(uint64_t seq)>;
  // Checks the dependencies of `spec`, about to be submitted as the `count`
  // jobs from table().next_seq(): each names an earlier job of the same
  // tenant (kNotFound, as any read of another tenant's job; a job of the
  // same submit or itself: kInvalidArgument, so that no cycle can form)
  // that has not already ended in a way its condition refuses
  // (kFailedPrecondition). Answers the ones already met.
  Result<std::vector<std::string>> CheckAfter(const v1::JobSpec& spec, size_t count, const ArchivedJob& archived) const;
  // Whether `edge` may take a job in `from`; the edges check this first.
  enum class Edge { kBind, kStart, kStop, kCancel, kRequeue, kFinish, kReject, kArchive };
  static bool Allowed(Edge edge, v1::JobState from, v1::JobState to = v1::JOB_STATE_UNSPECIFIED);

  // What belongs to one attempt, cleared when the job waits again.
  static void ResetRun(v1::JobStatus* st);

  // ---- what agents report (job_reports.cc) ----
  void ApplyWorkloadStatus(const std::string& node, const v1::WorkloadStatus& ws);
  // A full report from `node` lacked these jobs that should run there.
  void ApplyLost(const std::string& node, const std::set<std::string>& reported);
  // A heartbeat's checkpoint mark: the job's last checkpoint, for the
  // preemption search.
  void NoteCheckpoint(const std::string& node, const v1::CheckpointMark& mark);
  // The node's lease expired: its jobs are queued again (or fail, by their
  // restart policy); a gang's replicas elsewhere are stopped.
  void NodeLost(const std::string& node, const std::string& failure);
  // Drained with requeue: the node's running jobs are stopped (checkpoint
  // signal first) and queued again.
  void Drain(const std::string& node);
  // GPU `gpu` of `node` turned unhealthy: the jobs on it are stopped.
  void StopJobsOnGpu(const std::string& node, int gpu, const std::string& reason);
  // Jobs that hold GPUs past their tenant's runtime limit (seconds; 0: none)
  // or their own time limit (JobSpec.time_limit_seconds), whichever is
  // shorter, are stopped for good.
  void EnforceRuntimeLimits(const std::function<int64_t(const std::string& tenant)>& limit_s, int64_t now_ns);

  // ---- what agents are sent (job_desired.cc) ----
  // The workloads `node` should run, and the stops with their grace.
  void AddDesired(const std::string& node, v1::DesiredWorkloads* out) const;

  // By id; null when it is not live.
  v1::Job* Find(const std::string& id);

 private:
  int64_t NowNs() const { return ToUnixNanos(clock_->Now()); }
  int64_t NowMs() const { return NowNs() / 1'000'000; }
  void Persist(const v1::Job& job) { batch_->PutJob(job); }
  // Marks every node of the job's placements for resend.
  void MarkNodes(const v1::Job& job);
  // Queues a pending job in `sched`, or holds it when its array is at its
  // limit.
  static Status Queue(const v1::Job& job, uint64_t seq, int64_t now_ms, sched::Scheduler* sched, JobTable* table);
  // A task ended: queue the next held one of its array.
  void TaskEnded(const v1::Job& job);
  // Whether some JobSpec.after of `job` is not met yet (job_dependencies.cc).
  static bool Waits(const v1::Job& job);
  // Holds a pending job whose dependencies are not all met outside the
  // scheduler; false when it need not wait.
  static bool HoldForDependencies(const v1::Job& job, uint64_t seq, JobTable* table);
  // A waiting job leaves the waits (it ends, or it is refused); false when
  // it was not waiting.
  bool ForgetWaits(uint64_t seq);
  // `job` ended: the jobs that wait for it are told; each either waits on,
  // is queued (every dependency met), or ends FAILED with the reason.
  void DependencyEnded(const v1::Job& job);
  // Leaves the nodes the job ran on (they are told their new desired set).
  void Release(v1::Job* job);
  static v1::Attempt* CurrentAttempt(v1::Job* job);
  static void EndAttempt(v1::Job* job, int64_t end_ns, std::string outcome);
  // A running service's port, endpoint, readiness and restarts into its
  // replica_states[0]; true when any changed.
  static bool ApplyServiceStatus(v1::Job* job, const std::string& node, const v1::WorkloadStatus& ws);
  // A container's image, as its agent reports it: the digest its reference
  // resolved to (kept for every later attempt, the first one reported
  // wins; a gang's other replicas are told it at once) and, while the job
  // is bound, the pull's progress; true when either changed.
  bool ApplyImageStatus(v1::Job* job, const v1::WorkloadStatus& ws);
  // The container and the image digest to run into `w`.
  void FillContainer(const v1::Job& job, v1::Workload* w) const;
  // Gangs: one workload per replica.
  void AddGangWorkloads(const v1::Job& job, const std::string& node, v1::DesiredWorkloads* out) const;
  void ApplyGangStatus(v1::Job* job, int replica, const v1::WorkloadStatus& ws);
  void ApplyGangLost(v1::Job* job, const std::string& node, const std::set<std::string>& reported);
  // Marks one replica ended; ends, requeues or keeps stopping the gang.
  void EndReplica(v1::Job* job, int replica, bool failed_to_start, int exit_code, int signal, int64_t end_ns,
                  std::string message);
  // Stop for a failure where the job is not already on its way out (one
  // more node loss counted when `node_loss`); false when it was.
  bool StopUnlessStopping(v1::Job* job, std::string failure, bool node_loss);

  sched::Scheduler* sched_;
  Batch* batch_;
  Clock* clock_;
  EndedOn ended_on_;
  RevisionDigest revision_digest_;
  NodeLookup node_of_;
  JobTable table_;
};

// A stop with the job's checkpoint signal (preemptions and drains only).
void FillStop(const v1::Job& job, const std::string& workload_id, v1::Stop* stop);

}  // namespace drover::server
