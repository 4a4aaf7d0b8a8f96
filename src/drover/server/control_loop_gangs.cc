// Gangs in the control loop: a job of `replicas` > 1 runs one workload per
// replica, each on the node of its placement, named "<job id>.<replica>".
// Runs on the loop thread only.
//
// The job is RUNNING once every replica runs, and it ends once every
// replica has ended: SUCCEEDED when all exited 0. The first replica that
// fails (non-zero exit, signal, could not start, lost by its node) fails
// the gang: the others leave their desired sets so their agents stop them,
// and the job ends FAILED with that replica's exit once they are gone. A
// preempted or cancelled gang stops every replica and is requeued (or
// CANCELLED) when the last one is gone. The GPUs of every replica stay held
// until then, so nothing placed later overlaps a replica still stopping.
//
// Example: j-000007 is 2 x 8 GPUs on gpu-a and gpu-b. gpu-a is sent
// workload j-000007.0, gpu-b j-000007.1 (DROVER_REPLICA=1, DROVER_REPLICAS=2).
// j-000007.1 exits 3: replica_states[1] ends, gang_failed is set, gpu-a's
// desired set drops j-000007.0; its agent stops it (SIGTERM); when it
// reports the exit the job is FAILED with exit code 3.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

bool Failed(const v1::ReplicaState& r, bool failed_to_start) {
  return failed_to_start || r.exit_code() != 0 || r.signal() != 0;
}

std::string Describe(bool failed_to_start, int exit_code, int signal, const std::string& message) {
  if (!message.empty()) return message;
  if (failed_to_start) return "could not start";
  return signal != 0 ? fmt::format("killed by signal {}", signal) : fmt::format("exited with code {}", exit_code);
}

}  // namespace

void ControlLoop::AddGangWorkloads(const v1::Job& job, const std::string& node, v1::DesiredWorkloads* out) const {
  const v1::JobStatus& st = job.status();
  v1::JobState state = st.state();
  int n = job.spec().replicas();
  bool stop_with_grace =
      state == v1::JOB_STATE_PREEMPTING || (state == v1::JOB_STATE_CANCELLING && st.stop_grace_seconds() > 0);
  for (int r = 0; r < st.replicas_size(); ++r) {
    if (st.replicas(r).node() != node) continue;
    if (r < st.replica_states_size() && st.replica_states(r).ended()) continue;  // nothing left to run or stop
    std::string id = rpc::WorkloadId(job.id(), r, n, st.attempt());
    if (stop_with_grace) {
      FillStop(job, id, out->add_stops());
      continue;
    }
    // Cancelling or failed: not desired, so the agent stops it.
    if ((state != v1::JOB_STATE_BOUND && state != v1::JOB_STATE_RUNNING) || st.gang_failed()) continue;
    v1::Workload* w = out->add_workloads();
    w->set_job_id(job.id());
    w->set_tenant(job.spec().tenant());
    w->set_workload_id(id);
    w->set_replica(r);
    w->set_replicas(n);
    *w->mutable_command() = job.spec().command();
    *w->mutable_env() = job.spec().env();
    w->set_working_dir(job.spec().working_dir());
    *w->mutable_gpu_indices() = st.replicas(r).gpu_indices();
    w->set_cpu_millis(job.spec().cpu_millis());
    w->set_memory_bytes(job.spec().memory_bytes());
    w->set_gpu_memory_limit_bytes(job.status().allocation().gpu_memory_bytes());
    w->set_array_id(job.array().array_id());
    w->set_array_index(job.array().index());
    int grace = job.spec().termination_grace_seconds();
    w->set_termination_grace_seconds(grace > 0 ? grace : rpc::kDefaultGraceSeconds);
  }
}

void ControlLoop::ApplyGangStatus(v1::Job* job, int replica, const v1::WorkloadStatus& ws) {
  v1::JobStatus* st = job->mutable_status();
  while (st->replica_states_size() < st->replicas_size()) st->add_replica_states();  // records from before
  v1::ReplicaState* rs = st->mutable_replica_states(replica);
  if (rs->ended()) return;
  switch (ws.state()) {
    case v1::WORKLOAD_STATE_RUNNING: {
      if (rs->running()) return;
      rs->set_running(true);
      rs->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      if (v1::Attempt* a = CurrentAttempt(job); a != nullptr && a->start_time_unix_nanos() == 0) {
        a->set_start_time_unix_nanos(ws.start_time_unix_nanos());
      }
      bool all = std::all_of(st->replica_states().begin(), st->replica_states().end(),
                             [](const v1::ReplicaState& r) { return r.running(); });
      if (all && st->state() == v1::JOB_STATE_BOUND && !st->gang_failed()) {
        st->set_state(v1::JOB_STATE_RUNNING);
        int64_t last = 0;
        for (const v1::ReplicaState& r : st->replica_states()) last = std::max(last, r.start_time_unix_nanos());
        st->set_start_time_unix_nanos(last);
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

void ControlLoop::EndReplica(v1::Job* job, int replica, bool failed_to_start, int exit_code, int signal, int64_t end_ns,
                             std::string message) {
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
    st->set_gang_failed(true);
    st->set_exit_code(exit_code);
    st->set_signal(signal);
    st->set_message(fmt::format("replica {} failed: {}; stopping the other replicas", replica, rs->message()));
    for (const v1::Allocation& a : st->replicas()) dirty_nodes_.insert(a.node());
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
    if (r.start_time_unix_nanos() > 0 && (start == 0 || r.start_time_unix_nanos() < start)) start = r.start_time_unix_nanos();
  }
  if (st->start_time_unix_nanos() == 0) st->set_start_time_unix_nanos(start);
  if (st->gang_failed()) {
    Finish(job, v1::JOB_STATE_FAILED, st->exit_code(), st->signal(), end,
           std::string(st->message().substr(0, st->message().find("; stopping"))));
  } else if (state == v1::JOB_STATE_PREEMPTING && !all_clean) {
    Requeue(job);
  } else if (state == v1::JOB_STATE_CANCELLING) {
    Finish(job, v1::JOB_STATE_CANCELLED, exit_code, signal, end, "cancelled; every replica stopped");
  } else {
    Finish(job, all_clean ? v1::JOB_STATE_SUCCEEDED : v1::JOB_STATE_FAILED, all_clean ? 0 : exit_code,
           all_clean ? 0 : signal, end, all_clean ? "every replica exited with code 0" : rs->message());
  }
}

void ControlLoop::ApplyGangLost(v1::Job* job, const std::string& node, const std::set<std::string>& reported) {
  for (int r = 0; r < job->status().replicas_size(); ++r) {
    const v1::JobStatus& st = job->status();
    if (!rpc::HoldsGpus(st.state()) || st.replica_states_size() != st.replicas_size()) return;  // ended or requeued
    if (st.replicas(r).node() != node || st.replica_states(r).ended()) continue;
    if (reported.contains(rpc::WorkloadId(job->id(), r, job->spec().replicas(), st.attempt()))) continue;
    // A replica that never ran may not have reached its agent yet, unless
    // the gang is stopping anyway (it is no longer sent).
    bool stopping = st.state() == v1::JOB_STATE_PREEMPTING || st.state() == v1::JOB_STATE_CANCELLING ||
                    st.gang_failed();
    if (!st.replica_states(r).running() && !stopping) continue;
    EndReplica(job, r, false, -1, 0, NowNs(), fmt::format("node '{}' no longer knows replica {}", node, r));
  }
}

}  // namespace drover::server
