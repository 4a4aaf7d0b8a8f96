#include "drover/server/control_loop.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <charconv>
#include <ctime>
#include <spdlog/spdlog.h>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

constexpr std::string_view kNodesPrefix = "/nodes/";
constexpr int64_t kRecoverPage = 1000;

// Every record under `prefix`, a page at a time: start-up holds one page of
// raw records at once, not the whole prefix. Only the loop writes these
// keys, and not while it recovers, so the pages agree.
Status ForEachRecord(store::Store* store, std::string_view prefix, const std::function<void(const store::KeyValue&)>& fn,
                     int64_t* revision) {
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
    : store_(store), clock_(clock), options_(WithDerivedLease(std::move(options))), loop_("control-loop"), sched_(options_.scheduler) {
  loop_.SetBatchHook([this] { AfterBatch(); });
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

template <typename T>
std::future<Result<T>> ControlLoop::Call(std::function<Result<T>()> fn) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  CallThen<T>(std::move(fn), [promise](Result<T> r) { promise->set_value(std::move(r)); });
  return future;
}

template <typename T>
void ControlLoop::CallThen(std::function<Result<T>()> fn, std::function<void(Result<T>)> done) {
  auto answer = std::make_shared<std::function<void(Result<T>)>>(std::move(done));
  bool posted = loop_.Post([this, answer, fn = std::move(fn)] {
    if (Status s = EnsureRecovered(); !s.ok()) {
      (*answer)(s);
      return;
    }
    Result<T> r = fn();
    // Nothing to commit and no node view to publish: the answer needs no wait.
    if (ops_.empty() && acks_.empty() && touched_nodes_.empty() && audit_entries_.empty()) {
      (*answer)(std::move(r));
      return;
    }
    acks_.push_back([answer, r](const Status& committed) {
      if (committed.ok()) {
        (*answer)(r);
      } else {
        (*answer)(committed);
      }
    });
  });
  if (!posted) (*answer)(Unavailable("the control loop is stopped"));
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
  std::map<std::string, v1::Tenant> tenants;
  DROVER_RETURN_IF_ERROR(LoadTenants(&sched, &tenants));
  std::map<uint64_t, v1::Job> jobs;
  std::map<std::string, NodeEntry> nodes;
  std::map<std::string, std::set<uint64_t>> active;
  std::map<std::string, ArrayGate> gates;
  std::set<uint64_t> held;
  uint64_t next_seq = 1;

  // Everything is read before anything live is touched: a read that fails
  // leaves the loop's state as it was.
  int64_t revision = 0;
  std::vector<v1::Node> stored_nodes;
  DROVER_RETURN_IF_ERROR(ForEachRecord(store_, kNodesPrefix, [&](const store::KeyValue& kv) {
    v1::Node node;
    if (!node.ParseFromString(kv.value)) {
      spdlog::error("skipping unreadable node record '{}'", kv.key);
      return;
    }
    stored_nodes.push_back(std::move(node));
  }, &revision));
  DROVER_RETURN_IF_ERROR(ForEachRecord(store_, kJobsPrefix, [&](const store::KeyValue& kv) {
    v1::Job job;
    auto seq = ParseJobId(kv.key.substr(kJobsPrefix.size()));
    if (!seq.ok() || !job.ParseFromString(kv.value) || job.id() != kv.key.substr(kJobsPrefix.size())) {
      spdlog::error("skipping unreadable job record '{}'", kv.key);
      return;
    }
    jobs[*seq] = std::move(job);
    next_seq = std::max(next_seq, *seq + 1);
  }, &revision));
  // Ids are never reused: jobs that had the highest ones may all be in the
  // archive by now.
  DROVER_ASSIGN_OR_RETURN(std::optional<store::KeyValue> next_kv, store_->Get(std::string(kNextJobKey)));
  if (next_kv) {
    uint64_t stored = 0;
    auto [end, ec] = std::from_chars(next_kv->value.data(), next_kv->value.data() + next_kv->value.size(), stored);
    if (ec == std::errc()) next_seq = std::max(next_seq, stored);
  }
  if (options_.archive != nullptr) {
    DROVER_ASSIGN_OR_RETURN(uint64_t archived_max, options_.archive->MaxJobSeq());
    next_seq = std::max(next_seq, archived_max + 1);
  }
  for (v1::Node& stored : stored_nodes) {
    NodeEntry entry;
    if (auto it = nodes_.find(stored.name()); it != nodes_.end()) {
      // Rebuilt after a failed commit: what was live stays.
      entry = std::move(it->second);
    } else {
      // A fresh start: every node gets a full lease to reconnect in.
      entry.heard_direct_ns = LeaseNowNs();
    }
    entry.node = std::move(stored);
    entry.record.reset();
    bool schedulable = Schedulable(entry);
    DROVER_RETURN_IF_ERROR(sched.UpsertNode(rpc::ToNodeInfo(entry.node, schedulable)));
    nodes[entry.node.name()] = std::move(entry);
  }
  std::vector<std::pair<int64_t, uint64_t>> ended;
  size_t queued = 0;
  size_t bound = 0;
  constexpr int64_t kNsPerMs = 1'000'000;
  // Tasks that hold GPUs count against their array's limit before any
  // pending one is queued.
  for (const auto& [seq, job] : jobs) {
    if (job.array().max_running() > 0 && rpc::HoldsGpus(job.status().state())) ++gates[job.array().array_id()].active;
  }
  for (auto& [seq, job] : jobs) {  // submission order, so the queue keeps its order
    v1::JobState state = job.status().state();
    if (options_.archive != nullptr && rpc::IsTerminal(state)) {
      int64_t end = job.status().end_time_unix_nanos();
      ended.emplace_back(end > 0 ? end : NowNs(), seq);
    }
    if (state == v1::JOB_STATE_PENDING) {
      DROVER_RETURN_IF_ERROR(
          Queue(job, seq, job.status().submit_time_unix_nanos() / kNsPerMs, &sched, &gates, &held));
      ++queued;
    } else if (rpc::HoldsGpus(state)) {
      sched::Binding b = rpc::ToBinding(job);
      if (Status st = sched.Restore(rpc::ToJobRequest(job), b, job.status().bind_time_unix_nanos() / kNsPerMs);
          !st.ok()) {
        spdlog::error("job '{}' could not be restored on node '{}': {}", job.id(), job.status().allocation().node(),
                      st.message());
        continue;
      }
      if (int64_t ckpt = job.status().checkpoint_time_unix_nanos(); ckpt > 0) {
        sched.SetCheckpoint(job.id(), ckpt / kNsPerMs).IgnoreError("the job was just bound: cannot fail");
      }
      if (state == v1::JOB_STATE_PREEMPTING) {
        if (Status st = sched.MarkPreempting(job.id(), job.status().preempted_for()); !st.ok()) {
          spdlog::error("job '{}' could not be marked as being preempted: {}", job.id(), st.message());
        }
      }
      for (const sched::Placement& p : b.replicas) active[p.node].insert(seq);
      ++bound;
    }
  }
  std::map<std::string, DeploymentEntry> deployments;
  DROVER_RETURN_IF_ERROR(LoadDeployments(jobs, &deployments));
  sched_ = std::move(sched);
  settled_generation_ = 0;  // a new scheduler counts from 0 again
  jobs_ = std::move(jobs);
  nodes_ = std::move(nodes);
  tenants_ = std::move(tenants);
  deployments_ = std::move(deployments);
  deployments_dirty_ = !deployments_.empty();
  active_on_node_ = std::move(active);
  gates_ = std::move(gates);
  held_ = std::move(held);
  next_seq_ = std::max(next_seq_, next_seq);
  std::sort(ended.begin(), ended.end());
  ended_.assign(ended.begin(), ended.end());
  persisted_.clear();
  unlisted_.clear();
  ReplaceReplica();
  for (const auto& [name, entry] : nodes_) {
    if (entry.sink) dirty_nodes_.insert(name);
  }
  spdlog::info("recovered {} nodes and {} jobs ({} queued, {} bound or running) at store revision {}",
               nodes_.size(), jobs_.size(), queued, bound, revision);
  return Status::Ok();
}

void ControlLoop::Persist(const v1::Job& job) {
  ops_.push_back(store::Op::Put(std::string(kJobsPrefix) + job.id(), job.SerializeAsString()));
  if (!job.spec().deployment().empty()) deployments_dirty_ = true;
  auto seq = ParseJobId(job.id());
  if (!seq.ok()) return;
  persisted_.insert(*seq);
}

void ControlLoop::Persist(const v1::Node& node) {
  TouchNode(node.name());
  if (auto it = nodes_.find(node.name()); it != nodes_.end()) it->second.record.reset();  // it changed
  ops_.push_back(store::Op::Put(std::string(kNodesPrefix) + node.name(), node.SerializeAsString()));
}

int64_t ControlLoop::NowNs() const { return ToUnixNanos(clock_->Now()); }
int64_t ControlLoop::NowMs() const { return NowNs() / 1'000'000; }

void ControlLoop::AfterBatch() {
  if (!EnsureRecovered().ok()) return;
  // Replicas to start or stop go into this batch's pass and commit.
  if (deployments_dirty_) ReconcileDeployments();
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
  for (const sched::Preemption& p : decisions.preemptions) ApplyPreemption(p);
  for (const sched::Binding& b : decisions.bindings) ApplyBinding(b);
  Commit();
}

void ControlLoop::Commit() {
  bool with_audit = false;
  Status committed = WriteBatch(&with_audit);
  ops_.clear();
  std::vector<std::shared_ptr<std::atomic<bool>>> audited = std::move(audit_recorded_);
  audit_recorded_.clear();
  std::vector<Ack> acks = std::move(acks_);
  acks_.clear();
  std::set<uint64_t> persisted = std::move(persisted_);
  persisted_.clear();
  std::vector<uint64_t> unlisted = std::move(unlisted_);
  unlisted_.clear();
  if (!committed.ok()) {
    spdlog::error("commit failed, rebuilding state from the store: {}", committed.ToString());
    dirty_nodes_.clear();
    touched_nodes_.clear();  // Recover publishes every node
    // Agent reports of this batch were lost with it: restart every session so
    // that each agent reports its full state again.
    for (auto& [name, entry] : nodes_) {
      if (entry.sink) entry.sink->Reset();
    }
    if (Status s = Recover(); !s.ok()) {
      degraded_ = true;
      replica_.SetUnavailable(Unavailable("the store is unavailable; state cannot be read: " + s.message()));
      node_replica_.SetUnavailable(Unavailable("the store is unavailable; state cannot be read: " + s.message()));
      spdlog::critical("cannot rebuild state from the store; refusing commands until it can: {}", s.ToString());
    }
    SendDesired();  // Recover marked every node with a session
    Status answer = Unavailable("the change was not persisted: " + committed.message());
    for (Ack& ack : acks) ack(answer);
  } else {
    // Nodes first: a job bound in this batch starts while the rest of the
    // commit's work (replicas, answers, watchers) goes on. (PublishNodes
    // still reads dirty_nodes_.)
    SendDesired();
    // Readers see the batch before its commands are answered.
    std::vector<std::pair<uint64_t, JobReplica::JobPtr>> copies;
    copies.reserve(persisted.size() + unlisted.size());
    for (uint64_t seq : persisted) {
      auto it = jobs_.find(seq);
      if (it == jobs_.end()) continue;
      copies.emplace_back(seq, std::make_shared<const v1::Job>(it->second));
      // Due for the archive archive_after from now.
      if (options_.archive != nullptr && rpc::IsTerminal(it->second.status().state())) ended_.emplace_back(NowNs(), seq);
    }
    for (uint64_t seq : unlisted) copies.emplace_back(seq, nullptr);  // in the archive now
    replica_.Update(std::move(copies));
    PublishNodes();
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
  dirty_nodes_.clear();
}

Status ControlLoop::WriteBatch(bool* with_audit) {
  auto applied = [](const Result<store::TxnResult>& r) {
    return !r.ok() ? r.status() : r->succeeded ? Status::Ok() : Aborted("store transaction did not apply");
  };
  *with_audit = false;
  // A batch larger than one transaction may be (an etcd store's limits):
  // the records that do not fit beside the audit entries go first, in
  // transactions of their own. Atomic per transaction only; docs/ha.md says
  // how to size etcd's limits so that this does not happen.
  const store::Limits limits = store_->limits();
  size_t audit_ops = audit_entries_.empty() ? 0 : audit_entries_.size() + 1;
  if (audit_ops + 1 > limits.max_ops) {
    // Too many to chain in one transaction: the callers record their own.
    audit_entries_.clear();
    audit_ops = 0;
  }
  if (limits.max_ops != SIZE_MAX || limits.max_bytes != SIZE_MAX) {
    const size_t op_budget = limits.max_ops - audit_ops;
    const size_t byte_budget = limits.max_bytes - std::min(limits.max_bytes / 2, audit_ops * 2048);
    size_t keep = 0;
    size_t bytes = 0;
    while (keep < ops_.size() && keep < op_budget && bytes + store::OpBytes(ops_[ops_.size() - 1 - keep]) <= byte_budget) {
      bytes += store::OpBytes(ops_[ops_.size() - 1 - keep]);
      ++keep;
    }
    if (keep < ops_.size()) {
      const auto split = ops_.end() - static_cast<std::ptrdiff_t>(keep);
      DROVER_RETURN_IF_ERROR(store_->WriteInChunks(std::vector<store::Op>(ops_.begin(), split)));
      ops_.erase(ops_.begin(), split);
    }
  }
  if (!audit_entries_.empty()) {
    // The calls' audit entries in the same transaction: one durable write.
    const auto count = static_cast<int64_t>(audit_entries_.size());
    int64_t last_seq = 0;
    const size_t records = ops_.size();
    auto r = options_.audit->CommitWith(
        std::move(audit_entries_),
        [&](std::vector<store::Compare> compares, std::vector<store::Op> entries) {
          *with_audit = true;
          ops_.resize(records);  // a second call (the audit head moved) replaces the first call's entries
          ops_.insert(ops_.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
          return store_->Txn(compares, ops_, {});
        },
        &last_seq);
    audit_entries_.clear();
    if (*with_audit) {
      Status written = applied(r);
      // Moving old entries to the archive takes a while: not on this thread.
      if (written.ok() && options_.audit->TrimDue(last_seq, count)) {
        archiver_.Post([audit = options_.audit] {
          if (Status s = audit->Trim(); !s.ok()) spdlog::warn("audit log trim failed: {}", s.ToString());
        });
      }
      return written;
    }
    // An audit log that cannot be read (its head) leaves the batch to commit
    // alone, and the recording to the callers.
    spdlog::error("audit entries not written with the batch: {}", r.status().ToString());
  }
  if (ops_.empty()) return Status::Ok();
  return applied(store_->Txn({}, ops_, {}));
}

void ControlLoop::SendDesired() {
  if (options_.leading && !options_.leading()) return;
  for (const std::string& name : dirty_nodes_) {
    auto it = nodes_.find(name);
    if (it != nodes_.end() && it->second.sink) it->second.sink->SendDesired(DesiredFor(name));
  }
}

v1::Job* ControlLoop::FindJob(const std::string& id) {
  auto seq = ParseJobId(id);
  if (!seq.ok()) return nullptr;
  auto it = jobs_.find(*seq);
  return it == jobs_.end() ? nullptr : &it->second;
}

v1::Job ControlLoop::View(const v1::Job& job) const {
  v1::Job out = job;
  if (job.status().state() == v1::JOB_STATE_PENDING) out.mutable_status()->set_message(PendingMessage(job));
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
  if (seq.ok() && held_.contains(*seq)) {
    return fmt::format("waiting: array {} runs at most {} tasks at once", job.array().array_id(),
                       job.array().max_running());
  }
  return sched_.PendingReason(job.id());
}

void ControlLoop::FillStop(const v1::Job& job, const std::string& workload_id, v1::Stop* stop) {
  stop->set_job_id(job.id());
  stop->set_workload_id(workload_id);
  stop->set_grace_seconds(job.status().stop_grace_seconds());
  stop->set_reason(job.status().message());
  // A failure (a sick GPU, a lost node) leaves nothing worth saving.
  if (job.status().state() != v1::JOB_STATE_PREEMPTING || !job.status().failure().empty()) return;
  auto sig = rpc::ParseSignal(job.spec().checkpoint_signal().empty() ? "SIGUSR1" : job.spec().checkpoint_signal());
  if (!sig.ok() || *sig == 0) return;
  stop->set_checkpoint_signal(*sig);
  int grace = job.spec().checkpoint_grace_seconds();
  stop->set_checkpoint_grace_seconds(grace > 0 ? grace : rpc::kDefaultCheckpointGraceSeconds);
}

v1::DesiredWorkloads ControlLoop::DesiredFor(const std::string& node) const {
  v1::DesiredWorkloads out;
  if (auto n = nodes_.find(node); n != nodes_.end()) {
    for (const std::string& id : n->second.ended_jobs) out.add_ended_jobs(id);
  }
  auto it = active_on_node_.find(node);
  if (it == active_on_node_.end()) return out;
  for (uint64_t seq : it->second) {
    const v1::Job& job = jobs_.at(seq);
    if (job.spec().replicas() > 1) {
      AddGangWorkloads(job, node, &out);
      continue;
    }
    v1::JobState state = job.status().state();
    bool cancelled_while_preempted = state == v1::JOB_STATE_CANCELLING && job.status().stop_grace_seconds() > 0;
    if (state == v1::JOB_STATE_PREEMPTING || cancelled_while_preempted) {
      // Not desired, so the agent stops it, with the grace of the preemption
      // (kept when a user cancels it meanwhile: the agent may already have
      // sent SIGTERM, and the shorter grace was promised).
      FillStop(job, rpc::WorkloadId(job.id(), 0, 1, job.status().attempt()), out.add_stops());
      continue;
    }
    if (state != v1::JOB_STATE_BOUND && state != v1::JOB_STATE_RUNNING) continue;  // cancelling: stop it
    v1::Workload* w = out.add_workloads();
    w->set_job_id(job.id());
    w->set_workload_id(rpc::WorkloadId(job.id(), 0, 1, job.status().attempt()));
    w->set_tenant(job.spec().tenant());
    *w->mutable_command() = job.spec().command();
    *w->mutable_env() = job.spec().env();
    w->set_working_dir(job.spec().working_dir());
    *w->mutable_gpu_indices() = job.status().allocation().gpu_indices();
    w->set_cpu_millis(job.spec().cpu_millis());
    w->set_memory_bytes(job.spec().memory_bytes());
    w->set_gpu_memory_limit_bytes(job.status().allocation().gpu_memory_bytes());
    w->set_array_id(job.array().array_id());
    w->set_array_index(job.array().index());
    if (job.spec().has_service()) *w->mutable_service() = job.spec().service();
    int grace = job.spec().termination_grace_seconds();
    w->set_termination_grace_seconds(grace > 0 ? grace : rpc::kDefaultGraceSeconds);
  }
  return out;
}

void ControlLoop::UpdateSchedulable(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  TouchNode(name);
  sched_.SetSchedulable(name, Schedulable(it->second));
}

// ---- agents ----

std::future<Result<Done>> ControlLoop::RegisterNode(v1::RegisterRequest req) {
  return Call<Done>([this, req = std::move(req)]() -> Result<Done> {
    auto it = nodes_.find(req.node_name());
    bool is_new = it == nodes_.end();
    // Changed on a copy: an inventory the scheduler refuses changes nothing.
    v1::Node node = is_new ? v1::Node() : it->second.node;
    node.set_name(req.node_name());
    *node.mutable_gpus() = req.gpus();
    node.set_cpu_millis(req.cpu_millis());
    node.set_memory_bytes(req.memory_bytes());
    node.set_agent_version(req.agent_version());
    *node.mutable_labels() = req.labels();
    *node.mutable_links() = req.links();
    *node.mutable_topology() = req.topology();
    if (req.has_isolation()) {
      *node.mutable_isolation() = req.isolation();
    } else {
      node.clear_isolation();  // an agent that does not report it
    }
    if (is_new) node.set_registered_unix_nanos(NowNs());
    if (node.gossip_address() != req.gossip_address()) ++peers_version_;
    node.set_gossip_address(req.gossip_address());
    for (v1::Gpu& g : *node.mutable_gpus()) g.set_health_changed_unix_nanos(NowNs());
    bool schedulable = !is_new && Schedulable(it->second);
    DROVER_RETURN_IF_ERROR(sched_.UpsertNode(rpc::ToNodeInfo(node, schedulable)));
    NodeEntry& entry = nodes_[req.node_name()];
    entry.node = node;
    if (is_new || entry.liveness == Liveness::kLost) {
      // It (re)joins with a fresh lease; back from Lost, it takes work only
      // once its first full report shows it runs nothing it should not.
      entry.awaiting_clean_report = !is_new;
      if (!is_new) spdlog::warn("node '{}', declared lost, registers again", node.name());
      entry.liveness = Liveness::kAlive;
      entry.liveness_reason.clear();
      entry.heard_direct_ns = LeaseNowNs();
      ++peers_version_;
    }
    entry.telemetry.clear();
    entry.readings.reset();
    board_.DropHistory(node.name());
    Persist(node);
    spdlog::info("node '{}' registered with {} GPUs", node.name(), node.gpus_size());
    for (const v1::Gpu& g : node.gpus()) {
      if (g.health() == v1::GPU_HEALTH_UNHEALTHY) StopJobsOnGpu(node.name(), g.index(), g.health_reason());
    }
    return Done{};
  });
}

std::future<Result<Done>> ControlLoop::SessionOpened(std::string node, std::shared_ptr<AgentSink> sink) {
  auto promise = std::make_shared<std::promise<Result<Done>>>();
  auto future = promise->get_future();
  SessionOpened(std::move(node), std::move(sink), [promise](Result<Done> r) { promise->set_value(std::move(r)); });
  return future;
}

void ControlLoop::SessionOpened(std::string node, std::shared_ptr<AgentSink> sink,
                                std::function<void(Result<Done>)> done) {
  CallThen<Done>([this, node = std::move(node), sink = std::move(sink)]() -> Result<Done> {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", node));
    NodeEntry& entry = it->second;
    if (entry.liveness == Liveness::kLost) {
      return FailedPrecondition(fmt::format("node '{}' was declared lost ({}); it must register again",
                                            node, entry.liveness_reason));
    }
    if (entry.sink && entry.sink != sink) entry.sink->Reset();  // the older session is stale
    entry.sink = sink;
    entry.last_heartbeat_ns = ToUnixNanos(clock_->Now());
    entry.heard_direct_ns = LeaseNowNs();
    entry.full_report_seen = false;
    UpdateSchedulable(node);
    dirty_nodes_.insert(node);
    spdlog::info("node '{}' is ready{}", node,
                 entry.awaiting_clean_report ? "; it takes work once its report shows it runs nothing it should not" : "");
    return Done{};
  }, std::move(done));
}

void ControlLoop::SessionClosed(std::string node, const AgentSink* sink) {
  loop_.Post([this, node = std::move(node), sink] {
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.sink.get() != sink) return;  // a newer session took over
    it->second.sink.reset();
    UpdateSchedulable(node);
    spdlog::warn("node '{}' lost its session; not ready", node);
  });
}

void ControlLoop::HandleStatus(std::string node, v1::StatusReport report) {
  loop_.Post([this, node = std::move(node), report = std::move(report)] {
    if (!EnsureRecovered().ok()) return;  // the session is reset; the agent reports again
    auto it = nodes_.find(node);
    // A lost node's reports are not trusted until it registers again.
    if (it == nodes_.end() || it->second.liveness == Liveness::kLost) return;
    TouchNode(node);
    std::set<std::string> reported;
    for (const v1::WorkloadStatus& ws : report.workloads()) {
      reported.insert(ws.workload_id().empty() ? ws.job_id() : ws.workload_id());
      ApplyWorkloadStatus(node, ws);
    }
    if (report.full()) ApplyLost(node, reported);
    NoteUndesired(&it->second, report);
  });
}

std::future<Result<Done>> ControlLoop::Barrier() {
  // Answered after the batch it lands in has passed and committed (even a
  // batch that changed nothing), so that reads, which the replica serves,
  // see what everything posted before it led to.
  auto promise = std::make_shared<std::promise<Result<Done>>>();
  auto future = promise->get_future();
  bool posted = loop_.Post([this, promise] {
    if (Status s = EnsureRecovered(); !s.ok()) {
      promise->set_value(s);
      return;
    }
    acks_.push_back([promise](const Status& committed) {
      promise->set_value(committed.ok() ? Result<Done>(Done{}) : Result<Done>(committed));
    });
  });
  if (!posted) promise->set_value(Unavailable("the control loop is stopped"));
  return future;
}

}  // namespace drover::server

namespace drover::server {
// Call<T> is defined in this file; control_loop_nodes.cc uses these.
template std::future<Result<Done>> ControlLoop::Call<Done>(std::function<Result<Done>()>);
template std::future<Result<v1::Job>> ControlLoop::Call<v1::Job>(std::function<Result<v1::Job>()>);
template std::future<Result<v1::Node>> ControlLoop::Call<v1::Node>(std::function<Result<v1::Node>()>);
template std::future<Result<std::pair<int64_t, std::vector<v1::Peer>>>>
ControlLoop::Call<std::pair<int64_t, std::vector<v1::Peer>>>(
    std::function<Result<std::pair<int64_t, std::vector<v1::Peer>>>()>);
template std::future<Result<v1::TenantStatus>> ControlLoop::Call<v1::TenantStatus>(
    std::function<Result<v1::TenantStatus>()>);
template std::future<Result<v1::SubmitJobResponse>> ControlLoop::Call<v1::SubmitJobResponse>(
    std::function<Result<v1::SubmitJobResponse>()>);
template std::future<Result<std::vector<v1::Job>>> ControlLoop::Call<std::vector<v1::Job>>(
    std::function<Result<std::vector<v1::Job>>()>);
template std::future<Result<int64_t>> ControlLoop::Call<int64_t>(std::function<Result<int64_t>()>);
template std::future<Result<v1::Deployment>> ControlLoop::Call<v1::Deployment>(
    std::function<Result<v1::Deployment>()>);
template std::future<Result<std::vector<v1::Deployment>>> ControlLoop::Call<std::vector<v1::Deployment>>(
    std::function<Result<std::vector<v1::Deployment>>()>);
template std::future<Result<v1::TenantQuota>> ControlLoop::Call<v1::TenantQuota>(
    std::function<Result<v1::TenantQuota>()>);
template std::future<Result<v1::EndpointsResponse>> ControlLoop::Call<v1::EndpointsResponse>(
    std::function<Result<v1::EndpointsResponse>()>);
}  // namespace drover::server
