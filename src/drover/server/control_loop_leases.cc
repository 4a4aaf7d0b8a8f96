// Node leases in the control loop (docs/failures.md): renewal by heartbeats
// and by peers' gossip reports, Suspect and Lost, requeueing the work of a
// lost node, and keeping a node that comes back out of service until it
// runs nothing it should not. Runs on the loop thread only.
//
//   Alive --no renewal for suspect_after--> Suspect --for ttl--> Lost
//     ^                                        |                   |
//     +------------- heard again --------------+                   |
//     +---- registers again, then a full report shows it clean ----+
//
// The lease clock is monotonic. A server that starts gives every node it
// recovers a fresh full ttl: it could not hear anyone while it was down.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

using std::chrono::milliseconds;

int64_t Ns(milliseconds d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

std::string Seconds(int64_t ns) { return fmt::format("{:.1f}s", static_cast<double>(ns) / 1e9); }

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

int64_t ControlLoop::LeaseNowNs() const {
  const Clock* c = options_.lease_clock != nullptr ? options_.lease_clock : SteadyClock::Get();
  return ToUnixNanos(c->Now());
}

bool ControlLoop::Schedulable(const NodeEntry& entry) const {
  return entry.sink != nullptr && !entry.node.drained() && entry.liveness == Liveness::kAlive &&
         !entry.awaiting_clean_report;
}

void ControlLoop::ScheduleLeaseChecks() {
  auto period = std::max(options_.lease.heartbeat_interval / 2, milliseconds(5));
  loop_.PostAfter(period, [this] {
    if (EnsureRecovered().ok()) EnforceLeases();
    ScheduleLeaseChecks();
  });
}

std::future<Result<Done>> ControlLoop::CheckLeases() {
  return Call<Done>([this]() -> Result<Done> {
    EnforceLeases();
    return Done{};
  });
}

void ControlLoop::EnforceLeases() {
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
      TouchNode(name);
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
      TouchNode(name);
    }
  }
  for (auto& [name, reason] : lost) DeclareLost(name, std::move(reason));
}

void ControlLoop::HeardAgain(const std::string& name, NodeEntry* entry) {
  entry->liveness = Liveness::kAlive;
  entry->liveness_reason.clear();
  spdlog::info("node '{}' is heard again", name);
  UpdateSchedulable(name);
}

void ControlLoop::DeclareLost(const std::string& name, std::string reason) {
  NodeEntry& entry = nodes_.at(name);
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
  lifecycle_.NodeLost(name, fmt::format("node lost: '{}' {}", name, reason));
  Persist(entry.node);
}

int64_t ControlLoop::LagNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(options_.lease.heartbeat_interval).count() * 3 / 2;
}

void ControlLoop::RenewViaPeers(const std::string& reporter, const v1::Heartbeat& hb, v1::HeartbeatAck* ack) {
  int64_t now = LeaseNowNs();
  for (const v1::PeerBeat& pb : hb.peers()) {
    auto it = nodes_.find(pb.node_name());
    if (it == nodes_.end() || pb.node_name() == reporter) continue;
    NodeEntry& peer = it->second;
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
      TouchNode(pb.node_name());
    }
  }
}

void ControlLoop::NoteUndesired(NodeEntry* entry, const v1::StatusReport& report) {
  // Only a node back from Lost is watched; its session's first report is full.
  if (!entry->awaiting_clean_report) return;
  std::set<std::string> wanted;
  const v1::DesiredWorkloads desired = DesiredFor(entry->node.name());
  for (const v1::Workload& w : desired.workloads()) wanted.insert(w.workload_id());
  if (report.full()) {
    entry->undesired_running.clear();
    entry->full_report_seen = true;
  }
  for (const v1::WorkloadStatus& ws : report.workloads()) {
    std::string id = ws.workload_id().empty() ? ws.job_id() : ws.workload_id();
    if (ws.state() == v1::WORKLOAD_STATE_RUNNING && !wanted.contains(id)) {
      entry->undesired_running.insert(id);
    } else {
      entry->undesired_running.erase(id);
    }
  }
  if (!entry->full_report_seen) return;
  if (!entry->undesired_running.empty()) {
    if (report.full()) {
      spdlog::warn("node '{}' still runs {} workloads it should not ('{}', ...); no new work until they are stopped",
                   entry->node.name(), entry->undesired_running.size(), *entry->undesired_running.begin());
    }
    return;
  }
  entry->awaiting_clean_report = false;
  UpdateSchedulable(entry->node.name());
}

}  // namespace drover::server

namespace drover::server {

namespace {
constexpr std::string_view kGossipKey = "/cluster/gossip";
constexpr size_t kGossipKeyBytes = 32;
}  // namespace

Status ControlLoop::LoadGossipSecret() {
  DROVER_ASSIGN_OR_RETURN(store::RangeResult r, store_->Range(std::string(kGossipKey)));
  std::string secret;
  for (const store::KeyValue& kv : r.kvs) {
    if (kv.key == kGossipKey) secret = kv.value;
  }
  if (secret.size() != 8 + kGossipKeyBytes) {
    // Made once per cluster (std::random_device reads the kernel's CSPRNG here).
    std::random_device rd;
    secret.clear();
    for (size_t i = 0; i < 8 + kGossipKeyBytes; ++i) secret.push_back(static_cast<char>(rd() & 0xff));
    auto w = store_->Txn({}, {store::Op::Put(std::string(kGossipKey), secret)}, {});
    if (!w.ok()) return w.status();
  }
  gossip_cluster_ = 0;
  for (size_t i = 0; i < 8; ++i) gossip_cluster_ = gossip_cluster_ << 8 | static_cast<uint8_t>(secret[i]);
  gossip_key_ = secret.substr(8);
  return Status::Ok();
}

void ControlLoop::FillPeers(const std::string& node, v1::HeartbeatAck* ack) const {
  ack->set_peers_version(peers_version_);
  ack->set_peers_changed(true);
  for (const auto& [name, entry] : nodes_) {
    if (name == node || entry.node.gossip_address().empty() || entry.liveness == Liveness::kLost) continue;
    v1::Peer* p = ack->add_peers();
    p->set_node_name(name);
    p->set_gossip_address(entry.node.gossip_address());
  }
}

std::future<Result<std::pair<int64_t, std::vector<v1::Peer>>>> ControlLoop::Peers(std::string node) {
  return Call<std::pair<int64_t, std::vector<v1::Peer>>>(
      [this, node = std::move(node)]() -> Result<std::pair<int64_t, std::vector<v1::Peer>>> {
        v1::HeartbeatAck ack;
        FillPeers(node, &ack);
        return std::make_pair(ack.peers_version(), std::vector<v1::Peer>(ack.peers().begin(), ack.peers().end()));
      });
}

}  // namespace drover::server
