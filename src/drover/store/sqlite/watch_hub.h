#pragma once
// WatchHub: delivers a store's committed revisions to its watchers, in
// revision order and each exactly once, on one dispatcher thread.
//
// For a Store that sees every commit itself (SqliteStore). The store calls
// Publish (each committed revision) and Add (a new watcher with its
// history) while holding its own write mutex, so the hub's FIFO queue is in
// revision order. A watcher added when the store was at revision R gets its
// history (revisions <= R, read in the same critical section) from its Start
// item and live batches from R+1 on. Batches <= R still queued at that point
// are skipped: a watcher becomes active only when the dispatcher reaches its
// Start item, which is behind them. Callbacks run with no lock held, so they
// may call into the store (reads and writes).
//
// Cancel (the handle's destructor) waits until the watcher's callback is not
// running, unless it is called on the dispatcher thread: a callback that
// destroys another watcher's handle does not wait for itself.
//
// Thread-safety: thread-safe. Shared by the store and its handles, so a
// handle may outlive the store. Does not bound its queue: a slow callback
// makes it grow.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/store/store.h"

namespace drover::store {

class WatchHub : public std::enable_shared_from_this<WatchHub> {
 public:
  // The events of one committed revision.
  struct Batch {
    int64_t revision = 0;
    std::vector<Event> events;
  };

  ~WatchHub() { Stop(); }

  // Queues a committed revision. Calls must come in revision order.
  void Publish(Batch batch);

  // Registers a watcher of keys starting with `prefix`: it first gets
  // `history` (already filtered by prefix), then published batches with
  // revision >= live_from. Starts the dispatcher on first use.
  std::unique_ptr<WatchHandle> Add(std::string prefix, int64_t live_from, std::vector<Batch> history,
                                   WatchCallback callback);

  // Drops what is still queued and joins the dispatcher; later Publish and
  // Add deliver nothing. Must not be called from a callback.
  void Stop();

 private:
  struct Watcher {
    uint64_t id = 0;
    std::string prefix;
    int64_t live_from = 0;  // first revision taken from published batches
    WatchCallback callback;
    bool active = false;  // its history has been delivered
    bool cancelled = false;
  };
  struct Start {
    std::shared_ptr<Watcher> watcher;
    std::vector<Batch> history;
  };
  friend class HubWatchHandle;

  void Cancel(uint64_t id);
  void Run();
  // Runs the callback with mu_ released, and holds it again on return.
  void Deliver(Watcher& watcher, const std::vector<Event>& events) DROVER_REQUIRES(mu_);

  Mutex mu_;
  CondVar work_cv_;  // the queue grew or stopping_ was set
  CondVar idle_cv_;  // a callback returned
  std::deque<std::variant<Batch, Start>> queue_ DROVER_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Watcher>> watchers_ DROVER_GUARDED_BY(mu_);
  uint64_t next_id_ DROVER_GUARDED_BY(mu_) = 1;
  uint64_t running_ DROVER_GUARDED_BY(mu_) = 0;  // the watcher whose callback runs now, 0 if none
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  std::thread thread_ DROVER_GUARDED_BY(mu_);  // started by the first Add
  std::thread::id dispatcher_id_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::store
