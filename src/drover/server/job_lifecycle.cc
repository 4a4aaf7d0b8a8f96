// The edges of the job state diagram (job_lifecycle.h). Runs on the loop
// thread only.

#include "drover/server/job_lifecycle.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

constexpr int64_t kNsPerMs = 1'000'000;

// The grace a preempted job gets between SIGTERM and SIGKILL: the shorter of
// its own termination grace (the most its owner said it needs to stop
// cleanly) and the scheduler's preemption grace (the most the job it yields
// to may be kept waiting). Neither side waits longer than it agreed to; a
// job that stops sooner ends sooner either way.
int StopGraceSeconds(const v1::Job& job, int64_t preemption_grace_ms) {
  int own =
      job.spec().termination_grace_seconds() > 0 ? job.spec().termination_grace_seconds() : rpc::kDefaultGraceSeconds;
  int64_t policy = (std::max<int64_t>(preemption_grace_ms, 0) + 999) / 1000;  // round up: never cut it short
  return static_cast<int>(std::min<int64_t>(own, policy));
}

int OwnGraceSeconds(const v1::Job& job) {
  int grace = job.spec().termination_grace_seconds();
  return grace > 0 ? grace : rpc::kDefaultGraceSeconds;
}

Status Refused(const v1::Job& job, std::string_view edge) {
  return FailedPrecondition(
      fmt::format("job '{}' cannot {} while {}", job.id(), edge, rpc::JobStateDisplay(job.status().state())));
}

}  // namespace

bool JobLifecycle::Allowed(Edge edge, v1::JobState from, v1::JobState to) {
  using S = v1::JobState;
  const bool held = from == S::JOB_STATE_BOUND || from == S::JOB_STATE_RUNNING;
  switch (edge) {
    case Edge::kBind:
    case Edge::kReject: return from == S::JOB_STATE_PENDING;
    case Edge::kStart: return from == S::JOB_STATE_BOUND;
    case Edge::kStop: return held;
    case Edge::kCancel:
      return from == S::JOB_STATE_PENDING || held || from == S::JOB_STATE_PREEMPTING || from == S::JOB_STATE_CANCELLING;
    case Edge::kRequeue: return held || from == S::JOB_STATE_PREEMPTING;
    case Edge::kFinish:
      switch (from) {
        case S::JOB_STATE_PENDING: return to == S::JOB_STATE_CANCELLED;
        case S::JOB_STATE_BOUND:
        case S::JOB_STATE_RUNNING:
        case S::JOB_STATE_PREEMPTING: return to == S::JOB_STATE_SUCCEEDED || to == S::JOB_STATE_FAILED;
        case S::JOB_STATE_CANCELLING: return to == S::JOB_STATE_CANCELLED || to == S::JOB_STATE_FAILED;
        default: return false;
      }
    case Edge::kArchive: return rpc::IsTerminal(from);
  }
  return false;
}

void JobLifecycle::ResetRun(v1::JobStatus* st) {
  st->clear_allocation();
  st->clear_replicas();
  st->clear_bind_time_unix_nanos();
  st->clear_start_time_unix_nanos();
  st->clear_end_time_unix_nanos();
  st->clear_exit_code();
  st->clear_signal();
  st->clear_stop_grace_seconds();
  st->clear_replica_states();
  st->clear_gang_failed();
  st->clear_preempted_for();
  st->clear_image_pull();  // the digest stays: every attempt runs it
}

v1::Job* JobLifecycle::Find(const std::string& id) {
  auto seq = ParseJobId(id);
  if (!seq.ok()) return nullptr;
  auto it = table_.jobs_.find(*seq);
  return it == table_.jobs_.end() ? nullptr : &it->second;
}

void JobLifecycle::MarkNodes(const v1::Job& job) {
  for (const sched::Placement& p : rpc::ToBinding(job).replicas) batch_->MarkDesired(p.node);
}

// ---- rebuilding ----

Result<JobLifecycle::Rebuilt> JobLifecycle::Rebuild(JobTable::Map jobs, uint64_t next_seq, sched::Scheduler* sched,
                                                    int64_t now_ns) {
  Rebuilt out;
  JobTable& t = out.table;
  t.next_seq_ = next_seq;
  // Tasks that hold GPUs count against their array's limit before any
  // pending one is queued.
  for (const auto& [seq, job] : jobs) {
    if (job.array().max_running() > 0 && rpc::HoldsGpus(job.status().state())) {
      ++t.gates_[job.array().array_id()].active;
    }
    if (job.spec().time_limit_seconds() > 0) ++t.time_limited_;
  }
  for (auto& [seq, job] : jobs) {  // submission order, so the queue keeps its order
    v1::JobState state = job.status().state();
    if (rpc::IsTerminal(state)) {
      int64_t end = job.status().end_time_unix_nanos();
      out.ended.emplace_back(end > 0 ? end : now_ns, seq);
    }
    if (state == v1::JOB_STATE_PENDING) {
      // A dependency's end and what it did to its waiters commit together,
      // so a waiter's dependencies not yet met are all still live.
      DROVER_RETURN_IF_ERROR(Queue(job, seq, job.status().submit_time_unix_nanos() / kNsPerMs, sched, &t));
      ++out.queued;
    } else if (rpc::HoldsGpus(state)) {
      sched::Binding b = rpc::ToBinding(job);
      if (Status st = sched->Restore(rpc::ToJobRequest(job), b, job.status().bind_time_unix_nanos() / kNsPerMs);
          !st.ok()) {
        spdlog::error("job '{}' could not be restored on node '{}': {}", job.id(), job.status().allocation().node(),
                      st.message());
        continue;
      }
      if (int64_t ckpt = job.status().checkpoint_time_unix_nanos(); ckpt > 0) {
        if (Status st = sched->SetCheckpoint(job.id(), ckpt / kNsPerMs); !st.ok()) {
          spdlog::error("job '{}': its checkpoint could not be restored: {}", job.id(), st.message());
        }
      }
      if (state == v1::JOB_STATE_PREEMPTING) {
        if (Status st = sched->MarkPreempting(job.id(), job.status().preempted_for()); !st.ok()) {
          spdlog::error("job '{}' could not be marked as being preempted: {}", job.id(), st.message());
        }
      }
      for (const sched::Placement& p : b.replicas) t.active_on_node_[p.node].insert(seq);
      ++out.bound;
    }
  }
  t.jobs_ = std::move(jobs);
  return out;
}

// ---- array gates ----

Status JobLifecycle::Queue(const v1::Job& job, uint64_t seq, int64_t now_ms, sched::Scheduler* sched, JobTable* table) {
  // Its dependencies first (job_dependencies.cc), then its array's gate.
  if (HoldForDependencies(job, seq, table)) return Status::Ok();
  const v1::ArrayTask& task = job.array();
  ArrayGate* gate = task.max_running() > 0 ? &table->gates_[task.array_id()] : nullptr;
  if (gate != nullptr && gate->active >= task.max_running()) {
    gate->held.push_back(seq);
    table->held_.insert(seq);
    ++table->gates_version_;
    return Status::Ok();
  }
  DROVER_RETURN_IF_ERROR(sched->Enqueue(rpc::ToJobRequest(job), now_ms));
  if (gate != nullptr) ++gate->active;
  return Status::Ok();
}

void JobLifecycle::TaskEnded(const v1::Job& job) {
  if (job.array().max_running() <= 0) return;
  auto it = table_.gates_.find(job.array().array_id());
  if (it == table_.gates_.end()) return;
  ArrayGate& gate = it->second;
  ++table_.gates_version_;  // a held task may go
  auto seq = ParseJobId(job.id());
  if (seq.ok() && table_.held_.erase(*seq) > 0) {
    // Cancelled while held: it never counted. Its place in `held` is
    // skipped below.
  } else if (gate.active > 0) {
    --gate.active;
  }
  int64_t now_ms = NowMs();
  while (gate.active < job.array().max_running() && !gate.held.empty()) {
    uint64_t next = gate.held.front();
    gate.held.pop_front();
    if (table_.held_.erase(next) == 0) continue;
    auto j = table_.jobs_.find(next);
    if (j == table_.jobs_.end() || j->second.status().state() != v1::JOB_STATE_PENDING) continue;
    if (Status s = sched_->Enqueue(rpc::ToJobRequest(j->second), now_ms); !s.ok()) {
      // Validated when it was submitted; one the scheduler refuses now ends
      // rather than waiting forever.
      if (Status r = Reject(&j->second, "could not be queued: " + s.message()); !r.ok()) {
        spdlog::error("{}", r.message());
      }
      continue;
    }
    ++gate.active;
  }
  if (gate.active == 0 && gate.held.empty()) table_.gates_.erase(it);
}

// ---- the edges ----

Result<std::vector<uint64_t>> JobLifecycle::Submit(std::vector<v1::Job> jobs) {
  const uint64_t first = table_.next_seq_;
  const int64_t now = NowNs();
  // A submit is one array's tasks or a batch of jobs outside any array.
  const std::string array_id = jobs.empty() ? "" : jobs.front().array().array_id();
  std::vector<uint64_t> seqs;
  seqs.reserve(jobs.size());
  // Queue first: a job the scheduler refuses is neither stored nor given an
  // id, and the ones before it are taken back.
  auto undo = [&] {
    for (uint64_t seq : seqs) {
      sched_->Remove(FormatJobId(seq), now / kNsPerMs);
      table_.held_.erase(seq);
      ForgetWaits(seq);
      table_.jobs_.erase(seq);
    }
    if (!array_id.empty()) table_.gates_.erase(array_id);
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    uint64_t seq = first + i;
    v1::Job& job = table_.jobs_[seq];
    job = std::move(jobs[i]);
    job.set_id(FormatJobId(seq));
    job.mutable_status()->set_state(v1::JOB_STATE_PENDING);
    job.mutable_status()->set_submit_time_unix_nanos(now);
    seqs.push_back(seq);
    if (Status s = Queue(job, seq, now / kNsPerMs, sched_, &table_); !s.ok()) {
      undo();
      return jobs.size() == 1 ? s : Status(s.code(), fmt::format("job {}: {}", i, s.message()));
    }
  }
  table_.next_seq_ = first + jobs.size();
  for (uint64_t seq : seqs) {
    const v1::Job& job = table_.jobs_.at(seq);
    if (job.spec().time_limit_seconds() > 0) ++table_.time_limited_;
    Persist(job);
  }
  return seqs;
}

Status JobLifecycle::Bind(const sched::Binding& binding) {
  v1::Job* job = Find(binding.job_id);
  if (job == nullptr || !Allowed(Edge::kBind, job->status().state())) {
    spdlog::error("scheduler bound job '{}', which is not pending here; giving it back", binding.job_id);
    sched_->Remove(binding.job_id, NowMs());
    return job == nullptr ? NotFound(fmt::format("job '{}' not found", binding.job_id)) : Refused(*job, "be bound");
  }
  // Its launch contract first (launch_contract.h): a master node with no
  // launch port free leaves the job waiting, as for GPUs.
  v1::Attempt contract;
  for (const sched::Placement& p : binding.replicas) contract.add_nodes(p.node);
  if (Status s = FillAttemptContract(table_, node_of_, &contract); !s.ok()) {
    if (!sched_->Requeue(binding.job_id, NowMs()).ok()) sched_->Remove(binding.job_id, NowMs());
    if (job->status().message() != s.message()) {
      job->mutable_status()->set_message(s.message());
      Persist(*job);
    }
    return s;
  }
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_BOUND);
  st->set_bind_time_unix_nanos(NowNs());
  // Its service before this run, as the scheduler holds it (the LAS
  // starvation guard may have forgiven it): a restart restores that.
  st->set_attained_gpu_ms(sched_->Attained(job->id(), st->bind_time_unix_nanos() / kNsPerMs));
  st->clear_message();
  rpc::SetAllocation(binding, st);
  st->clear_replica_states();
  st->clear_gang_failed();
  if (binding.replicas.size() > 1) {
    for (size_t i = 0; i < binding.replicas.size(); ++i) st->add_replica_states();
  }
  // A service's one process: its port, endpoint and readiness as the agent
  // reports them (ApplyServiceStatus).
  if (job->spec().has_service()) st->add_replica_states();
  // A new generation: the agent starts it as a workload of its own, even on
  // the node that ran the last one.
  st->set_attempt(st->attempt() + 1);
  v1::Attempt* a = st->add_attempts();
  *a = std::move(contract);
  a->set_number(st->attempt());
  a->set_bind_time_unix_nanos(st->bind_time_unix_nanos());
  // The history is bounded: the first attempts and the latest are kept.
  constexpr int kMaxAttemptRecords = 32;
  if (st->attempts_size() > kMaxAttemptRecords) st->mutable_attempts()->DeleteSubrange(kMaxAttemptRecords / 2, 1);
  uint64_t seq = *ParseJobId(job->id());
  for (const sched::Placement& p : binding.replicas) {
    table_.active_on_node_[p.node].insert(seq);
    batch_->MarkDesired(p.node);
  }
  Persist(*job);
  return Status::Ok();
}

Status JobLifecycle::Start(v1::Job* job, int64_t start_ns) {
  if (!Allowed(Edge::kStart, job->status().state())) return Refused(*job, "start");
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_RUNNING);
  st->set_start_time_unix_nanos(start_ns);
  // Its image is there: the pull's progress was the message while bound.
  if (!st->image_pull().empty() && st->message() == st->image_pull()) st->clear_message();
  st->clear_image_pull();
  if (v1::Attempt* a = CurrentAttempt(job); a != nullptr && a->start_time_unix_nanos() == 0) {
    a->set_start_time_unix_nanos(start_ns);
  }
  Persist(*job);
  return Status::Ok();
}

Status JobLifecycle::Stop(v1::Job* job, const StopCause& cause) {
  if (!Allowed(Edge::kStop, job->status().state())) return Refused(*job, "be stopped");
  if (job->status().gang_failed()) return FailedPrecondition(fmt::format("job '{}' is already failing", job->id()));
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_PREEMPTING);
  switch (cause.kind) {
    case StopCause::Kind::kPreempted:
      // The scheduler marked it itself when it decided.
      st->set_message(fmt::format("preempted for {}: {}", cause.for_job, cause.text));
      st->set_preempted_for(cause.for_job);
      st->set_stop_grace_seconds(StopGraceSeconds(*job, cause.grace_ms));
      spdlog::info("job '{}' is preempted for '{}' ({}); stopping it with {}s grace", job->id(), cause.for_job,
                   cause.text, st->stop_grace_seconds());
      break;
    case StopCause::Kind::kFailure:
      st->set_failure(cause.text);
      st->set_no_restart(cause.no_restart);
      st->set_message("stopping: " + st->failure());
      st->clear_preempted_for();
      st->set_stop_grace_seconds(OwnGraceSeconds(*job));
      spdlog::warn("job '{}' is stopped: {}", job->id(), st->failure());
      break;
    case StopCause::Kind::kDrained:
      // As a preemption for nobody: the checkpoint signal, the job's own
      // grace, then queued again in its submission order.
      if (Status s = sched_->MarkPreempting(job->id()); !s.ok()) {
        spdlog::warn("job '{}': the scheduler could not mark it as being drained: {}", job->id(), s.message());
      }
      st->set_message(fmt::format("drained off node '{}'", cause.text));
      st->clear_preempted_for();
      st->set_stop_grace_seconds(OwnGraceSeconds(*job));
      break;
  }
  MarkNodes(*job);
  Persist(*job);
  return Status::Ok();
}

Status JobLifecycle::Cancel(v1::Job* job) {
  const v1::JobState state = job->status().state();
  if (!Allowed(Edge::kCancel, state)) return Refused(*job, "be cancelled");
  if (state == v1::JOB_STATE_PENDING) {
    return Finish(job, v1::JOB_STATE_CANCELLED, 0, 0, NowNs(), "cancelled before it started");
  }
  if (state == v1::JOB_STATE_CANCELLING) return Status::Ok();
  // Bound, running or being preempted: stop it; it ends CANCELLED once its
  // process is gone (a preempted one is then not queued again).
  job->mutable_status()->set_state(v1::JOB_STATE_CANCELLING);
  job->mutable_status()->set_message("cancel requested; stopping the process");
  MarkNodes(*job);
  Persist(*job);
  return Status::Ok();
}

void JobLifecycle::Release(v1::Job* job) {
  uint64_t seq = *ParseJobId(job->id());
  for (const sched::Placement& p : rpc::ToBinding(*job).replicas) {
    if (p.node.empty()) continue;
    table_.active_on_node_[p.node].erase(seq);
    batch_->MarkDesired(p.node);
  }
}

Status JobLifecycle::Finish(v1::Job* job, v1::JobState state, int exit_code, int signal, int64_t end_ns,
                            std::string message) {
  if (!Allowed(Edge::kFinish, job->status().state(), state)) {
    return Refused(*job, fmt::format("end {}", rpc::JobStateDisplay(state)));
  }
  std::set<std::string> ran_on;
  for (const v1::Attempt& a : job->status().attempts()) ran_on.insert(a.nodes().begin(), a.nodes().end());
  if (ended_on_ && !ran_on.empty()) ended_on_(*job, ran_on);
  for (const std::string& node : ran_on) batch_->MarkDesired(node);
  if (rpc::HoldsGpus(job->status().state())) Release(job);
  EndAttempt(job, end_ns,
             state == v1::JOB_STATE_SUCCEEDED   ? "succeeded"
             : state == v1::JOB_STATE_CANCELLED ? "cancelled"
                                                : "failed: " + message);
  v1::JobStatus* st = job->mutable_status();
  st->set_state(state);
  st->set_exit_code(exit_code);
  st->set_signal(signal);
  st->set_end_time_unix_nanos(end_ns);
  st->set_message(std::move(message));
  st->clear_stop_grace_seconds();
  st->clear_preempted_for();
  st->clear_failure();
  st->clear_no_restart();
  st->clear_image_pull();
  sched_->Remove(job->id(), NowMs());
  Persist(*job);
  // A job cancelled while it waited for others never entered its array's gate.
  if (!ForgetWaits(*ParseJobId(job->id()))) TaskEnded(*job);
  DependencyEnded(*job);
  return Status::Ok();
}

Status JobLifecycle::Reject(v1::Job* job, std::string why) {
  if (!Allowed(Edge::kReject, job->status().state())) return Refused(*job, "be refused");
  auto seq = ParseJobId(job->id());
  if (seq.ok() && table_.held_.contains(*seq)) {
    return FailedPrecondition(fmt::format("job '{}' is still held back by its array", job->id()));
  }
  // It never ran: nothing else to undo (and not Finish, whose TaskEnded
  // would count it against its array's gate, which it never entered).
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_FAILED);
  st->set_end_time_unix_nanos(NowNs());
  st->set_message(std::move(why));
  sched_->Remove(job->id(), NowMs());  // not queued there; nor ever to be
  Persist(*job);
  if (seq.ok()) ForgetWaits(*seq);
  DependencyEnded(*job);
  return Status::Ok();
}

Status JobLifecycle::Requeue(v1::Job* job) {
  if (!Allowed(Edge::kRequeue, job->status().state())) return Refused(*job, "be queued again");
  v1::JobStatus* st = job->mutable_status();
  // Stopped because its GPU failed: queued again while its restart policy
  // allows, else it ends here.
  bool failed = !st->failure().empty();
  // A service runs until it is cancelled: a failure that was not its own
  // (a lost node, a sick GPU, a fence) queues it again whatever its restart
  // policy, without counting against max_restarts (its process restarts
  // are the agent's, in replica_states[0].restarts); only a stop a restart
  // cannot help (no_restart: its tenant's runtime limit) ends it.
  const bool service = job->spec().has_service();
  if (failed && (st->no_restart() || (!service && (job->spec().restart_policy() != "on-failure" ||
                                                   st->restarts() >= job->spec().max_restarts())))) {
    std::string why = st->failure();
    if (job->spec().restart_policy() == "on-failure" && !st->no_restart()) {
      why += fmt::format(" (restarted {} times, the most its restart policy allows)", st->restarts());
    }
    st->clear_failure();
    return Finish(job, v1::JOB_STATE_FAILED, -1, 0, NowNs(), std::move(why));
  }
  EndAttempt(job, NowNs(), failed ? st->failure() : "preempted: " + st->message());
  Release(job);
  int64_t now_ms = NowMs();
  if (Status s = sched_->Requeue(job->id(), now_ms); !s.ok()) {
    // Not bound in the scheduler (its restore failed): queue it afresh, in
    // its submission order as far as the scheduler keeps one.
    spdlog::warn("job '{}' could not be requeued ({}); queueing it again", job->id(), s.message());
    sched_->Remove(job->id(), now_ms);
    if (Status e = sched_->Enqueue(rpc::ToJobRequest(*job), job->status().submit_time_unix_nanos() / kNsPerMs);
        !e.ok()) {
      spdlog::error("job '{}' cannot be queued again: {}", job->id(), e.message());
    }
  }
  st->set_attained_gpu_ms(sched_->Attained(job->id(), now_ms));  // kept across a restart (LAS)
  st->set_state(v1::JOB_STATE_PENDING);
  ResetRun(st);
  if (failed && service) {
    st->set_message("queued again: " + st->failure());
    st->clear_failure();
  } else if (failed) {
    st->set_restarts(st->restarts() + 1);
    st->set_message(fmt::format("restart {} of {}: {}", st->restarts(), job->spec().max_restarts(), st->failure()));
    st->clear_failure();
  } else {
    st->set_preemptions(st->preemptions() + 1);
  }
  // Kept ("preempted for j-000007: priority 900 > 10"): a reader sees the
  // scheduler's reason for the wait, then this.
  spdlog::info("job '{}' is queued again after {}", job->id(), failed ? st->message() : "its preemption");
  Persist(*job);
  return Status::Ok();
}

Status JobLifecycle::Archive(uint64_t seq) {
  auto it = table_.jobs_.find(seq);
  if (it == table_.jobs_.end()) return NotFound(fmt::format("job '{}' not found", FormatJobId(seq)));
  if (!Allowed(Edge::kArchive, it->second.status().state())) return Refused(it->second, "be archived");
  batch_->DeleteJob(seq, it->second.id());
  if (it->second.spec().time_limit_seconds() > 0) --table_.time_limited_;
  table_.jobs_.erase(it);
  return Status::Ok();
}

v1::Attempt* JobLifecycle::CurrentAttempt(v1::Job* job) {
  v1::JobStatus* st = job->mutable_status();
  if (st->attempts_size() == 0 || st->attempts(st->attempts_size() - 1).number() != st->attempt()) return nullptr;
  return st->mutable_attempts(st->attempts_size() - 1);
}

void JobLifecycle::EndAttempt(v1::Job* job, int64_t end_ns, std::string outcome) {
  v1::Attempt* a = CurrentAttempt(job);
  if (a == nullptr || !a->outcome().empty()) return;
  a->set_end_time_unix_nanos(end_ns);
  a->set_outcome(std::move(outcome));
}

bool JobLifecycle::StopUnlessStopping(v1::Job* job, std::string failure, bool node_loss) {
  // Already on its way out (cancelling, preempting, a failing gang): it
  // ends (or is requeued) as it was going to.
  if (job->status().gang_failed() || !Allowed(Edge::kStop, job->status().state())) return false;
  // Counted in the record the stop persists.
  if (node_loss) job->mutable_status()->set_node_losses(job->status().node_losses() + 1);
  if (Status s = Stop(job, StopCause::Failure(std::move(failure))); !s.ok()) {
    spdlog::error("{}", s.message());
    return false;
  }
  return true;
}

}  // namespace drover::server
