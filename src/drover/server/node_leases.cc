// Node leases (docs/failures.md; the diagram is in node_registry.h): the
// renewal by a node's heartbeats and by its peers' gossip reports, Suspect,
// Alive again and Lost, requeueing the work of a lost node, and the GPU
// health a heartbeat carries. Runs on the loop thread only.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/rpc/container.h"
#include "drover/rpc/convert.h"
#include "drover/server/node_registry.h"

namespace drover::server {
namespace {

using std::chrono::milliseconds;

int64_t Ns(milliseconds d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

std::string Seconds(int64_t ns) { return fmt::format("{:.1f}s", static_cast<double>(ns) / 1e9); }

// How often a node may be sent the peer list while it changes: 1 ms per
// node in the cluster, at most a second. Every node gets N names each
// time, so the cluster's cost is N * N / interval = N names per ms
// whatever its size; a small cluster gets the news at its next heartbeat,
// where a second's wait left a node that had just joined unknown to its
// peers, and so unprotected by them, for that second (docs/failures.md).
constexpr int64_t kPeersPerNodeNs = 1'000'000;
constexpr int64_t kPeersEveryMaxNs = 1'000'000'000;

}  // namespace

LeaseOptions LeaseOptions::Derive() const {
  LeaseOptions o = *this;
  if (o.suspect_after.count() == 0) o.suspect_after = o.ttl * 2 / 5;
  if (o.fence_after.count() == 0) o.fence_after = o.ttl * 2 / 3;
  if (o.fence_grace.count() == 0) o.fence_grace = o.ttl * 2 / 15;
  return o;
}

Status LeaseOptions::Validate() const {
  if (heartbeat_interval < milliseconds(10)) return InvalidArgument("the heartbeat interval must be at least 10ms");
  if (suspect_after <= heartbeat_interval) {
    return InvalidArgument(fmt::format("a node would be suspect ({}ms) before its next heartbeat ({}ms) is due",
                                       suspect_after.count(), heartbeat_interval.count()));
  }
  if (ttl <= suspect_after) return InvalidArgument("the lease ttl must be longer than the suspect interval");
  // The agent checks its fence every 100 ms at most and may run 1% slower
  // than the server's clock: its jobs must be dead before the server's
  // lease runs out by either measure.
  auto fenced_by = (fence_after + fence_grace + milliseconds(100)) * 101 / 100;
  if (fence_after <= heartbeat_interval || fenced_by >= ttl) {
    return InvalidArgument(fmt::format(
        "the fence ({}ms, killed {}ms later) must end before the lease ttl ({}ms) with 100ms and 1% to spare, "
        "and start after the next heartbeat ({}ms)",
        fence_after.count(), fence_grace.count(), ttl.count(), heartbeat_interval.count()));
  }
  return Status::Ok();
}

int64_t NodeRegistry::LeaseNowNs() const {
  const Clock* c = options_.lease_clock != nullptr ? options_.lease_clock : SteadyClock::Get();
  return ToUnixNanos(c->Now());
}

void NodeRegistry::Heartbeat(const std::string& node, const v1::Heartbeat& hb, const std::shared_ptr<AgentSink>& sink) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  Entry& entry = it->second;
  if (sink != nullptr && entry.sink != sink) {
    // A session that is not the node's current one (a newer one took over,
    // or the node was declared lost since): it renews nothing. Its stream
    // is ended, so the agent registers again and reconciles.
    spdlog::warn("node '{}': refused a heartbeat of a {} session", node,
                 entry.liveness == Liveness::kLost ? "lost node's" : "stale");
    sink->Reset();
    return;
  }
  entry.last_heartbeat_ns = NowNs();
  entry.heard_direct_ns = LeaseNowNs();
  ++renewals_direct_;
  // Its readings reach readers at once the first time, then, with its lease
  // times (GPU reports or not), once a second: four heartbeats a second
  // from a thousand nodes, each a snapshot, would keep the loop busy.
  // Changes of state (liveness, health, session) are published at once, by
  // whatever made them.
  if ((hb.gpus_size() > 0 && entry.telemetry.empty()) ||
      entry.heard_direct_ns - entry.published_ns >= kPublishReadingsEveryNs) {
    Touch(node);
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
  if (entry.sink && Leading()) entry.sink->SendHeartbeatAck(ack);
  for (const v1::CheckpointMark& c : hb.checkpoints()) jobs_->NoteCheckpoint(node, c);
  if (hb.gpus_size() > 0) ApplyGpuReports(node, &entry, hb);
  if (hb.images_changed()) {
    entry.images = std::make_shared<const std::vector<v1::NodeImage>>(hb.images().begin(), hb.images().end());
    sched_->SetNodeImages(node, rpc::ImageKeys(hb.images()));
    Touch(node);
  }
}

void NodeRegistry::ApplyGpuReports(const std::string& node, Entry* entry, const v1::Heartbeat& hb) {
  entry->telemetry.resize(static_cast<size_t>(entry->node.gpus_size()));
  entry->readings.reset();  // new readings: the next capture copies them
  board_->AppendHistory(node, entry->node.gpus_size(), hb);
  bool changed = false;
  std::vector<std::pair<int, std::string>> newly_sick;
  for (const v1::GpuReport& r : hb.gpus()) {
    if (r.index() < 0 || r.index() >= entry->node.gpus_size()) continue;
    entry->telemetry[static_cast<size_t>(r.index())] = r.telemetry();
    v1::Gpu* g = entry->node.mutable_gpus(r.index());
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
  if (Status s = sched_->UpsertNode(rpc::ToNodeInfo(entry->node, Schedulable(*entry))); !s.ok()) {
    spdlog::error("node '{}': the scheduler refused its new GPU health: {}", node, s.message());
  }
  Persist(entry->node);
  for (const auto& [gpu, reason] : newly_sick) jobs_->StopJobsOnGpu(node, gpu, reason);
}

void NodeRegistry::EnforceLeases() {
  const LeaseOptions& lease = options_.lease;
  int64_t now = LeaseNowNs();
  // The loop itself stood still (a slow commit, a stopped process): the
  // heartbeats of that time may still wait in its queue, unread. Nobody is
  // condemned for the server's own silence: every lease gets the time back.
  // Later declarations only make the fence safer.
  // Measured on the machine's clock: a stall is real time the loop lost.
  int64_t real = ToUnixNanos(SteadyClock::Get()->Now());
  int64_t stalled = last_lease_check_ns_ > 0 ? real - last_lease_check_ns_ - Ns(lease.heartbeat_interval) : 0;
  last_lease_check_ns_ = real;
  if (stalled > 0) {
    for (auto& [name, entry] : nodes_) {
      entry.heard_direct_ns = std::min(now, entry.heard_direct_ns + stalled);
      if (entry.heard_via_peer_ns > 0) entry.heard_via_peer_ns = std::min(now, entry.heard_via_peer_ns + stalled);
      Touch(name);
    }
  }
  std::vector<std::pair<std::string, std::string>> lost;
  for (auto& [name, entry] : nodes_) {
    if (entry.liveness == Liveness::kLost) continue;
    int64_t direct = now - entry.heard_direct_ns;
    int64_t any = now - std::max(entry.heard_direct_ns, entry.heard_via_peer_ns);
    if (any >= Ns(lease.ttl)) {
      lost.emplace_back(name, fmt::format("no heartbeat for {} and no peer heard it", Seconds(any)));
      continue;
    }
    bool suspect = direct >= Ns(lease.suspect_after);
    if (suspect && entry.liveness == Liveness::kAlive) {
      entry.liveness = Liveness::kSuspect;
      entry.liveness_reason = fmt::format("no heartbeat for {}", Seconds(direct));
      spdlog::warn("node '{}' is suspect: {}", name, entry.liveness_reason);
      UpdateSchedulable(name);
    } else if (!suspect && entry.liveness == Liveness::kSuspect) {
      HeardAgain(name, &entry);
    }
    if (entry.liveness == Liveness::kSuspect && entry.heard_via_peer_ns > entry.heard_direct_ns) {
      entry.liveness_reason = fmt::format("no heartbeat for {}; its peers hear it (lease kept)", Seconds(direct));
      Touch(name);
    }
  }
  for (auto& [name, reason] : lost) DeclareLost(name, std::move(reason));
}

void NodeRegistry::HeardAgain(const std::string& name, Entry* entry) {
  entry->liveness = Liveness::kAlive;
  entry->liveness_reason.clear();
  spdlog::info("node '{}' is heard again", name);
  UpdateSchedulable(name);
}

void NodeRegistry::DeclareLost(const std::string& name, std::string reason) {
  Entry& entry = nodes_.at(name);
  entry.liveness = Liveness::kLost;
  entry.liveness_reason = reason;
  ++peers_version_;
  spdlog::error("node '{}' is lost: {}; queueing its jobs again", name, reason);
  ++node_losses_;
  if (entry.sink) {
    entry.sink->Reset();  // whatever it still sends is refused until it registers again
    entry.sink.reset();
  }
  UpdateSchedulable(name);
  jobs_->NodeLost(name, fmt::format("node lost: '{}' {}", name, reason));
  Persist(entry.node);
}

int64_t NodeRegistry::LagNs() const { return Ns(options_.lease.heartbeat_interval) * 3 / 2; }

void NodeRegistry::RenewViaPeers(const std::string& reporter, const v1::Heartbeat& hb, v1::HeartbeatAck* ack) {
  int64_t now = LeaseNowNs();
  for (const v1::PeerBeat& pb : hb.peers()) {
    auto it = nodes_.find(pb.node_name());
    if (it == nodes_.end() || pb.node_name() == reporter) continue;
    Entry& peer = it->second;
    // A lost node rejoins by registering, never through a peer; an older
    // beat than one already heard is a stale (or replayed) report.
    if (peer.liveness == Liveness::kLost || pb.beat() < peer.peer_beat) continue;
    peer.peer_beat = pb.beat();
    peer.heard_via_peer_ns = now;
    ++renewals_via_peers_;
    // The peer learns of it (a LeaseAck relayed by the reporter) only when
    // its own heartbeats lag: a node whose session is fine has its own acks,
    // and a thousand nodes relaying every renewal to each other cost more
    // than their gossip. 1.5 heartbeat intervals leave the LeaseAck time to
    // arrive well before the peer's fence (docs/failures.md).
    if (now - peer.heard_direct_ns > LagNs()) {
      *ack->add_renewed() = pb;
      // Its view shows this renewal only while its own heartbeats lag.
      Touch(pb.node_name());
    }
  }
}

void NodeRegistry::FillPeers(const std::string& node, v1::HeartbeatAck* ack) const {
  ack->set_peers_version(peers_version_);
  ack->set_peers_changed(true);
  for (const auto& [name, entry] : nodes_) {
    if (name == node || entry.node.gossip_address().empty() || entry.liveness == Liveness::kLost) continue;
    v1::Peer* p = ack->add_peers();
    p->set_node_name(name);
    p->set_gossip_address(entry.node.gossip_address());
  }
}

std::pair<int64_t, std::vector<v1::Peer>> NodeRegistry::Peers(const std::string& node) const {
  v1::HeartbeatAck ack;
  FillPeers(node, &ack);
  return std::make_pair(ack.peers_version(), std::vector<v1::Peer>(ack.peers().begin(), ack.peers().end()));
}

}  // namespace drover::server
