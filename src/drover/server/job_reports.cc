// What agents report about workloads (running, exited, lost, checkpoints)
// and what happens to nodes (lost, drained, a sick GPU, a runtime limit),
// turned into the edges of the job lifecycle (job_lifecycle.h). Runs on the
// loop thread only.
//
// Gangs: a job of `replicas` > 1 runs one workload per replica, each on the
// node of its placement, named "<job id>.<replica>". The job is RUNNING once
// every replica runs, and it ends once every replica has ended: SUCCEEDED
// when all exited 0. The first replica that fails (non-zero exit, signal,
// could not start, lost by its node) fails the gang: the others leave their
// desired sets so their agents stop them, and the job ends FAILED with that
// replica's exit once they are gone. A preempted or cancelled gang stops
// every replica and is requeued (or CANCELLED) when the last one is gone.
// The GPUs of every replica stay held until then, so nothing placed later
// overlaps a replica still stopping.
//
// Example: j-000007 is 2 x 8 GPUs on gpu-a and gpu-b. gpu-a is sent
// workload j-000007.0, gpu-b j-000007.1 (DROVER_REPLICA=1, DROVER_REPLICAS=2).
// j-000007.1 exits 3: replica_states[1] ends, gang_failed is set, gpu-a's
// desired set drops j-000007.0; its agent stops it (SIGTERM); when it
// reports the exit the job is FAILED with exit code 3.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/common/quantity.h"
#include "drover/rpc/container.h"
#include "drover/rpc/convert.h"
#include "drover/server/job_lifecycle.h"

namespace drover::server {
namespace {

bool RunsOn(const v1::Job& job, const std::string& node) {
  if (job.status().replicas_size() == 0) return job.status().allocation().node() == node;
  return std::any_of(job.status().replicas().begin(), job.status().replicas().end(),
                     [&](const v1::Allocation& a) { return a.node() == node; });
}

bool Failed(const v1::ReplicaState& r, bool failed_to_start) {
  return failed_to_start || r.exit_code() != 0 || r.signal() != 0;
}

std::string Describe(bool failed_to_start, int exit_code, int signal, const std::string& message) {
  if (!message.empty()) return message;
  if (failed_to_start) return "could not start";
  return signal != 0 ? fmt::format("killed by signal {}", signal) : fmt::format("exited with code {}", exit_code);
}

// An edge the report's reading of the state says is legal; a refusal is a
// bug in that reading, logged rather than lost.
void Check(const Status& s) {
  if (!s.ok()) spdlog::error("job lifecycle: {}", s.message());
}

}  // namespace

void JobLifecycle::ApplyWorkloadStatus(const std::string& node, const v1::WorkloadStatus& ws) {
  auto ref = rpc::ParseWorkloadId(ws.workload_id().empty() ? ws.job_id() : ws.workload_id());
  v1::Job* job = ref.ok() && ref->job_id == ws.job_id() ? Find(ws.job_id()) : nullptr;
  // A workload this node should not run is simply left out of its desired
  // set; the agent stops it. Nothing to record; nor for an older attempt.
  if (job == nullptr || !rpc::HoldsGpus(job->status().state()) || ref->attempt != job->status().attempt()) return;
  if (ws.fenced() && ws.state() != v1::WORKLOAD_STATE_RUNNING) {
    // The node stopped it itself: it lost contact with the control plane.
    // Not the job's doing: it runs again while its restart policy allows.
    StopUnlessStopping(job, fmt::format("fenced: node '{}' lost contact with the control plane", node),
                       /*node_loss=*/true);
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
  const bool image_changed = ApplyImageStatus(job, ws);
  switch (ws.state()) {
    case v1::WORKLOAD_STATE_UNSPECIFIED:
      // Not started yet (a container's image is being pulled): the job
      // stays as it is; only what it says of its image is kept.
      if (image_changed) Persist(*job);
      break;
    case v1::WORKLOAD_STATE_RUNNING: {
      bool changed = (service && ApplyServiceStatus(job, node, ws)) || image_changed;
      if (state == v1::JOB_STATE_BOUND) {
        Check(Start(job, ws.start_time_unix_nanos()));
      } else if (changed) {
        Persist(*job);
      }
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
        Check(Requeue(job));  // stopped for another job: it runs again later
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
                         : clean_exit && !service          ? v1::JOB_STATE_SUCCEEDED
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
      Check(Finish(job, end, ws.exit_code(), ws.signal(), ws.end_time_unix_nanos(), std::move(message)));
      break;
    }
    default:
      spdlog::warn("node '{}' sent job '{}' in unknown workload state {}", node, ws.job_id(),
                   static_cast<int>(ws.state()));
  }
}

bool JobLifecycle::ApplyImageStatus(v1::Job* job, const v1::WorkloadStatus& ws) {
  if (!job->spec().has_container()) return false;
  v1::JobStatus* st = job->mutable_status();
  bool changed = false;
  // The agent's word, checked: a digest is what a later attempt runs.
  if (st->image_digest().empty() && !ws.image_digest().empty()) {
    if (rpc::IsImageDigest(ws.image_digest())) {
      st->set_image_digest(ws.image_digest());
      spdlog::info("job '{}': image '{}' resolved to {}", job->id(), job->spec().container().image(),
                   st->image_digest());
      // Replicas still pulling run the image the first one resolved.
      if (job->spec().replicas() > 1) MarkNodes(*job);
      changed = true;
    } else {
      spdlog::warn("job '{}': ignoring a malformed image digest from its agent", job->id());
    }
  }
  // How its start got the image, on the attempt (once).
  // (A job that ends at once is reported ended, never running.)
  if ((ws.state() == v1::WORKLOAD_STATE_RUNNING || ws.state() == v1::WORKLOAD_STATE_EXITED) &&
      (ws.image_cached() || ws.image_pull_millis() > 0)) {
    if (v1::Attempt* a = CurrentAttempt(job);
        a != nullptr && !a->image_cached() && a->image_pull_millis() == 0 && ws.image_pull_millis() >= 0) {
      a->set_image_cached(ws.image_cached());
      a->set_image_pull_millis(ws.image_cached() ? 0 : ws.image_pull_millis());
      changed = true;
    }
  }
  // Progress while it starts only: a running job's pull is over.
  if (ws.state() == v1::WORKLOAD_STATE_UNSPECIFIED && st->state() == v1::JOB_STATE_BOUND && !ws.image_pull().empty()) {
    std::string pull;
    for (char c : ws.image_pull().substr(0, rpc::kMaxReasonBytes)) pull += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (pull != st->image_pull()) {
      // The message of a bound job is its own until it starts (Bind clears it).
      if (st->message().empty() || st->message() == st->image_pull()) st->set_message(pull);
      st->set_image_pull(std::move(pull));
      changed = true;
    }
  }
  return changed;
}

bool JobLifecycle::ApplyServiceStatus(v1::Job* job, const std::string& node, const v1::WorkloadStatus& ws) {
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

void JobLifecycle::ApplyLost(const std::string& node, const std::set<std::string>& reported) {
  // A full report lists everything the agent knows: a job that was running
  // there and is missing from it is gone (the agent lost its state). A bound
  // job may simply not have reached the agent yet; it stays.
  std::vector<uint64_t> lost;
  std::vector<uint64_t> gangs;
  for (uint64_t seq : table_.ActiveOn(node)) {
    const v1::Job& job = table_.jobs_.at(seq);
    if (job.spec().replicas() > 1) {
      gangs.push_back(seq);
    } else if (job.status().state() != v1::JOB_STATE_BOUND &&
               !reported.contains(rpc::WorkloadId(job.id(), 0, 1, job.status().attempt()))) {
      lost.push_back(seq);
    }
  }
  for (uint64_t seq : gangs) ApplyGangLost(&table_.jobs_.at(seq), node, reported);
  for (uint64_t seq : lost) {
    v1::Job& job = table_.jobs_.at(seq);
    switch (job.status().state()) {
      case v1::JOB_STATE_PREEMPTING:
        Check(Requeue(&job));  // it was being stopped anyway
        break;
      case v1::JOB_STATE_CANCELLING:
        Check(Finish(&job, v1::JOB_STATE_CANCELLED, -1, 0, NowNs(),
                     fmt::format("node '{}' no longer knows the job", node)));
        break;
      default:
        if (job.spec().has_service()) {
          // A service runs until cancelled: it starts again (Requeue).
          job.mutable_status()->set_failure(fmt::format("node '{}' no longer knows the service", node));
          Check(Requeue(&job));
          break;
        }
        Check(
            Finish(&job, v1::JOB_STATE_FAILED, -1, 0, NowNs(), fmt::format("node '{}' no longer knows the job", node)));
    }
  }
}

// A checkpoint a workload on `node` saved: only for the current attempt of
// a job that runs there (a node speaks for its own workloads only), at no
// later than now (a node's clock ahead of ours would make its jobs look
// cheaper to stop than they are).
void JobLifecycle::NoteCheckpoint(const std::string& node, const v1::CheckpointMark& mark) {
  auto ref = rpc::ParseWorkloadId(mark.workload_id());
  if (!ref.ok()) return;
  v1::Job* job = Find(ref->job_id);
  if (job == nullptr || !rpc::HoldsGpus(job->status().state()) || ref->attempt != job->status().attempt()) return;
  const v1::JobStatus& st = job->status();
  const std::string& where =
      ref->gang ? (ref->replica < st.replicas_size() ? st.replicas(ref->replica).node() : "") : st.allocation().node();
  if (where != node) return;
  const int64_t at_ns = std::min(mark.time_unix_nanos(), NowNs());
  if (at_ns <= st.checkpoint_time_unix_nanos()) return;
  if (Status s = sched_->SetCheckpoint(job->id(), at_ns / 1'000'000); !s.ok()) {
    spdlog::debug("checkpoint of '{}' not recorded: {}", mark.workload_id(), s.message());
    return;
  }
  job->mutable_status()->set_checkpoint_time_unix_nanos(at_ns);
  Persist(*job);
}

void JobLifecycle::NodeLost(const std::string& name, const std::string& failure) {
  const std::set<uint64_t>& on_node = table_.ActiveOn(name);
  std::vector<uint64_t> hit(on_node.begin(), on_node.end());
  for (uint64_t seq : hit) {
    v1::Job& job = table_.jobs_.at(seq);
    v1::JobStatus* st = job.mutable_status();
    if (!rpc::HoldsGpus(st->state())) continue;
    if (job.spec().replicas() > 1) {
      // The gang runs whole or not at all: the replicas elsewhere are
      // stopped, those on the lost node end now (fenced), and once every one
      // is gone the job is queued again as a gang (or fails).
      StopUnlessStopping(&job, failure, /*node_loss=*/true);
      for (int r = 0; r < st->replicas_size(); ++r) {
        if (st->replicas(r).node() != name) continue;
        while (st->replica_states_size() < st->replicas_size()) st->add_replica_states();
        if (st->replica_states(r).ended()) continue;
        EndReplica(&job, r, false, -1, 0, NowNs(), failure);
        if (!rpc::HoldsGpus(job.status().state())) break;  // that was the last replica
      }
      continue;
    }
    switch (st->state()) {
      case v1::JOB_STATE_CANCELLING:
        Check(Finish(&job, v1::JOB_STATE_CANCELLED, -1, 0, NowNs(), "cancelled; " + failure));
        break;
      case v1::JOB_STATE_PREEMPTING:
        if (st->failure().empty()) {
          Check(Requeue(&job));  // it was being stopped for another job anyway
          break;
        }
        [[fallthrough]];
      default:
        st->set_failure(failure);
        st->set_node_losses(st->node_losses() + 1);
        Check(Requeue(&job));
    }
  }
}

void JobLifecycle::Drain(const std::string& node) {
  const std::set<uint64_t>& on_node = table_.ActiveOn(node);
  for (uint64_t seq : std::vector<uint64_t>(on_node.begin(), on_node.end())) {
    v1::Job& job = table_.jobs_.at(seq);
    const v1::JobState state = job.status().state();
    if (state != v1::JOB_STATE_BOUND && state != v1::JOB_STATE_RUNNING) continue;
    if (job.status().gang_failed()) continue;
    Check(Stop(&job, StopCause::Drained(node)));
  }
}

void JobLifecycle::StopJobsOnGpu(const std::string& node, int gpu, const std::string& reason) {
  std::vector<uint64_t> hit;
  for (uint64_t seq : table_.ActiveOn(node)) {
    for (const sched::Placement& p : rpc::ToBinding(table_.jobs_.at(seq)).replicas) {
      if (p.node == node && std::find(p.gpu_indices.begin(), p.gpu_indices.end(), gpu) != p.gpu_indices.end()) {
        hit.push_back(seq);
        break;
      }
    }
  }
  for (uint64_t seq : hit) {
    StopUnlessStopping(&table_.jobs_.at(seq),
                       fmt::format("gpu {} of node '{}' became unhealthy: {}", gpu, node, reason),
                       /*node_loss=*/false);
  }
}

void JobLifecycle::EnforceRuntimeLimits(const std::function<int64_t(const std::string& tenant)>& limit_s,
                                        int64_t now_ns) {
  constexpr int64_t kNsPerSecond = 1'000'000'000;
  // Only jobs holding resources (GPUs, or CPUs for CPU-only work) can run
  // too long (a gang is on several nodes: once).
  std::set<uint64_t> active;
  for (const auto& [node, seqs] : table_.active_on_node_) active.insert(seqs.begin(), seqs.end());
  for (uint64_t seq : active) {
    v1::Job& job = table_.jobs_.at(seq);
    const v1::JobStatus& st = job.status();
    if (st.state() != v1::JOB_STATE_RUNNING && st.state() != v1::JOB_STATE_BOUND) continue;
    // The tenant's limit and the job's own: the shorter wins.
    const int64_t tenant_limit = limit_s(job.spec().tenant());
    const int64_t own_limit = job.spec().time_limit_seconds();
    const bool own = own_limit > 0 && (tenant_limit <= 0 || own_limit <= tenant_limit);
    const int64_t limit = own ? own_limit : tenant_limit;
    if (limit <= 0) continue;
    int64_t began = st.start_time_unix_nanos() > 0 ? st.start_time_unix_nanos() : st.bind_time_unix_nanos();
    if (began <= 0 || now_ns - began < limit * kNsPerSecond) continue;
    if (st.gang_failed()) continue;  // already failing: it ends FAILED as it is
    Check(Stop(&job, StopCause::Failure(own ? fmt::format("time limit {} reached", FormatSeconds(limit))
                                            : fmt::format("ran longer than tenant '{}''s runtime limit of {}s",
                                                          job.spec().tenant(), limit),
                                        /*no_restart=*/true)));
  }
}

// ---- gangs ----

void JobLifecycle::ApplyGangStatus(v1::Job* job, int replica, const v1::WorkloadStatus& ws) {
  v1::JobStatus* st = job->mutable_status();
  while (st->replica_states_size() < st->replicas_size()) st->add_replica_states();  // records from before
  v1::ReplicaState* rs = st->mutable_replica_states(replica);
  if (rs->ended()) return;
  // The first replica to resolve the image decides for the gang; progress
  // is the latest any replica reported.
  const bool image_changed = ApplyImageStatus(job, ws);
  switch (ws.state()) {
    case v1::WORKLOAD_STATE_UNSPECIFIED:
      if (image_changed) Persist(*job);
      break;
    case v1::WORKLOAD_STATE_RUNNING: {
      if (rs->running()) {
        if (image_changed) Persist(*job);
        return;
      }
      rs->set_running(true);
      rs->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      if (v1::Attempt* a = CurrentAttempt(job); a != nullptr && a->start_time_unix_nanos() == 0) {
        a->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      }
      bool all = std::all_of(st->replica_states().begin(), st->replica_states().end(),
                             [](const v1::ReplicaState& r) { return r.running(); });
      if (all && st->state() == v1::JOB_STATE_BOUND && !st->gang_failed()) {
        int64_t last = 0;
        for (const v1::ReplicaState& r : st->replica_states()) last = std::max(last, r.start_time_unix_nanos());
        // The gang's start is its last replica's (its attempt's, the first's).
        Check(Start(job, last));
        break;  // Start persisted it
      }
      Persist(*job);
      break;
    }
    case v1::WORKLOAD_STATE_EXITED:
    case v1::WORKLOAD_STATE_FAILED_TO_START:
      if (!rs->running()) rs->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      EndReplica(job, replica, ws.state() == v1::WORKLOAD_STATE_FAILED_TO_START, ws.exit_code(), ws.signal(),
                 ws.end_time_unix_nanos(), ws.message());
      break;
    default:
      spdlog::warn("job '{}' replica {} reported in unknown workload state {}", job->id(), replica,
                   static_cast<int>(ws.state()));
  }
}

void JobLifecycle::EndReplica(v1::Job* job, int replica, bool failed_to_start, int exit_code, int signal,
                              int64_t end_ns, std::string message) {
  v1::JobStatus* st = job->mutable_status();
  v1::ReplicaState* rs = st->mutable_replica_states(replica);
  rs->set_ended(true);
  rs->set_exit_code(exit_code);
  rs->set_signal(signal);
  rs->set_end_time_unix_nanos(end_ns);
  rs->set_message(Describe(failed_to_start, exit_code, signal, message));
  v1::JobState state = st->state();
  bool failed = Failed(*rs, failed_to_start);
  if (failed && (state == v1::JOB_STATE_BOUND || state == v1::JOB_STATE_RUNNING) && !st->gang_failed()) {
    // Not a state of its own: the gang stays BOUND or RUNNING while its
    // other replicas are stopped, and ends FAILED below once they are.
    st->set_gang_failed(true);
    st->set_exit_code(exit_code);
    st->set_signal(signal);
    st->set_message(fmt::format("replica {} failed: {}; stopping the other replicas", replica, rs->message()));
    MarkNodes(*job);
    spdlog::info("job '{}': {}", job->id(), st->message());
  }
  bool all_ended = std::all_of(st->replica_states().begin(), st->replica_states().end(),
                               [](const v1::ReplicaState& r) { return r.ended(); });
  if (!all_ended) {
    Persist(*job);
    return;
  }
  bool all_clean = std::all_of(st->replica_states().begin(), st->replica_states().end(),
                               [](const v1::ReplicaState& r) { return r.exit_code() == 0 && r.signal() == 0; });
  int64_t end = 0;
  int64_t start = 0;
  for (const v1::ReplicaState& r : st->replica_states()) {
    end = std::max(end, r.end_time_unix_nanos());
    if (r.start_time_unix_nanos() > 0 && (start == 0 || r.start_time_unix_nanos() < start))
      start = r.start_time_unix_nanos();
  }
  if (st->start_time_unix_nanos() == 0) st->set_start_time_unix_nanos(start);
  if (st->gang_failed()) {
    Check(Finish(job, v1::JOB_STATE_FAILED, st->exit_code(), st->signal(), end,
                 std::string(st->message().substr(0, st->message().find("; stopping")))));
  } else if (state == v1::JOB_STATE_PREEMPTING && !all_clean) {
    Check(Requeue(job));
  } else if (state == v1::JOB_STATE_CANCELLING) {
    Check(Finish(job, v1::JOB_STATE_CANCELLED, exit_code, signal, end, "cancelled; every replica stopped"));
  } else {
    Check(Finish(job, all_clean ? v1::JOB_STATE_SUCCEEDED : v1::JOB_STATE_FAILED, all_clean ? 0 : exit_code,
                 all_clean ? 0 : signal, end, all_clean ? "every replica exited with code 0" : rs->message()));
  }
}

void JobLifecycle::ApplyGangLost(v1::Job* job, const std::string& node, const std::set<std::string>& reported) {
  for (int r = 0; r < job->status().replicas_size(); ++r) {
    const v1::JobStatus& st = job->status();
    if (!rpc::HoldsGpus(st.state()) || st.replica_states_size() != st.replicas_size()) return;  // ended or requeued
    if (st.replicas(r).node() != node || st.replica_states(r).ended()) continue;
    if (reported.contains(rpc::WorkloadId(job->id(), r, job->spec().replicas(), st.attempt()))) continue;
    // A replica that never ran may not have reached its agent yet, unless
    // the gang is stopping anyway (it is no longer sent).
    bool stopping =
        st.state() == v1::JOB_STATE_PREEMPTING || st.state() == v1::JOB_STATE_CANCELLING || st.gang_failed();
    if (!st.replica_states(r).running() && !stopping) continue;
    EndReplica(job, r, false, -1, 0, NowNs(), fmt::format("node '{}' no longer knows replica {}", node, r));
  }
}

}  // namespace drover::server
