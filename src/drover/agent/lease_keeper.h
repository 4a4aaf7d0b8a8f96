#pragma once
// LeaseKeeper: the node's lease with the server, kept alive. It owns the
// heartbeats (their timer, sequence numbers and the ones still waiting for
// an acknowledgement), the last acknowledged contact and the fence it sets
// (<data_dir>/lease, which every job's supervisor reads: a node cut off
// longer than its lease stops its own jobs, docs/failures.md), and the
// node's place in the gossip group, through which peers renew the lease of
// a node whose own link is down.
//
// The link itself (registration, the Session stream, moving to the next
// server) is ServerConnection's (connection.h); the keeper only tells it to
// move on from a server that stopped answering. What a heartbeat carries
// besides the lease (GPU reports, checkpoints) comes from `add_reports`.
//
// Owned by the agent (agent.cc). Not thread-safe: owned by the agent's
// loop, except gossip(), set once on the loop, whose node is thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "drover/agent/connection.h"
#include "drover/membership/udp_node.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

struct LeaseKeeperOptions {
  std::string node_name;
  std::string data_dir;  // the lease file lives here
  bool fencing = true;
  std::string gossip_listen;  // empty: no gossip
  membership::UdpHub* gossip_hub = nullptr;
  std::chrono::milliseconds gossip_period{0};
  std::chrono::nanoseconds telemetry_period{0};  // GPU reports ride along at most this often
};

class LeaseKeeper {
 public:
  // `add_reports` fills the GPU part of a heartbeat that carries one.
  LeaseKeeper(LeaseKeeperOptions options, runtime::LoopClient* loop, const std::atomic<bool>* stopping,
              std::function<void(v1::Heartbeat*)> add_reports);
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Before the loop runs anything of the agent.
  void SetConnection(ServerConnection* connection) { connection_ = connection; }

  // The lease's terms of a new session (interval, fence), contact as of
  // `contact_ns`, gossip joined once the server said its key, a heartbeat
  // with GPUs at once and the session's heartbeat timer.
  void OnConnected(const v1::RegisterResponse& lease, int64_t contact_ns);
  // The server acknowledged a heartbeat: it renewed the lease no earlier
  // than when that heartbeat was sent.
  void OnHeartbeatAck(const v1::HeartbeatAck& ack);
  // Every heartbeat renews the lease; GPU reports ride along once per
  // telemetry period (there is nothing newer in between), on a new
  // session, and at once when a GPU's health changes (`with_gpus`).
  void SendHeartbeat(bool with_gpus = false);

  // The file the supervisors fence by.
  std::string lease_file() const { return opts_.data_dir + "/lease"; }
  membership::UdpNode* gossip() const { return gossip_.get(); }
  void Stop() {
    if (gossip_) gossip_->Stop();
  }

 private:
  void NoteContact(int64_t contact);
  void StartGossip(const v1::RegisterResponse& r);
  void SetPeers(const google::protobuf::RepeatedPtrField<v1::Peer>& peers);
  void HeartbeatTimer(uint64_t generation);
  void LeaveASilentServer();
  void AnnounceIfLagging();
  bool Connected() const { return connection_ != nullptr && connection_->connected(); }

  const LeaseKeeperOptions opts_;
  runtime::LoopClient* const loop_;
  const std::atomic<bool>* const stopping_;
  const std::function<void(v1::Heartbeat*)> add_reports_;
  ServerConnection* connection_ = nullptr;

  std::chrono::milliseconds heartbeat_every_;
  std::chrono::steady_clock::time_point last_heartbeat_;
  uint64_t heartbeat_generation_ = 0;
  std::chrono::steady_clock::time_point last_gpu_report_;
  int64_t heartbeat_seq_ = 0;
  std::deque<std::pair<int64_t, int64_t>> unacked_;  // (seq, monotonic send time), oldest first
  int64_t contact_ns_ = 0;                           // monotonic: the last acknowledged contact
  int64_t fence_after_ns_ = 0;                       // from the server; 0: not yet told
  int64_t fence_grace_ms_ = 0;
  std::unique_ptr<membership::UdpNode> gossip_;  // started by the first session
  int64_t peers_version_ = 0;
};

}  // namespace drover::agent
