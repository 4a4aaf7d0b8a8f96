#pragma once
// ControlLoop: the one owner of the cluster state and the scheduler.
//
// API handlers and agent sessions call its methods from any thread; each
// call posts a command to the loop thread and returns a future. Commands are
// applied in memory and produce store records; after each batch of commands
// the loop runs the scheduler, then commits every record of the batch in one
// store transaction (group commit), and only then answers the callers and
// tells agents their new desired workloads. Nothing an agent runs and no
// answer a client gets was not committed first.
//
// On Start() the state is rebuilt from the store: jobs, their bindings and
// the queue in submission order; nodes stay not-ready until their agent's
// session returns. The scheduler's policies and tenants come from
// ControlLoopOptions (the server's configuration), not from the store.
//
// Preemption: a decision to preempt a job marks it PREEMPTING and drops it
// from its node's desired set, with a Stop entry that carries the grace
// period; once the agent reports the process gone, the job is queued again
// (PENDING, same submission order) or, if it happened to finish with code
// 0, it SUCCEEDED. See control_loop_jobs.cc; gangs (one workload per
// replica) are in control_loop_gangs.cc. If a commit fails, the batch's callers get the error and
// the state is rebuilt from the store again, so memory never runs ahead of
// what is durable; while the store cannot even be read, every command gets
// kUnavailable and nothing is written.
//
// Thread-safety: public methods are thread-safe; everything else runs on the
// loop thread.

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "drover/auth/audit.h"
#include "drover/common/clock.h"
#include "drover/common/metrics.h"
#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/sched/scheduler.h"
#include "drover/server/archiver.h"
#include "drover/server/batch.h"
#include "drover/server/deployment_controller.h"
#include "drover/server/deployments.h"
#include "drover/server/job_lifecycle.h"
#include "drover/server/job_replica.h"
#include "drover/server/job_watch.h"
#include "drover/server/loop_board.h"
#include "drover/server/loop_stats.h"
#include "drover/server/node_registry.h"
#include "drover/server/node_replica.h"
#include "drover/server/tenant_book.h"
#include "drover/store/sqlite/archive.h"
#include "drover/store/store.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// The value of a command that answers only "done".
struct Done {};

struct ControlLoopOptions {
  sched::Config scheduler;
  // Tenants with weights, guarantees and borrowing limits; a job of any
  // other tenant gets weight 1, no guarantee and no limit.
  std::vector<sched::TenantInfo> tenants;
  // The pending-jobs and array-size quotas of tenants that set none
  // (tenant_book.h); none unless given (the server's flags give them).
  TenantDefaults tenant_defaults;
  // Where the loop records its scheduling pass and decision latencies; null
  // records nothing.
  metrics::Registry* metrics = nullptr;
  LeaseOptions lease;
  // Measures leases; null: the machine's monotonic clock.
  Clock* lease_clock = nullptr;
  // Gets every job whose change was committed (server push); null: none.
  JobWatch* watch = nullptr;
  // Where a finished job goes once it has been finished for archive_after:
  // out of the store and the loop's memory, still found by GetJob and
  // ListJobsPage (archiver.h). Null: finished jobs stay.
  store::Archive* archive = nullptr;
  std::chrono::milliseconds archive_after{std::chrono::minutes(5)};
  // The epoch of the leadership this loop serves under (0: none); agents
  // are told it when they register (RegisterResponse.leader_epoch).
  int64_t leader_epoch = 0;
  // Archived jobs that ended longer ago than this are deleted (checked
  // hourly); 0: kept for good.
  std::chrono::milliseconds archive_retention{0};
  // Every 10 s the store forgets its history older than this many
  // revisions (nothing reads it but a watch from an old revision); 0: never.
  // A revision is a group commit: 1,000 of them are seconds to minutes.
  int64_t keep_revisions = 1'000;
  // Services and deployments (deployment_controller.h).
  DeploymentOptions deployments;
  // Where the calls that carry an AuditNote are recorded, in the commit of
  // the batch that answers them; null: nowhere (the caller audits).
  auth::AuditLog* audit = nullptr;
  // Whether this server still leads (an etcd store: store/leader.h's
  // Leading()); null: always. Asked before anything goes to an agent: a
  // leader paused past its lease must not send desired workloads or renew
  // agents' fences from what it remembers, even before it learns it was
  // deposed.
  std::function<bool()> leading;
};

// A call to record in the audit log with the batch that answers it (its
// target and result are the loop's to fill in). `recorded` turns true once
// that batch has committed with the entry; until then (a failed commit, no
// audit log, no answer) recording the call is the caller's.
struct AuditNote {
  auth::Principal who;
  std::string action;
  std::shared_ptr<std::atomic<bool>> recorded = std::make_shared<std::atomic<bool>>(false);
};

// Whether `job` passes every filter of `f` (state, tenant, array, node,
// end time; paging aside).
bool JobMatches(const v1::ListJobsRequest& f, const v1::Job& job);

// The most tasks one job array (or one batch) may have: each is a job of
// its own, stored in the same commit.
inline constexpr int64_t kMaxArrayTasks = 100'000;
// The most bytes one job's spec may take: its stored record (spec, status,
// a bounded list of attempts) stays far below the store's value limits
// (etcd's request limit is 1.5 MiB), so no record fails a commit.
inline constexpr size_t kMaxJobSpecBytes = 64 * 1024;

class ControlLoop {
 public:
  ControlLoop(store::Store* store, Clock* clock, ControlLoopOptions options = {});
  ~ControlLoop();

  Status Start();
  void Stop();

  // Jobs. `spec` must already be normalized (rpc::NormalizeJobSpec).
  std::future<Result<v1::Job>> Submit(v1::JobSpec spec, std::optional<AuditNote> audit = std::nullopt);
  std::future<Result<v1::Job>> Cancel(std::string id);
  // Reads: served from the committed state (JobReplica) on the caller's
  // thread; only the pending jobs among the answer cost the loop a call,
  // for why they wait. They run no scheduling pass.
  std::future<Result<v1::Job>> GetJob(std::string id);
  // Every live job the filter (state, tenant, array) picks, in submission
  // order; for an array, its archived tasks too. For the server's own use:
  // clients page through ListJobsPage.
  std::future<Result<std::vector<v1::Job>>> ListJobs(v1::ListJobsRequest filter);
  // One page of live and archived jobs together, newest first, by every
  // filter of the request. `req` must be validated (page_size 1..5000).
  std::future<Result<v1::ListJobsResponse>> ListJobsPage(v1::ListJobsRequest req);
  // Job arrays and batches (control_loop_arrays.cc): every job is accepted
  // and stored in one commit, or none is. `spec`s must be normalized and
  // `array` validated (its indices fit kMaxArrayTasks).
  std::future<Result<v1::SubmitJobResponse>> SubmitArray(v1::JobSpec spec, v1::ArraySpec array,
                                                         std::optional<AuditNote> audit = std::nullopt);
  std::future<Result<std::vector<v1::Job>>> SubmitBatch(std::vector<v1::JobSpec> specs,
                                                        std::optional<AuditNote> audit = std::nullopt);
  // Cancels every unfinished task of the array; how many it cancelled.
  std::future<Result<int64_t>> CancelArray(std::string array_id);

  // Nodes. GetNode and ListNodes read the views the loop published at its
  // last commit (NodeReplica), on the caller's thread.
  std::future<Result<v1::Node>> GetNode(std::string name);
  std::future<Result<std::vector<v1::Node>>> ListNodes();
  // With `requeue`, the node's jobs are also stopped (checkpoint signal
  // first) and queued again, as for a preemption.
  std::future<Result<v1::Node>> SetDrained(std::string name, bool drained, bool requeue = false);

  // Agents. `req` must already be validated (rpc::ValidateRegister).
  std::future<Result<Done>> RegisterNode(v1::RegisterRequest req);
  std::future<Result<Done>> SessionOpened(std::string node, std::shared_ptr<AgentSink> sink);
  // The same, answered through `done` on the loop's thread (it must not
  // block): for callers that may not wait, such as gRPC's reactors.
  void SessionOpened(std::string node, std::shared_ptr<AgentSink> sink, std::function<void(Result<Done>)> done);
  void SessionClosed(std::string node, const AgentSink* sink);
  // Renews the node's lease (and those of the peers it heard) and answers
  // with a HeartbeatAck on `sink`; applies the GPU health and telemetry of
  // the heartbeat, which must already be validated (rpc::ValidateHeartbeat).
  // A GPU that turned unhealthy stops taking work and the jobs on it are
  // stopped, then queued again or failed by their restart policy. A
  // heartbeat of a session that is not the node's current one, or of a node
  // declared lost, is refused: the session is reset and the agent registers
  // again. A null `sink` (tests) skips the session check.
  void Heartbeat(std::string node, v1::Heartbeat hb = {}, std::shared_ptr<AgentSink> sink = nullptr);
  // Turns unrenewed leases into Suspect and Lost now (it also runs every
  // half heartbeat interval).
  std::future<Result<Done>> CheckLeases();
  // Relays a fault to the agent of `node` for its simulated GPU `gpu`.
  std::future<Result<Done>> InjectFault(std::string node, int gpu, std::string fault);
  // Relays an image pull to `nodes` (every ready node when empty); answers
  // the nodes told (NodeRegistry::PullImage).
  std::future<Result<std::vector<std::string>>> PullImage(std::vector<std::string> nodes, v1::PullImage pull);
  std::future<Result<LoopStats>> Stats();

  // Dashboards (control_loop_views.cc). Fleet is served from the
  // replicas on the caller's thread, as GetNode and ListNodes are.
  std::future<Result<v1::Fleet>> Fleet();
  std::future<Result<v1::SchedulerStats>> SchedulerStats();
  std::future<Result<v1::ListTenantsResponse>> ListTenants();
  std::future<Result<v1::GpuHistory>> GpuHistory(std::string node, int gpu);
  void HandleStatus(std::string node, v1::StatusReport report);

  // Tenants as data (control_loop_tenants.cc): stored, overriding the
  // configured ones of the same name.
  std::future<Result<v1::TenantStatus>> SetTenant(v1::Tenant tenant, bool create);
  std::future<Result<Done>> DeleteTenant(std::string name);
  // Stops jobs past their tenant's runtime limit now (it also runs every second).
  std::future<Result<Done>> CheckLimits();

  const LeaseOptions& lease() const { return options_.lease; }
  const DeploymentOptions& deployment_options() const { return options_.deployments; }
  int64_t leader_epoch() const { return options_.leader_epoch; }
  // The gossip group's cluster id and key (made once, kept in the store);
  // set by Start().
  uint64_t gossip_cluster() const { return gossip_cluster_; }
  const std::string& gossip_key() const { return gossip_key_; }
  // The gossip endpoints of every node but `node` that is not lost, and the
  // list's version.
  std::future<Result<std::pair<int64_t, std::vector<v1::Peer>>>> Peers(std::string node);

  // Moves the finished jobs that are due (finished for archive_after) to
  // the archive now, as it does every second; answers how many left the
  // store, once that is committed (a batch of at most 1,000).
  std::future<Result<int64_t>> ArchiveDueNow();

  // Resolves once every command posted before it has been applied and committed.
  std::future<Result<Done>> Barrier();

  // Deployments (control_loop_deployments.cc; docs/deployments.md). The
  // loop keeps each one's desired count of replica jobs of its current
  // template revision alive, rolls them over on a template change (a new
  // one ready before an old one stops) and scales on the gateways' load.
  // `spec` must be normalized (NormalizeDeploymentSpec) with its tenant and
  // owner set. kAlreadyExists without `replace` when it exists, kNotFound
  // with `replace` when it does not; kAlreadyExists when another
  // deployment of the tenant serves the same model name. Deployments are
  // named within their tenant: (tenant, name).
  std::future<Result<v1::Deployment>> ApplyDeployment(v1::DeploymentSpec spec, bool replace);
  std::future<Result<v1::Deployment>> GetDeployment(std::string tenant, std::string name);
  std::future<Result<std::vector<v1::Deployment>>> ListDeployments();
  // A fixed deployment runs `replicas` from now on; an auto-scaled one
  // moves to it (clamped to min..max) and scales on from there.
  std::future<Result<v1::Deployment>> ScaleDeployment(std::string tenant, std::string name, int32_t replicas);
  // Cancels every replica and forgets the deployment; answers its last view.
  std::future<Result<v1::Deployment>> DeleteDeployment(std::string tenant, std::string name);
  // Every deployment's model and the ready replicas' endpoints (callers
  // filter by tenant).
  std::future<Result<v1::EndpointsResponse>> ServingEndpoints();
  // A gateway's load report (validated: ValidateLoadReport); it counts for
  // options.deployments.load_staleness_ms.
  std::future<Result<Done>> ReportLoad(v1::ReportLoadRequest report);
  // The stored quota of a tenant (empty for one that is only configured or
  // unknown): the gateway's per-tenant limits.
  std::future<Result<v1::TenantQuota>> TenantQuotaOf(std::string tenant);
  // Runs the deployment controller now (it also runs every second and
  // after every change of a replica): tests advance the clock, then call it.
  std::future<Result<Done>> CheckDeployments();

 private:
  using Ack = Batch::Ack;

  // The one way to run code on the loop: `fn` runs there once the state is
  // readable (else `done` gets kUnavailable; with kAnyState, such as a
  // heartbeat that must not make the loop reread the store, it runs
  // anyway); its answer goes to `done` (may be null) on the loop's thread
  // at once when the batch has written nothing so far, else only after the
  // batch commits. Call is the same with a future.
  enum class Needs { kState, kAnyState };
  template <typename T>
  void CallThen(std::function<Result<T>()> fn, std::function<void(Result<T>)> done, Needs needs = Needs::kState);
  template <typename T>
  std::future<Result<T>> Call(std::function<Result<T>()> fn) {
    auto promise = std::make_shared<std::promise<Result<T>>>();
    auto future = promise->get_future();
    CallThen<T>(std::move(fn), [promise](Result<T> r) { promise->set_value(std::move(r)); });
    return future;
  }
  // A command that answers nothing (agents' reports, timers).
  void Run(std::function<void()> fn, Needs needs = Needs::kState) {
    CallThen<Done>(
        [fn = std::move(fn)]() -> Result<Done> {
          fn();
          return Done{};
        },
        nullptr, needs);
  }

  Status Recover();
  // Retries Recover() while the last one failed; kUnavailable until it works.
  Status EnsureRecovered();
  void AfterBatch();
  void Commit();
  // Writes the sealed batch: its records, with its audit entries chained
  // onto the audit log in the same transaction (`with_audit` tells whether
  // they went in).
  Status WriteBatch(Batch::Sealed* sealed, bool* with_audit);
  int64_t NowNs() const;
  int64_t NowMs() const;

  // The jobs' submits (control_loop_jobs.cc): checks the quotas and the
  // fit of `specs` (an array repeats its one spec), then stores them (all,
  // or none on an error).
  Result<std::vector<uint64_t>> AddJobs(const std::vector<v1::JobSpec>& specs, const v1::ArraySpec* array);
  // Cancels one unfinished job, logging a refusal.
  void CancelOne(const v1::Job& job);
  // ---- leases (control_loop_nodes.cc; the registry's in node_leases.cc) ----
  void ScheduleLeaseChecks();
  v1::Job View(const v1::Job& job) const;
  // Why a pending job waits, as View puts it in its status message: the
  // scheduler's (or its array's) reason, then the job's own message.
  std::string PendingMessage(const v1::Job& job) const;
  std::string WaitReason(const v1::Job& job) const;  // the first part
  std::string_view WaitClass(const v1::Job& job) const;  // its class (JobStatus.wait_class)
  // `reason`, then the job's own message (why it stopped, for a job queued again).
  static std::string WithOwnMessage(std::string reason, const v1::Job& job);
  // Answers the replica's copies, asking the loop (one call) why the
  // pending ones among them wait.
  void AnswerWithReasons(std::vector<JobReplica::JobPtr> jobs, std::function<void(Result<std::vector<v1::Job>>)> done);
  // The whole job set into replica_ (after Recover).
  void ReplaceReplica();
  // ---- archive (control_loop_archive.cc; the archiver's in archiver.cc) ----
  // The archiver's way onto the loop.
  Archiver::Hooks ArchiverHooks();
  // Every second: the archiver's Tick.
  void ScheduleArchiving();
  // ---- tenants (control_loop_tenants.cc; the book's in tenant_book.cc) ----
  // Stops the jobs past their tenant's runtime limit.
  void EnforceRuntimeLimits();
  void ScheduleLimitChecks();

  // ---- deployments (control_loop_deployments.cc; the controller's in deployment_controller.cc) ----
  // The controller's submit, cancel and pending reason: the loop's.
  DeploymentController::Hooks DeploymentHooks();
  void ScheduleDeploymentChecks();

  Status LoadGossipSecret();

  store::Store* store_;
  Clock* clock_;
  uint64_t gossip_cluster_ = 0;
  std::string gossip_key_;
  const ControlLoopOptions options_;
  runtime::EventLoop loop_;

  // Owned by the loop thread.
  sched::Scheduler sched_;
  // The open group commit: every owner below writes through it.
  Batch batch_;
  // The jobs and their state: changed only by lifecycle_'s edges, read
  // here through jobs_.
  JobLifecycle lifecycle_;
  const JobTable& jobs_;
  // The nodes, their sessions and leases.
  NodeRegistry nodes_;
  // The stored tenants and their quotas.
  TenantBook tenants_;
  // The deployments and their replicas.
  DeploymentController deployments_;
  // The finished jobs on their way to the archive, and the archive's reads.
  Archiver archiver_;
  JobReplica replica_;        // GetJob and ListJobs read here, off the loop
  NodeReplica node_replica_;  // GetNode, ListNodes and Fleet read here, off the loop
  // Adds the call `note` names (when it names one) to the open batch.
  void NoteAudit(const std::optional<AuditNote>& note, std::string target, const Status& result);
  bool degraded_ = false;  // the last rebuild from the store failed
  // Series of options_.metrics; null when it is.
  metrics::Histogram* pass_seconds_ = nullptr;
  metrics::Histogram* commit_seconds_ = nullptr;  // batches that wrote to the store
  metrics::Counter* commit_failures_ = nullptr;
  metrics::Histogram* decision_seconds_ = nullptr;
  metrics::Histogram* decision_cpu_seconds_ = nullptr;
  std::vector<double> latency_bounds_;  // decision_seconds_'s
  metrics::Counter* binds_total_ = nullptr;
  metrics::Counter* preempts_total_ = nullptr;
  // Scheduler statistics for dashboards (control_loop_views.cc), into board_.
  void RecordSchedulerStats();
  int64_t decisions_ = 0;
  int64_t preemptions_ = 0;
  // Pending reasons, scheduler statistics, tenants and GPU history for
  // readers off the loop (loop_board.h). At each commit, before its
  // answers: a new reason epoch when a pass ran, the scheduler changed or
  // a job was held back (an array, a dependency) or let go since the last; the usage of the
  // tenants of the batch's jobs, every tenant when tenants_ changed.
  LoopBoard board_;
  void PublishBoard(const std::set<uint64_t>& persisted);
  uint64_t reason_epoch_ = 1;
  uint64_t reason_generation_ = 0;
  uint64_t reason_gates_ = 0;  // JobTable::gates_version() when the reasons were rendered
  bool tenants_changed_ = true;
  // AfterBatch skips the pass while the scheduler's generation is the one
  // a pass that decided nothing left (0: pass next batch), unless jobs wait
  // and kIdlePassEveryMs has passed since the last pass.
  static constexpr int64_t kIdlePassEveryMs = 1000;
  uint64_t settled_generation_ = 0;
  int64_t last_pass_ms_ = 0;
  uint64_t passes_run_ = 0, passes_skipped_ = 0;
};

template <typename T>
void ControlLoop::CallThen(std::function<Result<T>()> fn, std::function<void(Result<T>)> done, Needs needs) {
  auto answer = std::make_shared<std::function<void(Result<T>)>>(std::move(done));
  auto give = [answer](Result<T> r) {
    if (*answer) (*answer)(std::move(r));
  };
  bool posted = loop_.Post([this, answer, give, needs, fn = std::move(fn)] {
    if (needs == Needs::kState) {
      if (Status s = EnsureRecovered(); !s.ok()) {
        give(s);
        return;
      }
    }
    Result<T> r = fn();
    if (!*answer) return;
    // Nothing to commit and no node view to publish: the answer needs no wait.
    if (!batch_.Pending()) {
      give(std::move(r));
      return;
    }
    batch_.OnCommit([give, r](const Status& committed) {
      if (committed.ok()) {
        give(r);
      } else {
        give(committed);
      }
    });
  });
  if (!posted) give(Unavailable("the control loop is stopped"));
}

}  // namespace drover::server
