// The job lifecycle of the control loop: decisions of the scheduler
// (bindings, preemptions) and what agents report (running, exited, lost)
// turned into job states and store records. Runs on the loop thread only.
//
//   PENDING --bind--> BOUND --agent runs it--> RUNNING --exit--> SUCCEEDED | FAILED
//      ^                |                        |
//      |                +------preempt-----------+--> PREEMPTING --gone--> PENDING (Requeue)
//      |                                                   |  exit 0 ---> SUCCEEDED
//      +--(submission order and attained service kept)     +- cancel --> CANCELLING --gone--> CANCELLED
//
// A preempted job is stopped like a cancelled one (it leaves its node's
// desired set), with the grace of the preemption sent beside the desired
// set; it keeps its GPUs in the scheduler until the agent reports the
// process gone, so a job placed on them never overlaps it.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

bool RunsOn(const v1::Job& job, const std::string& node) {
  if (job.status().replicas_size() == 0) return job.status().allocation().node() == node;
  return std::any_of(job.status().replicas().begin(), job.status().replicas().end(),
                     [&](const v1::Allocation& a) { return a.node() == node; });
}

// The grace a preempted job gets between SIGTERM and SIGKILL: the shorter of
// its own termination grace (the most its owner said it needs to stop
// cleanly) and the scheduler's preemption grace (the most the job it yields
// to may be kept waiting). Neither side waits longer than it agreed to; a
// job that stops sooner ends sooner either way.
int StopGraceSeconds(const v1::Job& job, int64_t preemption_grace_ms) {
  int own = job.spec().termination_grace_seconds() > 0 ? job.spec().termination_grace_seconds()
                                                       : rpc::kDefaultGraceSeconds;
  int64_t policy = (std::max<int64_t>(preemption_grace_ms, 0) + 999) / 1000;  // round up: never cut it short
  return static_cast<int>(std::min<int64_t>(own, policy));
}

}  // namespace

void ControlLoop::ApplyBinding(const sched::Binding& binding) {
  v1::Job* job = FindJob(binding.job_id);
  if (job == nullptr || job->status().state() != v1::JOB_STATE_PENDING) {
    spdlog::error("scheduler bound job '{}', which is not pending here; giving it back", binding.job_id);
    sched_.Remove(binding.job_id, NowMs());
    return;
  }
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_BOUND);
  st->set_bind_time_unix_nanos(NowNs());
  // Its service before this run, as the scheduler holds it (the LAS
  // starvation guard may have forgiven it): a restart restores that.
  st->set_attained_gpu_ms(sched_.Attained(job->id(), st->bind_time_unix_nanos() / 1'000'000));
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
  a->set_number(st->attempt());
  a->set_bind_time_unix_nanos(st->bind_time_unix_nanos());
  for (const sched::Placement& p : binding.replicas) a->add_nodes(p.node);
  // The history is bounded: the first attempts and the latest are kept.
  constexpr int kMaxAttemptRecords = 32;
  if (st->attempts_size() > kMaxAttemptRecords) st->mutable_attempts()->DeleteSubrange(kMaxAttemptRecords / 2, 1);
  uint64_t seq = *ParseJobId(job->id());
  for (const sched::Placement& p : binding.replicas) {
    active_on_node_[p.node].insert(seq);
    dirty_nodes_.insert(p.node);
  }
  Persist(*job);
}

void ControlLoop::ApplyPreemption(const sched::Preemption& p) {
  v1::Job* job = FindJob(p.job_id);
  if (job == nullptr || !rpc::HoldsGpus(job->status().state())) {
    spdlog::error("scheduler preempted job '{}', which holds no GPUs here", p.job_id);
    return;
  }
  v1::JobState state = job->status().state();
  // Already on its way out: a cancel ends it CANCELLED, a preemption
  // requeues it, a failed gang ends FAILED.
  if (state == v1::JOB_STATE_CANCELLING || state == v1::JOB_STATE_PREEMPTING || job->status().gang_failed()) return;
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_PREEMPTING);
  st->set_message(fmt::format("preempted for {}: {}", p.for_job, p.reason));
  st->set_preempted_for(p.for_job);
  st->set_stop_grace_seconds(StopGraceSeconds(*job, p.grace_ms));
  for (const sched::Placement& pl : rpc::ToBinding(*job).replicas) dirty_nodes_.insert(pl.node);
  spdlog::info("job '{}' is preempted for '{}' ({}); stopping it with {}s grace", job->id(), p.for_job, p.reason,
               st->stop_grace_seconds());
  Persist(*job);
}

void ControlLoop::Release(v1::Job* job) {
  uint64_t seq = *ParseJobId(job->id());
  for (const sched::Placement& p : rpc::ToBinding(*job).replicas) {
    if (p.node.empty()) continue;
    active_on_node_[p.node].erase(seq);
    dirty_nodes_.insert(p.node);
  }
}

void ControlLoop::Finish(v1::Job* job, v1::JobState state, int exit_code, int signal, int64_t end_ns,
                         std::string message) {
  // The nodes it ran on may drop its checkpoints now.
  constexpr size_t kEndedJobsPerNode = 256;
  std::set<std::string> ran_on;
  for (const v1::Attempt& a : job->status().attempts()) ran_on.insert(a.nodes().begin(), a.nodes().end());
  for (const std::string& node : ran_on) {
    auto n = nodes_.find(node);
    if (n == nodes_.end()) continue;
    n->second.ended_jobs.push_back(job->id());
    if (n->second.ended_jobs.size() > kEndedJobsPerNode) n->second.ended_jobs.pop_front();
    dirty_nodes_.insert(node);
  }
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
  sched_.Remove(job->id(), NowMs());
  Persist(*job);
  TaskEnded(*job);
}

void ControlLoop::Requeue(v1::Job* job) {
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
  if (failed && (st->no_restart() ||
                 (!service && (job->spec().restart_policy() != "on-failure" ||
                               st->restarts() >= job->spec().max_restarts())))) {
    std::string why = st->failure();
    if (job->spec().restart_policy() == "on-failure" && !st->no_restart()) {
      why += fmt::format(" (restarted {} times, the most its restart policy allows)", st->restarts());
    }
    st->clear_failure();
    Finish(job, v1::JOB_STATE_FAILED, -1, 0, NowNs(), std::move(why));
    return;
  }
  EndAttempt(job, NowNs(), failed ? st->failure() : "preempted: " + st->message());
  Release(job);
  int64_t now_ms = NowMs();
  if (Status s = sched_.Requeue(job->id(), now_ms); !s.ok()) {
    // Not bound in the scheduler (its restore failed): queue it afresh, in
    // its submission order as far as the scheduler keeps one.
    spdlog::warn("job '{}' could not be requeued ({}); queueing it again", job->id(), s.message());
    sched_.Remove(job->id(), now_ms);
    if (Status e = sched_.Enqueue(rpc::ToJobRequest(*job), job->status().submit_time_unix_nanos() / 1'000'000);
        !e.ok()) {
      spdlog::error("job '{}' cannot be queued again: {}", job->id(), e.message());
    }
  }
  st->set_attained_gpu_ms(sched_.Attained(job->id(), now_ms));  // kept across a restart (LAS)
  st->set_state(v1::JOB_STATE_PENDING);
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
}

void ControlLoop::ApplyWorkloadStatus(const std::string& node, const v1::WorkloadStatus& ws) {
  auto ref = rpc::ParseWorkloadId(ws.workload_id().empty() ? ws.job_id() : ws.workload_id());
  v1::Job* job = ref.ok() && ref->job_id == ws.job_id() ? FindJob(ws.job_id()) : nullptr;
  // A workload this node should not run is simply left out of its desired
  // set; the agent stops it. Nothing to record; nor for an older attempt.
  if (job == nullptr || !rpc::HoldsGpus(job->status().state()) || ref->attempt != job->status().attempt()) return;
  if (ws.fenced() && ws.state() != v1::WORKLOAD_STATE_RUNNING) {
    // The node stopped it itself: it lost contact with the control plane.
    // Not the job's doing: it runs again while its restart policy allows.
    v1::JobState state = job->status().state();
    if (state != v1::JOB_STATE_CANCELLING && state != v1::JOB_STATE_PREEMPTING && !job->status().gang_failed()) {
      StopForFailure(job, fmt::format("fenced: node '{}' lost contact with the control plane", node), false);
      job->mutable_status()->set_node_losses(job->status().node_losses() + 1);
    }
  }
  if (job->spec().replicas() > 1) {
    const auto& placements = job->status().replicas();
    if (ref->gang && ref->replica < placements.size() && placements[ref->replica].node() == node) {
      ApplyGangStatus(job, ref->replica, ws);
    }
    return;
  }
  if (ref->gang || !RunsOn(*job, node)) return;
  v1::JobState state = job->status().state();
  const bool service = job->spec().has_service();
  switch (ws.state()) {
    case v1::WORKLOAD_STATE_RUNNING: {
      bool changed = service && ApplyServiceStatus(job, node, ws);
      if (state == v1::JOB_STATE_BOUND) {
        job->mutable_status()->set_state(v1::JOB_STATE_RUNNING);
        job->mutable_status()->set_start_time_unix_nanos(ws.start_time_unix_nanos());
        if (v1::Attempt* a = CurrentAttempt(job)) a->set_start_time_unix_nanos(ws.start_time_unix_nanos());
        changed = true;
      }
      if (changed) Persist(*job);
      break;
    }
    case v1::WORKLOAD_STATE_EXITED:
    case v1::WORKLOAD_STATE_FAILED_TO_START: {
      bool clean_exit = ws.state() == v1::WORKLOAD_STATE_EXITED && ws.exit_code() == 0 && ws.signal() == 0;
      // A service never succeeds: stopped for another job it runs again
      // later, however its process ended. One that ends while nobody stops
      // it (its agent gave up on it, or could not start it) ends FAILED: a
      // deployment replaces it (with back-off).
      if (state == v1::JOB_STATE_PREEMPTING && (!clean_exit || service)) {
        Requeue(job);  // stopped for another job: it runs again later
        break;
      }
      if (job->status().start_time_unix_nanos() == 0) {
        job->mutable_status()->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      }
      if (v1::Attempt* a = CurrentAttempt(job); a != nullptr && a->start_time_unix_nanos() == 0) {
        a->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      }
      // A preempted job that finished on its own during its grace succeeded.
      v1::JobState end = state == v1::JOB_STATE_CANCELLING ? v1::JOB_STATE_CANCELLED
                         : clean_exit && !service         ? v1::JOB_STATE_SUCCEEDED
                                                          : v1::JOB_STATE_FAILED;
      if (service && job->status().replica_states_size() > 0) {
        v1::ReplicaState* rs = job->mutable_status()->mutable_replica_states(0);
        rs->set_ready(false);
        rs->set_running(false);
        rs->set_ended(true);
      }
      std::string message = ws.message();
      if (message.empty()) {
        message = ws.signal() != 0 ? fmt::format("killed by signal {}", ws.signal())
                                   : fmt::format("exited with code {}", ws.exit_code());
      }
      Finish(job, end, ws.exit_code(), ws.signal(), ws.end_time_unix_nanos(), std::move(message));
      break;
    }
    default:
      spdlog::warn("node '{}' sent job '{}' in unknown workload state {}", node, ws.job_id(),
                   static_cast<int>(ws.state()));
  }
}

bool ControlLoop::ApplyServiceStatus(v1::Job* job, const std::string& node, const v1::WorkloadStatus& ws) {
  v1::JobStatus* st = job->mutable_status();
  if (st->replica_states_size() == 0) st->add_replica_states();  // bound before it was a service record
  v1::ReplicaState* rs = st->mutable_replica_states(0);
  // Bounded: a report is the agent's word, not checked at the edge.
  constexpr size_t kMaxEndpointBytes = 300;
  int32_t port = ws.port() > 0 && ws.port() <= 65535 ? ws.port() : 0;
  std::string endpoint = ws.endpoint().substr(0, kMaxEndpointBytes);
  if (endpoint.empty() && port > 0) endpoint = fmt::format("{}:{}", node, port);
  std::string reason = ws.not_ready_reason().substr(0, rpc::kMaxReasonBytes);
  int32_t restarts = std::max(0, ws.restarts());
  bool changed = !rs->running() || rs->port() != port || rs->endpoint() != endpoint || rs->ready() != ws.ready() ||
                 rs->restarts() != restarts || rs->not_ready_reason() != reason;
  if (!changed) return false;
  if (rs->ready() != ws.ready()) {
    spdlog::info("service '{}' on node '{}' is {}{}", job->id(), node, ws.ready() ? "ready" : "not ready",
                 ws.ready() || reason.empty() ? "" : ": " + reason);
  }
  rs->set_running(true);
  if (rs->start_time_unix_nanos() == 0) rs->set_start_time_unix_nanos(ws.start_time_unix_nanos());
  rs->set_port(port);
  rs->set_endpoint(std::move(endpoint));
  rs->set_ready(ws.ready());
  rs->set_restarts(restarts);
  rs->set_not_ready_reason(ws.ready() ? std::string() : std::move(reason));
  return true;
}

void ControlLoop::ApplyLost(const std::string& node, const std::set<std::string>& reported) {
  // A full report lists everything the agent knows: a job that was running
  // there and is missing from it is gone (the agent lost its state). A bound
  // job may simply not have reached the agent yet; it stays.
  std::vector<uint64_t> lost;
  std::vector<uint64_t> gangs;
  for (uint64_t seq : active_on_node_[node]) {
    const v1::Job& job = jobs_.at(seq);
    if (job.spec().replicas() > 1) {
      gangs.push_back(seq);
    } else if (job.status().state() != v1::JOB_STATE_BOUND &&
               !reported.contains(rpc::WorkloadId(job.id(), 0, 1, job.status().attempt()))) {
      lost.push_back(seq);
    }
  }
  for (uint64_t seq : gangs) ApplyGangLost(&jobs_.at(seq), node, reported);
  for (uint64_t seq : lost) {
    v1::Job& job = jobs_.at(seq);
    switch (job.status().state()) {
      case v1::JOB_STATE_PREEMPTING:
        Requeue(&job);  // it was being stopped anyway
        break;
      case v1::JOB_STATE_CANCELLING:
        Finish(&job, v1::JOB_STATE_CANCELLED, -1, 0, NowNs(), fmt::format("node '{}' no longer knows the job", node));
        break;
      default:
        if (job.spec().has_service()) {
          // A service runs until cancelled: it starts again (Requeue).
          job.mutable_status()->set_failure(fmt::format("node '{}' no longer knows the service", node));
          Requeue(&job);
          break;
        }
        Finish(&job, v1::JOB_STATE_FAILED, -1, 0, NowNs(), fmt::format("node '{}' no longer knows the job", node));
    }
  }
}

std::future<Result<v1::Job>> ControlLoop::Cancel(std::string id) {
  return Call<v1::Job>([this, id = std::move(id)]() -> Result<v1::Job> {
    v1::Job* job = FindJob(id);
    if (job == nullptr) {
      // Archived: it ended long ago (a read of the archive on the loop, for
      // this rare answer only).
      auto seq = ParseJobId(id);
      auto archived = seq.ok() ? ArchivedJob(*seq) : Result<JobReplica::JobPtr>(JobReplica::JobPtr());
      if (archived.ok() && *archived != nullptr) {
        return FailedPrecondition(
            fmt::format("job '{}' already ended ({})", id, rpc::JobStateDisplay((*archived)->status().state())));
      }
      return NotFound(fmt::format("job '{}' not found", id));
    }
    v1::JobState state = job->status().state();
    if (rpc::IsTerminal(state)) {
      return FailedPrecondition(
          fmt::format("job '{}' already ended ({})", id, rpc::JobStateDisplay(state)));
    }
    CancelOne(job);
    return View(*job);
  });
}

void ControlLoop::CancelOne(v1::Job* job) {
  v1::JobState state = job->status().state();
  if (state == v1::JOB_STATE_PENDING) {
    Finish(job, v1::JOB_STATE_CANCELLED, 0, 0, NowNs(), "cancelled before it started");
  } else if (state != v1::JOB_STATE_CANCELLING) {
    // Bound, running or being preempted: stop it; it ends CANCELLED once
    // its process is gone (a preempted one is then not queued again).
    job->mutable_status()->set_state(v1::JOB_STATE_CANCELLING);
    job->mutable_status()->set_message("cancel requested; stopping the process");
    for (const sched::Placement& p : rpc::ToBinding(*job).replicas) dirty_nodes_.insert(p.node);
    Persist(*job);
  }
}

}  // namespace drover::server
