#pragma once
// UdpNode: a membership Group (protocol.h) on a UDP socket, as the agent
// runs it. It owns the socket and one thread that waits for datagrams
// (poll with a timeout of tick_interval) and ticks the Group with the
// steady clock; all access to the Group is under one mutex. With
// UdpNodeOptions::hub set it has no thread: the UdpHub's (udp_hub.h) serves
// it along with many others, with the same drain-and-tick step (Serve).
//
//   membership::UdpNodeOptions options;
//   options.name = "gpu-07";
//   options.bind_address = "10.0.0.7:7946";
//   options.config.cluster_id = id;
//   options.config.key = cluster_key;
//   options.on_lease_ack = [&](int64_t beat, int64_t started_ns) { ... };
//   DROVER_ASSIGN_OR_RETURN(auto node, membership::UdpNode::Start(std::move(options)));
//   node->SetPeers({{"gpu-08", "10.0.0.8:7946"}});   // from the control plane
//   auto heard = node->TakeHeardDirectly();          // report to the server
//
// Thread-safety: every public method is thread-safe. on_lease_ack runs on
// the node's thread (or the hub's), after the lock is released (so it may
// call back into the node, Stop() included, but not destroy it); it should
// return quickly, since datagrams wait meanwhile (of every node of a hub).
//
// Not done here: addresses are numeric IPv4 ("10.0.0.7:7946") or IPv6 in
// brackets ("[fd00::7]:7946"), no host names; one socket family per node.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/membership/protocol.h"
#include "drover/membership/udp_hub.h"

namespace drover::membership {

struct UdpNodeOptions {
  std::string name;                        // our node name
  std::string bind_address = "0.0.0.0:0";  // port 0 picks a free one
  // initial_incarnation and initial_beat are set from the wall clock (ms
  // since the epoch), so that a restarted agent outranks its earlier life.
  Config config;
  int64_t tick_interval_ns = 5'000'000;  // how late a timeout may fire; ignored with a hub
  Group::LeaseAckFn on_lease_ack;        // beat_started_ns is on NowNs()'s clock
  // Not owned. Set: served by the hub's thread (and ticked at its
  // interval) instead of a thread of the node's own.
  UdpHub* hub = nullptr;
};

struct UdpNodeStats {
  GroupStats group;
  uint64_t send_errors = 0;  // datagrams the kernel refused (full buffer, no route)
};

class UdpNode {
 public:
  // Binds the socket and starts the thread, or attaches to options.hub.
  static Result<std::unique_ptr<UdpNode>> Start(UdpNodeOptions options);
  ~UdpNode();  // Stop()
  UdpNode(const UdpNode&) = delete;
  UdpNode& operator=(const UdpNode&) = delete;

  // The bound address, port 0 resolved: "127.0.0.1:41234". A node bound to
  // 0.0.0.0 reports that; the agent advertises its own IP with this port.
  const std::string& address() const { return address_; }

  // As Group::SetPeers; also rejects addresses this node cannot send to.
  Status SetPeers(const std::map<std::string, std::string>& peers);
  std::vector<MemberView> Members() const;
  std::map<std::string, int64_t> TakeHeardDirectly();
  Status SendLeaseAck(const std::string& member, int64_t beat);
  void Announce(size_t fanout);  // Group::Announce, now
  UdpNodeStats Stats() const;
  int64_t Beat() const;
  uint64_t Incarnation() const;

  // Joins the thread, or detaches from the hub, and closes the socket;
  // idempotent. Afterwards the accessors still answer, nothing is sent or
  // received. With a hub it is synchronous from any thread but the hub's:
  // when it returns the hub never calls into this node again. On the hub's
  // thread (from an on_lease_ack) it does not wait, so does not deadlock.
  void Stop();

  // The monotonic clock the Group is ticked with, in ns.
  static int64_t NowNs();

  // "127.0.0.1:0" -> "127.0.0.1:41234", a port free now (an address with a
  // port is returned as it is): a node registers its gossip address before
  // it may open the socket (the group's key comes with the registration).
  // Another process could take the port in between; Start then fails.
  static Result<std::string> PickPort(const std::string& address);

 private:
  class SocketTransport;
  UdpNode(int fd, std::string address, int64_t tick_interval_ns, Group::LeaseAckFn on_lease_ack);
  // The own thread: waits for datagrams or tick_interval, then Serve.
  void Run();
  // One round, on the node's thread or the hub's: with `drain`, hands at
  // most one batch of waiting datagrams to the Group; ticks it; then calls
  // on_lease_ack for the acks that came, outside the lock.
  void Serve(bool drain);

  const std::string address_;
  const int64_t tick_interval_ns_;
  const Group::LeaseAckFn on_lease_ack_;
  std::unique_ptr<SocketTransport> transport_;
  mutable Mutex mu_;
  std::unique_ptr<Group> group_ DROVER_GUARDED_BY(mu_);
  struct LeaseAck {
    int64_t beat;
    int64_t started_ns;
  };
  std::vector<LeaseAck> lease_acks_ DROVER_GUARDED_BY(mu_);  // for on_lease_ack_, outside the lock
  std::atomic<bool> stop_{false};
  std::thread thread_;                              // own-thread mode
  std::unique_ptr<UdpHub::Attachment> attachment_;  // hub mode
};

}  // namespace drover::membership
