#pragma once
// UdpHub: one thread that serves many UdpNodes (udp_node.h), so that one
// process can run a thousand simulated nodes, gossip included, without a
// thread each (`drover up --simulate 1000`). The thread waits in epoll for
// any attached socket to become readable and on a periodic timer:
//
//   - a readable node drains at most one batch (64 datagrams), then ticks;
//     epoll is level-triggered and rotates its ready list, so a flooded
//     socket keeps its turn in the queue instead of starving the others;
//   - every tick_interval (timerfd, no drift) every attached node ticks.
//
//   DROVER_ASSIGN_OR_RETURN(auto hub, membership::UdpHub::Start({}));
//   membership::UdpNodeOptions o = ...;
//   o.hub = hub.get();                           // no thread of its own
//   DROVER_ASSIGN_OR_RETURN(auto node, membership::UdpNode::Start(std::move(o)));
//
// Ownership: the caller owns the hub and the nodes, in any order of
// destruction. Destroying the hub stops its thread and detaches the nodes
// still attached: they keep answering their accessors but no longer send,
// receive or tick (as if stopped); their Stop() is then a no-op here.
//
// Thread-safety: Attach, Detach and Stats are thread-safe. Detach is
// synchronous (see Attachment). Serve functions run on the hub's thread,
// one at a time, so a slow one delays every node of the hub.
//
// Not done here: one thread only (no sharding across cores); a round that
// overruns the tick interval is counted (missed_ticks), not compensated.
// The timer stands in for an epoll_wait timeout: same bound, no drift.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "drover/common/status.h"

namespace drover::membership {

struct UdpHubOptions {
  int64_t tick_interval_ns = 10'000'000;  // every node ticks at least this often; > 0
};

struct UdpHubStats {
  size_t attached = 0;           // serve functions attached now
  uint64_t sweeps = 0;           // timer rounds that served every node
  uint64_t missed_ticks = 0;     // timer periods that passed during a round: the thread is saturated
  uint64_t readable_serves = 0;  // serve calls for a readable socket
};

class UdpHub {
  struct Core;  // what attachments share with the hub; outlives it while they exist

 public:
  // Called on the hub's thread: `readable` when the socket has data (or a
  // pending error), false on a timer round. It should drain at most a
  // bounded batch, tick, and return quickly.
  using ServeFn = std::function<void(bool readable)>;

  // One fd served by the hub until Detach() or destruction.
  class Attachment {
   public:
    ~Attachment();  // Detach()
    Attachment(const Attachment&) = delete;
    Attachment& operator=(const Attachment&) = delete;

    // Idempotent. From any thread but the hub's: when it returns, the hub
    // is not calling the serve function and never will again. On the hub's
    // thread (from inside a serve function, e.g. a node's on_lease_ack
    // stopping a node) it does not wait, which would deadlock: the serve
    // function on the stack may finish, nothing is called afterwards. A
    // no-op once the hub is destroyed. The fd must stay open until this
    // returns (close it afterwards).
    void Detach();

   private:
    friend class UdpHub;
    Attachment(std::shared_ptr<Core> core, uint64_t id) : core_(std::move(core)), id_(id) {}
    const std::shared_ptr<Core> core_;
    const uint64_t id_;
  };

  static Result<std::unique_ptr<UdpHub>> Start(UdpHubOptions options);
  // Joins the thread, then detaches what is still attached. Not from a
  // serve function (an on_lease_ack): the thread cannot join itself.
  ~UdpHub();
  UdpHub(const UdpHub&) = delete;
  UdpHub& operator=(const UdpHub&) = delete;

  // Serves `fd` (a non-blocking socket the caller keeps open until
  // Detach) with `serve`. UdpNode::Start calls it when UdpNodeOptions::hub
  // is set.
  Result<std::unique_ptr<Attachment>> Attach(int fd, ServeFn serve);

  int64_t tick_interval_ns() const { return tick_interval_ns_; }
  UdpHubStats Stats() const;

 private:
  UdpHub(std::shared_ptr<Core> core, int64_t tick_interval_ns);
  void Run();
  // Serves attachment `id` if it is still attached.
  void Serve(uint64_t id, bool readable);

  const std::shared_ptr<Core> core_;
  const int64_t tick_interval_ns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace drover::membership
