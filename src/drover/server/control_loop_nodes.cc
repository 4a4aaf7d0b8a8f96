// Node health and telemetry in the control loop: GPU reports from agents'
// heartbeats, taking sick GPUs out of service (and the jobs on them), fault
// injection relayed to agents, and the statistics /metrics reads. Runs on
// the loop thread only (public methods post to it).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/fault.h"
#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {
// How often a node may be sent the peer list while it changes: 1 ms per
// node in the cluster, at most a second. Every node gets N names each
// time, so the cluster's cost is N * N / interval = N names per ms
// whatever its size; a small cluster gets the news at its next heartbeat,
// where a second's wait left a node that had just joined unknown to its
// peers, and so unprotected by them, for that second (docs/failures.md).
constexpr int64_t kPeersPerNodeNs = 1'000'000;
constexpr int64_t kPeersEveryMaxNs = 1'000'000'000;
}  // namespace

// A checkpoint a workload on `node` saved: only for the current attempt of
// a job that runs there (a node speaks for its own workloads only), at no
// later than now (a node's clock ahead of ours would make its jobs look
// cheaper to stop than they are).
void ControlLoop::NoteCheckpoint(const std::string& node, const v1::CheckpointMark& mark) {
  auto ref = rpc::ParseWorkloadId(mark.workload_id());
  if (!ref.ok()) return;
  v1::Job* job = FindJob(ref->job_id);
  if (job == nullptr || !rpc::HoldsGpus(job->status().state()) || ref->attempt != job->status().attempt()) return;
  const v1::JobStatus& st = job->status();
  const std::string& where = ref->gang ? (ref->replica < st.replicas_size() ? st.replicas(ref->replica).node() : "")
                                       : st.allocation().node();
  if (where != node) return;
  const int64_t at_ns = std::min(mark.time_unix_nanos(), NowNs());
  if (at_ns <= st.checkpoint_time_unix_nanos()) return;
  if (Status s = sched_.SetCheckpoint(job->id(), at_ns / 1'000'000); !s.ok()) {
    spdlog::debug("checkpoint of '{}' not recorded: {}", mark.workload_id(), s.message());
    return;
  }
  job->mutable_status()->set_checkpoint_time_unix_nanos(at_ns);
  Persist(*job);
}

void ControlLoop::Heartbeat(std::string node, v1::Heartbeat hb, std::shared_ptr<AgentSink> sink) {
  loop_.Post([this, node = std::move(node), hb = std::move(hb), sink = std::move(sink)] {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return;
    NodeEntry& entry = it->second;
    if (sink != nullptr && entry.sink != sink) {
      // A session that is not the node's current one (a newer one took
      // over, or the node was declared lost since): it renews nothing. Its
      // stream is ended, so the agent registers again and reconciles.
      spdlog::warn("node '{}': refused a heartbeat of a {} session", node,
                   entry.liveness == Liveness::kLost ? "lost node's" : "stale");
      sink->Reset();
      return;
    }
    entry.last_heartbeat_ns = ToUnixNanos(clock_->Now());
    entry.heard_direct_ns = LeaseNowNs();
    ++renewals_direct_;
    // Its readings reach readers at once the first time, then, with its
    // lease times (GPU reports or not), once a second: four heartbeats a
    // second from a thousand nodes, each a snapshot, would keep the loop
    // busy. Changes of state (liveness, health, session) are published at
    // once, by whatever made them.
    if ((hb.gpus_size() > 0 && entry.telemetry.empty()) ||
        entry.heard_direct_ns - entry.published_ns >= kPublishReadingsEveryNs) {
      TouchNode(node);
    }
    if (entry.liveness == Liveness::kSuspect) {
      entry.liveness = Liveness::kAlive;
      entry.liveness_reason.clear();
      spdlog::info("node '{}' is heard again", node);
      UpdateSchedulable(node);
    }
    v1::HeartbeatAck ack;
    ack.set_seq(hb.seq());
    RenewViaPeers(node, hb, &ack);
    const int64_t peers_every = std::min(kPeersEveryMaxNs, static_cast<int64_t>(nodes_.size()) * kPeersPerNodeNs);
    if (hb.peers_version() != peers_version_ && entry.heard_direct_ns - entry.peers_sent_ns >= peers_every) {
      FillPeers(node, &ack);
      entry.peers_sent_ns = entry.heard_direct_ns;
    }
    if (entry.sink && (!options_.leading || options_.leading())) entry.sink->SendHeartbeatAck(ack);
    for (const v1::CheckpointMark& c : hb.checkpoints()) NoteCheckpoint(node, c);
    if (hb.gpus_size() == 0) return;
    entry.telemetry.resize(static_cast<size_t>(entry.node.gpus_size()));
    entry.readings.reset();  // new readings: the next capture copies them
    board_.AppendHistory(node, entry.node.gpus_size(), hb);
    bool changed = false;
    std::vector<std::pair<int, std::string>> newly_sick;
    for (const v1::GpuReport& r : hb.gpus()) {
      if (r.index() < 0 || r.index() >= entry.node.gpus_size()) continue;
      entry.telemetry[static_cast<size_t>(r.index())] = r.telemetry();
      v1::Gpu* g = entry.node.mutable_gpus(r.index());
      if (g->health() == r.health() && g->health_reason() == r.health_reason()) continue;
      if (g->health() != r.health()) {
        g->set_health_changed_unix_nanos(NowNs());
        if (r.health() == v1::GPU_HEALTH_UNHEALTHY) {
          newly_sick.emplace_back(r.index(), r.health_reason());
          spdlog::warn("node '{}' gpu {} is unhealthy: {}", node, r.index(), r.health_reason());
        } else {
          spdlog::info("node '{}' gpu {} is healthy again", node, r.index());
        }
      }
      g->set_health(r.health());
      g->set_health_reason(r.health_reason());
      changed = true;
    }
    if (!changed) return;
    if (Status s = sched_.UpsertNode(rpc::ToNodeInfo(entry.node, Schedulable(entry))); !s.ok()) {
      spdlog::error("node '{}': the scheduler refused its new GPU health: {}", node, s.message());
    }
    Persist(entry.node);
    for (const auto& [gpu, reason] : newly_sick) StopJobsOnGpu(node, gpu, reason);
  });
}

void ControlLoop::StopJobsOnGpu(const std::string& node, int gpu, const std::string& reason) {
  auto active = active_on_node_.find(node);
  if (active == active_on_node_.end()) return;
  std::vector<uint64_t> hit;
  for (uint64_t seq : active->second) {
    for (const sched::Placement& p : rpc::ToBinding(jobs_.at(seq)).replicas) {
      if (p.node == node && std::find(p.gpu_indices.begin(), p.gpu_indices.end(), gpu) != p.gpu_indices.end()) {
        hit.push_back(seq);
        break;
      }
    }
  }
  for (uint64_t seq : hit) {
    v1::Job& job = jobs_.at(seq);
    v1::JobState state = job.status().state();
    // Already on its way out: it ends (or is requeued) as it was going to.
    if (state == v1::JOB_STATE_CANCELLING || state == v1::JOB_STATE_PREEMPTING || job.status().gang_failed()) continue;
    StopForFailure(&job, fmt::format("gpu {} of node '{}' became unhealthy: {}", gpu, node, reason), false);
  }
}

void ControlLoop::StopForFailure(v1::Job* job, std::string failure, bool no_restart) {
  v1::JobStatus* st = job->mutable_status();
  st->set_state(v1::JOB_STATE_PREEMPTING);
  st->set_failure(std::move(failure));
  st->set_no_restart(no_restart);
  st->set_message("stopping: " + st->failure());
  st->clear_preempted_for();
  st->set_stop_grace_seconds(job->spec().termination_grace_seconds() > 0 ? job->spec().termination_grace_seconds()
                                                                         : rpc::kDefaultGraceSeconds);
  for (const sched::Placement& p : rpc::ToBinding(*job).replicas) dirty_nodes_.insert(p.node);
  spdlog::warn("job '{}' is stopped: {}", job->id(), st->failure());
  Persist(*job);
}

std::future<Result<Done>> ControlLoop::InjectFault(std::string node, int gpu, std::string fault) {
  return Call<Done>([this, node = std::move(node), gpu, fault = std::move(fault)]() -> Result<Done> {
    DROVER_RETURN_IF_ERROR(ParseFault(fault).status());
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", node));
    const v1::Node& n = it->second.node;
    if (gpu < 0 || gpu >= n.gpus_size()) {
      return InvalidArgument(fmt::format("node '{}' has no gpu {} (it has {})", node, gpu, n.gpus_size()));
    }
    if (n.gpus(gpu).backend() != "simulated") {
      return FailedPrecondition(fmt::format("gpu {} of node '{}' is a {} device; faults can only be injected into "
                                            "simulated GPUs",
                                            gpu, node, n.gpus(gpu).backend()));
    }
    if (!it->second.sink) return Unavailable(fmt::format("node '{}' has no session; try again when it is ready", node));
    v1::InjectFault msg;
    msg.set_gpu_index(gpu);
    msg.set_fault(fault);
    it->second.sink->SendInjectFault(msg);
    spdlog::warn("fault '{}' injected into gpu {} of node '{}'", fault, gpu, node);
    return Done{};
  });
}

std::future<Result<v1::Node>> ControlLoop::SetDrained(std::string name, bool drained, bool requeue) {
  return Call<v1::Node>([this, name = std::move(name), drained, requeue]() -> Result<v1::Node> {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return NotFound(fmt::format("node '{}' not found", name));
    if (it->second.node.drained() != drained) {
      it->second.node.set_drained(drained);
      UpdateSchedulable(name);
      Persist(it->second.node);
    }
    if (requeue) {
      // As a preemption for nobody: the checkpoint signal, the job's own
      // grace, then queued again in its submission order.
      for (uint64_t seq : std::vector<uint64_t>(active_on_node_[name].begin(), active_on_node_[name].end())) {
        v1::Job& job = jobs_.at(seq);
        v1::JobStatus* st = job.mutable_status();
        if (st->state() != v1::JOB_STATE_BOUND && st->state() != v1::JOB_STATE_RUNNING) continue;
        if (st->gang_failed()) continue;
        sched_.MarkPreempting(job.id()).IgnoreError("bound or running (checked above): the scheduler holds it");
        st->set_state(v1::JOB_STATE_PREEMPTING);
        st->set_message(fmt::format("drained off node '{}'", name));
        st->clear_preempted_for();
        int grace = job.spec().termination_grace_seconds();
        st->set_stop_grace_seconds(grace > 0 ? grace : rpc::kDefaultGraceSeconds);
        for (const sched::Placement& p : rpc::ToBinding(job).replicas) dirty_nodes_.insert(p.node);
        Persist(job);
      }
    }
    return View(it->second);
  });
}

}  // namespace drover::server
