#pragma once
// Client channels to a Drover server that carry a credential: every call on
// the channel sends "authorization: Bearer <token>" (added by a client
// interceptor, so it works on plaintext loopback channels too, where gRPC
// refuses call credentials).

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace drover::rpc {

// `token` may be empty (no authorization metadata is sent). `address` may
// list several servers, comma-separated (a leader and its standbys,
// docs/ha.md): the channel uses those that accept connections.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token,
                                           std::shared_ptr<grpc::ChannelCredentials> creds = nullptr,
                                           const grpc::ChannelArguments& args = {});

// Keeps gRPC's callback completion queue alive for the life of the process
// (MakeChannel calls it). gRPC 1.51 (Debian 12) makes that queue with the
// first channel and destroys it with the last; when the last channel goes
// on one of the queue's own threads (a callback that drops the final
// reference to a call whose context holds its channel), the thread joins
// itself and frees the queue it is still polling: "assertion failed: prior
// > 0" in grpc_cq_internal_unref, an abort. Agents hit it when a failover
// left them with no channel but a failed registration's. One idle channel
// that is never destroyed keeps the count above zero.
void HoldCallbackQueue();

// A channel into `server` in this process (gRPC's in-process transport: no
// socket, no HTTP/2 framing, no poller thread between the two ends), with
// the same credential. `server` must outlive the channel's calls.
std::shared_ptr<grpc::Channel> MakeInProcessChannel(grpc::Server* server, const std::string& token);

}  // namespace drover::rpc
