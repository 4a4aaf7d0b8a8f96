#pragma once
// JobWatch: server push of job changes to whoever waits on them
// (`drover submit --wait`, `logs -f`, dashboards), so that nobody polls.
//
// The control loop publishes every job whose change it committed, as the
// job reads after the commit; a watcher subscribed to that job (by id, by
// array, or to every job of a tenant) gets it. To see a job's whole
// history without a gap, subscribe first, then read the job's current
// state: a change committed in between arrives as an event.
//
// Thread-safety: thread-safe. Callbacks run on the publisher's thread (the
// control loop's) and must not block; they may call Remove. A callback may
// still run once after Remove returned when it raced with a publication.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "drover/v1/common.pb.h"

namespace drover::server {

class JobWatch {
 public:
  using Callback = std::function<void(const v1::Job&)>;

  // What a watcher follows: the jobs named, the tasks of an array, or (both
  // empty) every job; in each case only jobs of `tenant` unless it is empty.
  struct Filter {
    std::set<std::string> ids;
    std::string array_id;
    std::string tenant;
  };

  uint64_t Add(Filter filter, Callback callback);
  void Remove(uint64_t id);

  // True when some watcher may want `job`: the loop skips building what
  // nobody reads.
  bool Wanted(const v1::Job& job) const;
  void Publish(const v1::Job& job);

  size_t watchers() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct Watcher {
    Filter filter;
    std::shared_ptr<const Callback> callback;
  };
  // Watchers that may want `job`; under mu_.
  void Collect(const v1::Job& job, std::vector<std::shared_ptr<const Callback>>* out) const;

  mutable std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Watcher> watchers_;
  std::multimap<std::string, uint64_t> by_job_;    // job id -> watcher
  std::multimap<std::string, uint64_t> by_array_;  // array id -> watcher
  std::set<uint64_t> everything_;                  // neither ids nor an array
  std::atomic<size_t> count_{0};
};

}  // namespace drover::server
