#include "drover/agent/lease_keeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "drover/agent/job_dir.h"
#include "drover/agent/local_job.h"

namespace drover::agent {
namespace {

// Until the server says otherwise (RegisterResponse).
constexpr auto kDefaultHeartbeat = std::chrono::milliseconds(2000);
// Heartbeats kept waiting for their acknowledgement.
constexpr size_t kMaxUnackedHeartbeats = 256;
// LeaveASilentServer: a server that acknowledged no heartbeat for this many
// heartbeats, and at least this long, is left for the next.
constexpr int kSilentHeartbeats = 4;
constexpr auto kSilentAtLeast = std::chrono::milliseconds(1500);
// Peers a lagging node sends its fresh beat to (AnnounceIfLagging).
constexpr size_t kAnnounceFanout = 3;

}  // namespace

LeaseKeeper::LeaseKeeper(LeaseKeeperOptions options, runtime::LoopClient* loop, const std::atomic<bool>* stopping,
                         std::function<void(v1::Heartbeat*)> add_reports)
    : opts_(std::move(options)),
      loop_(loop),
      stopping_(stopping),
      add_reports_(std::move(add_reports)),
      heartbeat_every_(kDefaultHeartbeat) {}

void LeaseKeeper::OnConnected(const v1::RegisterResponse& lease, int64_t contact) {
  if (lease.heartbeat_interval_ms() > 0) heartbeat_every_ = std::chrono::milliseconds(lease.heartbeat_interval_ms());
  fence_after_ns_ = int64_t{lease.fence_after_ms()} * 1'000'000;
  fence_grace_ms_ = lease.fence_grace_ms();
  unacked_.clear();
  NoteContact(contact);
  StartGossip(lease);
  SetPeers(lease.peers());
  SendHeartbeat(/*with_gpus=*/true);
  HeartbeatTimer(++heartbeat_generation_);
}

void LeaseKeeper::OnHeartbeatAck(const v1::HeartbeatAck& ack) {
  if (gossip_) {
    if (ack.peers_changed()) {
      SetPeers(ack.peers());
      peers_version_ = ack.peers_version();
    }
    // Tell each peer whose beat this heartbeat carried that its lease holds.
    for (const v1::PeerBeat& p : ack.renewed()) {
      gossip_->SendLeaseAck(p.node_name(), p.beat()).IgnoreError("a datagram: the next heartbeat renews it");
    }
  }
  while (!unacked_.empty() && unacked_.front().first < ack.seq()) unacked_.pop_front();
  if (unacked_.empty() || unacked_.front().first != ack.seq()) return;  // not one of this session's
  NoteContact(unacked_.front().second);
  unacked_.pop_front();
}

// Moves the fence out to `contact` + the fence interval and tells the
// supervisors (the lease file). Only forward: contact is monotonic.
void LeaseKeeper::NoteContact(int64_t contact) {
  if (contact <= contact_ns_) return;
  contact_ns_ = contact;
  if (!opts_.fencing || fence_after_ns_ <= 0) return;
  NodeLease lease{contact_ns_ + fence_after_ns_, fence_grace_ms_};
  if (Status s = WriteNodeLease(lease_file(), lease); !s.ok()) {
    spdlog::error("node '{}' cannot renew its lease file: {}; its jobs fence themselves", opts_.node_name, s.message());
  }
}

// ---- gossip (docs/failures.md) ----

// Joins the group once the server has said its key (the first session).
void LeaseKeeper::StartGossip(const v1::RegisterResponse& r) {
  if (opts_.gossip_listen.empty() || gossip_ || r.gossip_key().empty()) return;
  membership::UdpNodeOptions o;
  o.name = opts_.node_name;
  o.bind_address = opts_.gossip_listen;
  o.hub = opts_.gossip_hub;
  if (opts_.gossip_period.count() > 0) {
    o.config.protocol_period_ns = std::chrono::nanoseconds(opts_.gossip_period).count();
    o.config.probe_timeout_ns = o.config.protocol_period_ns / 2;
  }
  o.config.cluster_id = r.gossip_cluster();
  o.config.key = r.gossip_key();
  // A peer relayed our beat to the server and it renewed our lease: that
  // is contact as of when the beat began.
  o.on_lease_ack = [this](int64_t, int64_t started_ns) {
    loop_->Post([this, started_ns] { NoteContact(started_ns); });
  };
  auto node = membership::UdpNode::Start(std::move(o));
  if (!node.ok()) {
    spdlog::error("node '{}' cannot join the gossip group on {}: {}", opts_.node_name, opts_.gossip_listen,
                  node.status().message());
    return;
  }
  gossip_ = std::move(*node);
  spdlog::info("node '{}' gossips on {}", opts_.node_name, gossip_->address());
}

void LeaseKeeper::SetPeers(const google::protobuf::RepeatedPtrField<v1::Peer>& peers) {
  if (!gossip_) return;
  std::map<std::string, std::string> m;
  for (const v1::Peer& p : peers) m[p.node_name()] = p.gossip_address();
  if (Status s = gossip_->SetPeers(m); !s.ok()) {
    spdlog::warn("node '{}': gossip peers refused: {}", opts_.node_name, s.message());
  }
}

// Heartbeats go out on their own timer, at the server's interval (which
// the first session may change), whatever else the loop is doing.
// Each session starts a timer of its own (`generation`); an older one
// stops at its next turn.
void LeaseKeeper::HeartbeatTimer(uint64_t generation) {
  if (*stopping_ || generation != heartbeat_generation_) return;
  auto since = std::chrono::steady_clock::now() - last_heartbeat_;
  if (since >= heartbeat_every_) {
    LeaveASilentServer();
    AnnounceIfLagging();
    SendHeartbeat();
    since = std::chrono::steady_clock::duration::zero();
  }
  loop_->PostAfter(heartbeat_every_ - since, [this, generation] { HeartbeatTimer(generation); });
}

// A session whose oldest unacknowledged heartbeat is older than
// kSilentHeartbeats heartbeats (at least kSilentAtLeast) is left for the
// next server: a leader that was paused, cut off from etcd or deposed
// keeps the connection open but answers nothing (docs/ha.md). With one
// server, MoveOn does nothing.
void LeaseKeeper::LeaveASilentServer() {
  if (!Connected() || unacked_.empty()) return;
  const int64_t silent_ns = MonoNanos() - unacked_.front().second;
  const int64_t limit_ns =
      std::max(std::chrono::nanoseconds(heartbeat_every_ * kSilentHeartbeats), std::chrono::nanoseconds(kSilentAtLeast))
          .count();
  if (silent_ns < limit_ns) return;
  spdlog::warn("node '{}': no heartbeat acknowledged for {} ms; trying the next server", opts_.node_name,
               silent_ns / 1'000'000);
  connection_->MoveOn();
}

// With no acknowledged contact for 1.5 heartbeats (the server's own
// threshold for relaying), the node sends a fresh beat to a few peers
// every heartbeat: the LeaseAck they relay then dates from moments ago,
// which keeps the fence well ahead when only the server link is down.
void LeaseKeeper::AnnounceIfLagging() {
  if (!gossip_ || fence_after_ns_ <= 0) return;
  int64_t lag_ns = MonoNanos() - contact_ns_;
  if (lag_ns > std::chrono::nanoseconds(heartbeat_every_).count() * 3 / 2) gossip_->Announce(kAnnounceFanout);
}

void LeaseKeeper::SendHeartbeat(bool with_gpus) {
  if (!Connected()) return;
  auto now = std::chrono::steady_clock::now();
  with_gpus = with_gpus ||
              now - last_gpu_report_ >= std::max<std::chrono::nanoseconds>(opts_.telemetry_period, heartbeat_every_);
  v1::AgentMessage hb;
  v1::Heartbeat* h = hb.mutable_heartbeat();
  h->set_time_unix_nanos(NowNanos());
  h->set_seq(++heartbeat_seq_);
  if (gossip_) {
    h->set_peers_version(peers_version_);
    for (const auto& [name, beat] : gossip_->TakeHeardDirectly()) {
      v1::PeerBeat* p = h->add_peers();
      p->set_node_name(name);
      p->set_beat(beat);
    }
  }
  unacked_.emplace_back(h->seq(), MonoNanos());
  if (unacked_.size() > kMaxUnackedHeartbeats) unacked_.pop_front();
  if (with_gpus) {
    add_reports_(h);
    last_gpu_report_ = now;
  }
  (void)connection_->Send(hb);
  last_heartbeat_ = std::chrono::steady_clock::now();
}

}  // namespace drover::agent
