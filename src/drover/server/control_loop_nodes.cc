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

void ControlLoop::Heartbeat(std::string node, v1::Heartbeat hb, std::shared_ptr<AgentSink> sink) {
  // Renewals must not wait for the store (a degraded loop rereads it per
  // command): heartbeats run whatever the state.
  Run([this, node = std::move(node), hb = std::move(hb), sink = std::move(sink)] {
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
    if (entry.liveness == Liveness::kSuspect) HeardAgain(node, &entry);
    v1::HeartbeatAck ack;
    ack.set_seq(hb.seq());
    RenewViaPeers(node, hb, &ack);
    const int64_t peers_every = std::min(kPeersEveryMaxNs, static_cast<int64_t>(nodes_.size()) * kPeersPerNodeNs);
    if (hb.peers_version() != peers_version_ && entry.heard_direct_ns - entry.peers_sent_ns >= peers_every) {
      FillPeers(node, &ack);
      entry.peers_sent_ns = entry.heard_direct_ns;
    }
    if (entry.sink && (!options_.leading || options_.leading())) entry.sink->SendHeartbeatAck(ack);
    for (const v1::CheckpointMark& c : hb.checkpoints()) lifecycle_.NoteCheckpoint(node, c);
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
    for (const auto& [gpu, reason] : newly_sick) lifecycle_.StopJobsOnGpu(node, gpu, reason);
  }, Needs::kAnyState);
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
    // As a preemption for nobody: the checkpoint signal, the job's own
    // grace, then queued again in its submission order.
    if (requeue) lifecycle_.Drain(name);
    return View(it->second);
  });
}

}  // namespace drover::server
