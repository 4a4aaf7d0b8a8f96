// What agents are sent: the workloads a node should run, and the stops of
// those it should end with a grace (preemptions, drains, failures). Runs on
// the loop thread only.

#include "drover/rpc/convert.h"
#include "drover/server/job_lifecycle.h"
#include "drover/server/launch_contract.h"

namespace drover::server {

void FillStop(const v1::Job& job, const std::string& workload_id, v1::Stop* stop) {
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

void JobLifecycle::FillContainer(const v1::Job& job, v1::Workload* w) const {
  if (!job.spec().has_container()) return;
  *w->mutable_container() = job.spec().container();
  // Every attempt after the first runs what the first resolved; a
  // deployment's new replica runs what its revision's first one did.
  std::string digest = job.status().image_digest();
  if (digest.empty() && !job.spec().deployment().empty() && revision_digest_) digest = revision_digest_(job);
  w->set_image_digest(std::move(digest));
}

void JobLifecycle::AddDesired(const std::string& node, v1::DesiredWorkloads* out) const {
  for (uint64_t seq : table_.ActiveOn(node)) {
    const v1::Job& job = table_.jobs_.at(seq);
    if (job.spec().replicas() > 1) {
      AddGangWorkloads(job, node, out);
      continue;
    }
    v1::JobState state = job.status().state();
    bool cancelled_while_preempted = state == v1::JOB_STATE_CANCELLING && job.status().stop_grace_seconds() > 0;
    if (state == v1::JOB_STATE_PREEMPTING || cancelled_while_preempted) {
      // Not desired, so the agent stops it, with the grace of the preemption
      // (kept when a user cancels it meanwhile: the agent may already have
      // sent SIGTERM, and the shorter grace was promised).
      FillStop(job, rpc::WorkloadId(job.id(), 0, 1, job.status().attempt()), out->add_stops());
      continue;
    }
    if (state != v1::JOB_STATE_BOUND && state != v1::JOB_STATE_RUNNING) continue;  // cancelling: stop it
    v1::Workload* w = out->add_workloads();
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
    FillLaunch(job, 0, w);
    if (job.spec().has_service()) *w->mutable_service() = job.spec().service();
    FillContainer(job, w);
    int grace = job.spec().termination_grace_seconds();
    w->set_termination_grace_seconds(grace > 0 ? grace : rpc::kDefaultGraceSeconds);
  }
}

void JobLifecycle::AddGangWorkloads(const v1::Job& job, const std::string& node, v1::DesiredWorkloads* out) const {
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
    FillLaunch(job, r, w);
    FillContainer(job, w);
    int grace = job.spec().termination_grace_seconds();
    w->set_termination_grace_seconds(grace > 0 ? grace : rpc::kDefaultGraceSeconds);
  }
}

}  // namespace drover::server
