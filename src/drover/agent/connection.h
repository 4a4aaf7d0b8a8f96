#pragma once
// ServerConnection: an agent's link to the server, on gRPC's callback API
// and with no thread of its own, so that the simulated nodes of `drover up
// --simulate 1000` share a few threads instead of owning several each.
//
// It finds the node's credential (joining once with a join token when the
// node has none, keeping what the join returns in the data directory),
// registers, opens the Session stream and sends its hello, and starts over
// with back-off when any of it fails. Everything it tells the agent
// arrives as a task on the agent's loop, in order: connected, messages,
// disconnected.
//
// Writes are queued and go out one at a time; a server that stops reading
// (more than kMaxQueuedBytes waiting) gets its session reset, and the
// agent's next session reports everything afresh (level-triggered).
//
// Thread-safety: Send, connected and queued_bytes on the agent's loop only;
// Stop from any other thread.

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

struct ConnectionOptions {
  std::string node_name;
  std::string server_address;  // host:port, or several comma-separated (the leader and its standbys)
  std::string data_dir;        // node.token, node.key, node.crt, ca.crt live here
  std::string token;           // the node credential; empty: <data_dir>/node.token, else a join
  std::string join_token;      // one-time, from `drover join-token`
  std::string ca_file;         // the cluster CA; empty: <data_dir>/ca.crt when a join kept one, else plaintext
  // Set: the channel to the server for `token` (an agent in the server's
  // own process, rpc::MakeInProcessChannel) instead of one to server_address.
  std::function<std::shared_ptr<grpc::Channel>(const std::string& token)> channel;
};

struct ConnectionEvents {
  // What to register with (GPUs, topology, labels, ...); asked on every attempt.
  std::function<v1::RegisterRequest()> make_register;
  // A session opened. `contact_ns` (steady clock) is when the registration
  // that opened it was sent: the server renewed the lease no earlier.
  std::function<void(const v1::RegisterResponse& lease, int64_t contact_ns)> connected;
  std::function<void(v1::ServerMessage message)> message;
  std::function<void()> disconnected;  // optional
};

class ServerConnection {
 public:
  // Outgoing messages allowed to wait for the network before the session
  // is reset.
  static constexpr size_t kMaxQueuedBytes = 64 << 20;

  // Fails only when the configured CA cannot be used. Connects once
  // Begin() is called, on `loop`, which must run until Stop() returns.
  static Result<std::unique_ptr<ServerConnection>> Create(ConnectionOptions options, runtime::EventLoop* loop,
                                                          ConnectionEvents events);
  virtual ~ServerConnection() = default;

  // Starts connecting (any thread; once).
  virtual void Begin() = 0;

  // Queues `m` on the open session; false when there is none.
  virtual bool Send(const v1::AgentMessage& m) = 0;
  virtual bool connected() const = 0;
  virtual size_t queued_bytes() const = 0;
  // Ends the open session as a failure and connects to the next server: the
  // one it has is not answering (paused, cut off, or deposed and not yet
  // gone). Does nothing with a single server, or without a session. Call
  // on the connection's loop.
  virtual void MoveOn() = 0;
  // Fetches the image archive `load_id` (AgentService.FetchImageArchive)
  // into a new file at `path`, exactly `size` bytes; `done` runs on the
  // agent's loop with how it went (the file is left for the caller either
  // way). Fails at once without a session. Call on the connection's loop.
  virtual void FetchImageArchive(const std::string& load_id, const std::string& path, int64_t size,
                                 std::function<void(Status)> done) {
    (void)load_id, (void)path, (void)size;
    done(Unavailable("this connection cannot fetch image archives"));
  }
  // Ends the session and every call in flight, and waits until gRPC is
  // done with them; no event is delivered after it returns. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace drover::agent
