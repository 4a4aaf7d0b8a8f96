#pragma once
// Leadership: one leader among the servers that share a store, with every
// write of the leader fenced.
//
// Campaign() puts the leader key under a lease of the caller's, if the key
// is missing, and otherwise waits (watching the key) until it goes; the
// create revision of the key it wrote is its epoch. Keep-alives renew the
// lease every third of its TTL.
//
// Fencing: the Store that fenced() returns adds to every transaction that
// writes a compare "the leader key's create revision is my epoch". A server
// that was deposed (its lease ended while it was paused, partitioned or
// slow, and another took the key) can therefore never write: the store
// refuses its transaction, whatever it believes. Such a refusal, a
// keep-alive that finds the lease gone, or no successful keep-alive for a
// whole TTL, ends the leadership: Lost() is called once, and Leading() is
// false from then on. Leading() is also false once the TTL has passed since
// the start of the last successful keep-alive (by this process's monotonic
// clock, which runs while the process is stopped), before anything else
// noticed: a leader that must not act on stale memory asks it before
// sending anything.
//
// Thread-safety: thread-safe. The keep-alive and watchdog threads call
// Lost(); so may any thread that writes through fenced().

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "drover/common/clock.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store {

struct LeaderOptions {
  std::string key = "leader";  // the leader key (in the store's namespace)
  std::string identity;        // stored as the key's value: where clients find the leader
  // Every fenced write also puts this key, valued the writer's epoch, in
  // the same revision: the store's history then says which leadership made
  // each revision (tests/netns/ha_chaos_test.py checks it against the
  // leader key's history). Empty: no stamp.
  std::string writer_key = "writer";
  std::chrono::milliseconds ttl{1000};             // the lease; etcd raises it to its own minimum
  std::function<void(const Status& why)> on_lost;  // called once when leadership ends
  // Where fenced() reads and writes; null: the campaign's store. The
  // campaign and its keep-alives want a request deadline of about the TTL
  // (a request stuck on an etcd member that lost its leader must not hold a
  // standby or a leader past it); the data a longer one (a batch of 1,000
  // jobs on a slow disk). Must outlive the Leadership.
  Store* data = nullptr;
};

class Leadership {
 public:
  // Blocks until this caller leads or `stop` becomes true (kCancelled); a
  // store that is unavailable (no etcd quorum) is waited for, however long.
  // Other errors return. `standby` (may be null) is called with the current
  // leader's identity each time a new one is seen while waiting.
  static Result<std::unique_ptr<Leadership>> Campaign(Store* store, LeaderOptions options,
                                                      const std::atomic<bool>* stop = nullptr,
                                                      const std::function<void(const std::string&)>& standby = {});
  ~Leadership();  // stops the keep-alives and steps down

  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // The store with every writing transaction fenced by this leadership.
  // kFailedPrecondition once deposed. Valid while this object lives.
  Store* fenced() { return fenced_.get(); }
  int64_t epoch() const { return epoch_; }
  bool Leading() const;

  // The identity stored under the leader key ("" when none leads now).
  static Result<std::string> CurrentLeader(Store* store, const std::string& key = "leader");

  // Gives the leadership up now (a server that shuts down): revokes the
  // lease, so that a standby takes over without waiting out the TTL. Not a
  // loss: on_lost is not called.
  void StepDown();

 private:
  Leadership(Store* store, LeaderOptions options, LeaseId lease, int64_t epoch);
  void KeepAlives();
  void Watchdog();  // Lose() once valid_until_ns_ passes
  void Lose(const Status& why);

  Store* const store_;
  const LeaderOptions options_;
  const LeaseId lease_;
  const int64_t epoch_;
  std::unique_ptr<Store> fenced_;
  std::atomic<bool> leading_{true};
  std::atomic<int64_t> valid_until_ns_;  // steady clock
  std::once_flag lost_once_;
  Mutex mu_;
  CondVar wake_;
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  std::thread keepalive_;
  std::thread watchdog_;

  friend class FencedStore;
};

}  // namespace drover::store
