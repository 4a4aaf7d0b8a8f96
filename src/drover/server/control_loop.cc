#include "drover/server/control_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

constexpr int64_t kRecoverPage = 1000;

// Every record under `prefix`, a page at a time: start-up holds one page of
// raw records at once, not the whole prefix. Only the loop writes these
// keys, and not while it recovers, so the pages agree.
Status ForEachRecord(store::Store* store, std::string_view prefix,
                     const std::function<void(const store::KeyValue&)>& fn, int64_t* revision) {
  std::string start;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(store::RangeResult page, store->Range(std::string(prefix), kRecoverPage, start));
    *revision = page.revision;
    for (const store::KeyValue& kv : page.kvs) fn(kv);
    if (!page.more || page.kvs.empty()) return Status::Ok();
    start = page.kvs.back().key + '\0';
  }
}

ControlLoopOptions WithDerivedLease(ControlLoopOptions o) {
  o.lease = o.lease.Derive();
  return o;
}

// CPU time of the calling thread.
int64_t ThreadCpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

ControlLoop::ControlLoop(store::Store* store, Clock* clock, ControlLoopOptions options)
    : store_(store),
      clock_(clock),
      options_(WithDerivedLease(std::move(options))),
      loop_("control-loop"),
      sched_(options_.scheduler),
      lifecycle_(&sched_, &batch_, clock,
                 [this](const v1::Job& job, const std::set<std::string>& nodes) { nodes_.JobEndedOn(job, nodes); }),
      jobs_(lifecycle_.table()),
      nodes_({options_.lease, clock, options_.lease_clock, options_.leading}, &sched_, &batch_, &lifecycle_, &board_),
      tenants_(&options_.tenants, &options_.tenant_defaults, &sched_, &batch_, &lifecycle_.table(), clock),
      deployments_(&options_.deployments, &sched_, &batch_, &lifecycle_.table(), clock, DeploymentHooks()),
      archiver_({options_.archive, options_.archive_after, options_.archive_retention, options_.keep_revisions}, store,
                clock, &lifecycle_, &batch_, ArchiverHooks()) {
  loop_.SetBatchHook([this] { AfterBatch(); });
  lifecycle_.SetRevisionDigest([this](const v1::Job& replica) {
    return deployments_.ImageDigest(replica.spec().tenant(), replica.spec().deployment(),
                                    replica.spec().deployment_revision());
  });
  lifecycle_.SetNodeLookup([this](const std::string& name) -> const v1::Node* {
    auto it = nodes_.nodes().find(name);
    return it == nodes_.nodes().end() ? nullptr : &it->second.node;
  });
  if (options_.metrics != nullptr) {
    // 0.1 us .. ~1.7 s, two buckets per doubling (x1.41): a decision
    // takes a fraction of a microsecond to a few, a pass over a long queue
    // up to milliseconds; the top buckets catch the pathological.
    auto bounds = metrics::ExponentialBuckets(1e-7, std::sqrt(2.0), 49);
    auto pass = options_.metrics->AddHistogram(
        "drover_scheduler_pass_duration_seconds",
        "Wall-clock time of one scheduling pass (queue order, placements, preemptions).", *bounds);
    auto decision = options_.metrics->AddHistogram(
        "drover_scheduler_decision_duration_seconds",
        "Wall-clock time per decision: a pass's time divided by the pending jobs it decided about (bound, preempted "
        "for, or told why they wait), once per such job.",
        *bounds);
    auto decision_cpu = options_.metrics->AddHistogram(
        "drover_scheduler_decision_cpu_seconds",
        "CPU time of the control loop's thread per decision: as drover_scheduler_decision_duration_seconds, without "
        "the time the thread was not running (preempted by other threads of a busy machine).",
        *bounds);
    auto total = options_.metrics->AddCounter("drover_scheduler_decisions_total",
                                              "Scheduling decisions made, by kind (bind, preempt).");
    // 100 us .. ~13 s, two buckets per doubling: a fsync'd SQLite write
    // takes a millisecond or a few, an etcd round trip more.
    auto commit = options_.metrics->AddHistogram(
        "drover_store_commit_duration_seconds",
        "Wall-clock time of one group commit: the store transaction(s) of a batch that had records to write.",
        *metrics::ExponentialBuckets(1e-4, std::sqrt(2.0), 35));
    auto commit_failures =
        options_.metrics->AddCounter("drover_store_commit_failures_total",
                                     "Group commits the store refused or failed (the loop rebuilt its state).");
    if (commit.ok() && commit_failures.ok()) {
      commit_seconds_ = (*commit)->With({});
      commit_failures_ = (*commit_failures)->With({});
    }
    if (pass.ok() && decision.ok() && decision_cpu.ok() && total.ok()) {
      // The series, looked up once: the pass records into them lock-free.
      pass_seconds_ = (*pass)->With({});
      decision_seconds_ = (*decision)->With({});
      decision_cpu_seconds_ = (*decision_cpu)->With({});
      latency_bounds_ = (*decision)->bounds();
      binds_total_ = (*total)->With({{"kind", "bind"}});
      preempts_total_ = (*total)->With({{"kind", "preempt"}});
    }
  }
}

ControlLoop::~ControlLoop() { Stop(); }

Status ControlLoop::Start() {
  DROVER_RETURN_IF_ERROR(options_.lease.Validate());
  DROVER_RETURN_IF_ERROR(ValidateDeploymentOptions(options_.deployments));
  DROVER_RETURN_IF_ERROR(LoadGossipSecret());
  DROVER_RETURN_IF_ERROR(Recover());
  archiver_.Start();
  loop_.Start();
  ScheduleLimitChecks();
  ScheduleLeaseChecks();
  ScheduleArchiving();
  ScheduleDeploymentChecks();
  return Status::Ok();
}

void ControlLoop::Stop() {
  archiver_.Stop();
  loop_.Stop();
}

Status ControlLoop::EnsureRecovered() {
  if (!degraded_) return Status::Ok();
  if (Status s = Recover(); !s.ok()) {
    return Unavailable("the store is unavailable; state cannot be read: " + s.message());
  }
  degraded_ = false;
  spdlog::info("the store is back; serving again");
  return Status::Ok();
}

// Rebuilds into fresh containers and swaps them in only when every read
// worked: a failed rebuild leaves the previous state (and its id counter)
// alone rather than serving, and later overwriting records, from nothing.
Status ControlLoop::Recover() {
  sched::Scheduler sched(options_.scheduler);
  for (const sched::TenantInfo& t : options_.tenants) {
    if (Status s = sched.SetTenant(t); !s.ok()) {
      return Status(s.code(), fmt::format("tenant '{}': {}", t.name, s.message()));
    }
  }
  DROVER_ASSIGN_OR_RETURN(TenantBook::Map tenants, TenantBook::Load(store_, &sched));
  JobTable::Map jobs;
  uint64_t next_seq = 1;

  // Everything is read before anything live is touched: a read that fails
  // leaves the loop's state as it was.
  int64_t revision = 0;
  std::vector<v1::Node> stored_nodes;
  DROVER_RETURN_IF_ERROR(ForEachRecord(
      store_, kNodesPrefix,
      [&](const store::KeyValue& kv) {
        v1::Node node;
        if (!node.ParseFromString(kv.value)) {
          spdlog::error("skipping unreadable node record '{}'", kv.key);
          return;
        }
        stored_nodes.push_back(std::move(node));
      },
      &revision));
  DROVER_RETURN_IF_ERROR(ForEachRecord(
      store_, kJobsPrefix,
      [&](const store::KeyValue& kv) {
        v1::Job job;
        auto seq = ParseJobId(kv.key.substr(kJobsPrefix.size()));
        if (!seq.ok() || !job.ParseFromString(kv.value) || job.id() != kv.key.substr(kJobsPrefix.size())) {
          spdlog::error("skipping unreadable job record '{}'", kv.key);
          return;
        }
        jobs[*seq] = std::move(job);
        next_seq = std::max(next_seq, *seq + 1);
      },
      &revision));
  // Ids are never reused: jobs that had the highest ones may all be in the
  // archive by now.
  DROVER_ASSIGN_OR_RETURN(std::optional<store::KeyValue> next_kv, store_->Get(std::string(kNextJobKey)));
  if (next_kv) {
    uint64_t stored = 0;
    auto [end, ec] = std::from_chars(next_kv->value.data(), next_kv->value.data() + next_kv->value.size(), stored);
    if (ec == std::errc()) next_seq = std::max(next_seq, stored);
  }
  DROVER_ASSIGN_OR_RETURN(uint64_t archived_max, archiver_.MaxJobSeq());
  next_seq = std::max(next_seq, archived_max + 1);
  DROVER_ASSIGN_OR_RETURN(NodeRegistry::Map nodes, nodes_.Rebuild(std::move(stored_nodes), &sched));
  next_seq = std::max(next_seq, jobs_.next_seq());
  DROVER_ASSIGN_OR_RETURN(DeploymentController::Map deployments, DeploymentController::Load(store_, jobs, NowNs()));
  DROVER_ASSIGN_OR_RETURN(JobLifecycle::Rebuilt rebuilt,
                          JobLifecycle::Rebuild(std::move(jobs), next_seq, &sched, NowNs()));
  sched_ = std::move(sched);
  settled_generation_ = 0;  // a new scheduler counts from 0 again
  lifecycle_.Replace(std::move(rebuilt.table));
  nodes_.Replace(std::move(nodes));
  tenants_.Replace(std::move(tenants));
  deployments_.Replace(std::move(deployments));
  archiver_.Replace(std::move(rebuilt.ended));
  ReplaceReplica();
  spdlog::info("recovered {} nodes and {} jobs ({} queued, {} bound or running) at store revision {}",
               nodes_.nodes().size(), jobs_.size(), rebuilt.queued, rebuilt.bound, revision);
  return Status::Ok();
}

int64_t ControlLoop::NowNs() const { return ToUnixNanos(clock_->Now()); }
int64_t ControlLoop::NowMs() const { return NowNs() / 1'000'000; }

void ControlLoop::AfterBatch() {
  if (!EnsureRecovered().ok()) return;
  // Replicas to start or stop go into this batch's pass and commit.
  if (batch_.TakeDeploymentJobsChanged()) deployments_.MarkDirty();
  deployments_.ReconcileIfDirty();
  // A batch of reads, or of reports that change no job's claim on GPUs,
  // leaves the scheduler's inputs as the last pass saw them: that pass's
  // answer stands, and no pass runs (a `drover jobs`, a dashboard tick or
  // a log poll costs no decision). While jobs wait, a pass still runs at
  // least once a second: priority aging moves with the clock.
  const int64_t now_ms = NowMs();
  if (sched_.generation() == settled_generation_ &&
      (sched_.pending() == 0 || now_ms - last_pass_ms_ < kIdlePassEveryMs)) {
    ++passes_skipped_;
    Commit();
    return;
  }
  // The CPU clock is a system call (about half a microsecond here): read
  // outside the wall-clock window, so that the wall time is the pass's own.
  const int64_t started_cpu = pass_seconds_ != nullptr ? ThreadCpuNs() : 0;
  auto started = std::chrono::steady_clock::now();
  sched::Decisions decisions = sched_.Schedule(now_ms);
  ++passes_run_;
  last_pass_ms_ = now_ms;
  // A pass that decided something may leave more to decide (its preemption
  // searches are budgeted): the next batch passes again.
  settled_generation_ = decisions.bindings.empty() && decisions.preemptions.empty() ? sched_.generation() : 0;
  decisions_ += static_cast<int64_t>(decisions.bindings.size() + decisions.preemptions.size());
  preemptions_ += static_cast<int64_t>(decisions.preemptions.size());
  if (decisions.promotions > 0) {
    spdlog::info("las: the starvation guard promoted {} waiting job(s) to the first level", decisions.promotions);
  }
  if (pass_seconds_ != nullptr) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    double cpu_seconds = static_cast<double>(ThreadCpuNs() - started_cpu) / 1e9;
    pass_seconds_->Observe(seconds);
    // As bench/sched_bench times one: Enqueue + Schedule of one job, which
    // binds it, or finds where it would wait (placement, reservation,
    // preemption search). A live pass decides about every pending job it
    // reaches, and the reservation and preemption searches are part of the
    // decisions of the jobs that wait (docs/performance.md).
    for (int i = 0; i < decisions.considered; ++i) {
      decision_seconds_->Observe(seconds / decisions.considered);
      decision_cpu_seconds_->Observe(cpu_seconds / decisions.considered);
    }
    binds_total_->Inc(static_cast<double>(decisions.bindings.size()));
    preempts_total_->Inc(static_cast<double>(decisions.preemptions.size()));
  }
  // Victims first: a binding never waits on them (their GPUs are free only
  // once they are requeued), but the records of one pass go out together.
  for (const sched::Preemption& p : decisions.preemptions) {
    v1::Job* job = lifecycle_.Find(p.job_id);
    if (job == nullptr || !rpc::HoldsGpus(job->status().state())) {
      spdlog::error("scheduler preempted job '{}', which holds no GPUs here", p.job_id);
      continue;
    }
    // Already on its way out (cancelled, preempted, a failed gang): it ends
    // or is requeued as it was going to; the refusal says so.
    if (Status s = lifecycle_.Stop(job, StopCause::Preempted(p.for_job, p.reason, p.grace_ms)); !s.ok()) {
      spdlog::debug("preemption of '{}' not applied: {}", p.job_id, s.message());
    }
  }
  for (const sched::Binding& b : decisions.bindings) {
    if (Status s = lifecycle_.Bind(b); !s.ok()) spdlog::debug("binding not applied: {}", s.message());
  }
  Commit();
}

void ControlLoop::Commit() {
  // A job of a deployment changed after its controller ran: it runs again
  // after the next batch.
  if (batch_.TakeDeploymentJobsChanged()) deployments_.MarkDirty();
  Batch::Sealed sealed = batch_.Seal();
  bool with_audit = false;
  const bool writes = !sealed.ops.empty() || !sealed.audit.empty();
  const auto commit_started = std::chrono::steady_clock::now();
  Status committed = WriteBatch(&sealed, &with_audit);
  if (writes && commit_seconds_ != nullptr) {
    commit_seconds_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - commit_started).count());
    if (!committed.ok()) commit_failures_->Inc();
  }
  std::vector<std::shared_ptr<std::atomic<bool>>> audited = std::move(sealed.audit_recorded);
  std::vector<Ack> acks = std::move(sealed.acks);
  std::set<uint64_t> persisted = std::move(sealed.persisted);
  std::vector<uint64_t> unlisted = std::move(sealed.unlisted);
  if (!committed.ok()) {
    spdlog::error("commit failed, rebuilding state from the store: {}", committed.ToString());
    batch_.ClearDesired();
    batch_.ClearTouched();  // Recover publishes every node
    // Agent reports of this batch were lost with it: restart every session so
    // that each agent reports its full state again.
    nodes_.ResetSessions();
    if (Status s = Recover(); !s.ok()) {
      degraded_ = true;
      replica_.SetUnavailable(Unavailable("the store is unavailable; state cannot be read: " + s.message()));
      node_replica_.SetUnavailable(Unavailable("the store is unavailable; state cannot be read: " + s.message()));
      spdlog::critical("cannot rebuild state from the store; refusing commands until it can: {}", s.ToString());
    }
    nodes_.SendDesired();  // Recover marked every node with a session
    Status answer = Unavailable("the change was not persisted: " + committed.message());
    for (Ack& ack : acks) ack(answer);
  } else {
    // Nodes first: a job bound in this batch starts while the rest of the
    // commit's work (replicas, answers, watchers) goes on. (PublishNodes
    // still reads the batch's resends.)
    nodes_.SendDesired();
    // Readers see the batch before its commands are answered.
    std::vector<std::pair<uint64_t, JobReplica::JobPtr>> copies;
    copies.reserve(persisted.size() + unlisted.size());
    for (uint64_t seq : persisted) {
      auto it = jobs_.find(seq);
      if (it == jobs_.end()) continue;
      copies.emplace_back(seq, std::make_shared<const v1::Job>(it->second));
      // Due for the archive archive_after from now.
      if (rpc::IsTerminal(it->second.status().state())) archiver_.Ended(seq);
    }
    for (uint64_t seq : unlisted) copies.emplace_back(seq, nullptr);  // in the archive now
    replica_.Update(std::move(copies));
    nodes_.Publish(&node_replica_);
    PublishBoard(persisted);
    if (with_audit) {
      for (const auto& recorded : audited) recorded->store(true);
    }
    for (Ack& ack : acks) ack(Status::Ok());
    // Committed: push to watchers what they wait on. Who wants a job is
    // asked now, after the replica has the batch: a watcher that subscribes
    // later reads the batch from the replica, one that subscribed earlier is
    // pushed it here (asked at Persist, a watcher that subscribed in between
    // read the replica's older copy and never heard of the job's end).
    if (options_.watch != nullptr) {
      for (uint64_t seq : persisted) {
        auto it = jobs_.find(seq);
        if (it != jobs_.end() && options_.watch->Wanted(it->second)) options_.watch->Publish(View(it->second));
      }
    }
  }
  batch_.ClearDesired();
}

Status ControlLoop::WriteBatch(Batch::Sealed* sealed, bool* with_audit) {
  std::vector<store::Op>& ops = sealed->ops;
  std::vector<auth::AuditEntry>& audit_entries = sealed->audit;
  auto applied = [](const Result<store::TxnResult>& r) {
    return !r.ok() ? r.status() : r->succeeded ? Status::Ok() : Aborted("store transaction did not apply");
  };
  *with_audit = false;
  // A batch larger than one transaction may be (an etcd store's limits):
  // the records that do not fit beside the audit entries go first, in
  // transactions of their own. Atomic per transaction only; docs/ha.md says
  // how to size etcd's limits so that this does not happen.
  const store::Limits limits = store_->limits();
  size_t audit_ops = audit_entries.empty() ? 0 : audit_entries.size() + 1;
  if (audit_ops + 1 > limits.max_ops) {
    // Too many to chain in one transaction: the callers record their own.
    audit_entries.clear();
    audit_ops = 0;
  }
  if (limits.max_ops != SIZE_MAX || limits.max_bytes != SIZE_MAX) {
    const size_t op_budget = limits.max_ops - audit_ops;
    const size_t byte_budget = limits.max_bytes - std::min(limits.max_bytes / 2, audit_ops * 2048);
    size_t keep = 0;
    size_t bytes = 0;
    while (keep < ops.size() && keep < op_budget && bytes + store::OpBytes(ops[ops.size() - 1 - keep]) <= byte_budget) {
      bytes += store::OpBytes(ops[ops.size() - 1 - keep]);
      ++keep;
    }
    if (keep < ops.size()) {
      const auto split = ops.end() - static_cast<std::ptrdiff_t>(keep);
      DROVER_RETURN_IF_ERROR(store_->WriteInChunks(std::vector<store::Op>(ops.begin(), split)));
      ops.erase(ops.begin(), split);
    }
  }
  if (!audit_entries.empty()) {
    // The calls' audit entries in the same transaction: one durable write.
    const auto count = static_cast<int64_t>(audit_entries.size());
    int64_t last_seq = 0;
    const size_t records = ops.size();
    auto r = options_.audit->CommitWith(
        std::move(audit_entries),
        [&](std::vector<store::Compare> compares, std::vector<store::Op> entries) {
          *with_audit = true;
          ops.resize(records);  // a second call (the audit head moved) replaces the first call's entries
          ops.insert(ops.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
          return store_->Txn(compares, ops, {});
        },
        &last_seq);
    audit_entries.clear();
    if (*with_audit) {
      Status written = applied(r);
      // Moving old entries to the archive takes a while: not on this thread.
      if (written.ok() && options_.audit->TrimDue(last_seq, count)) {
        archiver_.Background([audit = options_.audit] {
          if (Status s = audit->Trim(); !s.ok()) spdlog::warn("audit log trim failed: {}", s.ToString());
        });
      }
      return written;
    }
    // An audit log that cannot be read (its head) leaves the batch to commit
    // alone, and the recording to the callers.
    spdlog::error("audit entries not written with the batch: {}", r.status().ToString());
  }
  if (ops.empty()) return Status::Ok();
  return applied(store_->Txn({}, ops, {}));
}

v1::Job ControlLoop::View(const v1::Job& job) const {
  v1::Job out = job;
  rpc::BlankSecrets(&out);
  if (job.status().state() == v1::JOB_STATE_PENDING) {
    out.mutable_status()->set_message(PendingMessage(job));
    out.mutable_status()->set_wait_class(std::string(WaitClass(job)));
  }
  return out;
}

std::string ControlLoop::PendingMessage(const v1::Job& job) const {
  // Why it waits now, and, for a job queued again, why it stopped.
  return WithOwnMessage(WaitReason(job), job);
}

std::string ControlLoop::WithOwnMessage(std::string reason, const v1::Job& job) {
  if (!job.status().message().empty()) reason += " (" + job.status().message() + ")";
  return reason;
}

std::string ControlLoop::WaitReason(const v1::Job& job) const {
  auto seq = ParseJobId(job.id());
  if (seq.ok() && jobs_.held().contains(*seq)) {
    return fmt::format("waiting: array {} runs at most {} tasks at once", job.array().array_id(),
                       job.array().max_running());
  }
  if (seq.ok() && jobs_.waiting().contains(*seq)) {
    std::string ids;
    for (const v1::JobDependency& d : job.spec().after()) {
      if (std::find(job.after_met().begin(), job.after_met().end(), d.job_id()) != job.after_met().end()) continue;
      ids += (ids.empty() ? "" : ", ") + d.job_id();
    }
    return fmt::format("waiting for {} to end", ids);
  }
  return sched_.PendingReason(job.id());
}

std::string_view ControlLoop::WaitClass(const v1::Job& job) const {
  auto seq = ParseJobId(job.id());
  if (seq.ok() && jobs_.held().contains(*seq)) return "array_limit";
  if (seq.ok() && jobs_.waiting().contains(*seq)) return "dependency";
  return sched_.PendingClass(job.id());
}

std::future<Result<Done>> ControlLoop::Barrier() {
  // Answered after the batch it lands in has passed and committed (even a
  // batch that changed nothing), so that reads, which the replica serves,
  // see what everything posted before it led to.
  return Call<Done>([this]() -> Result<Done> {
    batch_.OnCommit([](const Status&) {});  // the answer waits for the commit
    return Done{};
  });
}

}  // namespace drover::server
