#pragma once
// JobTable: the control loop's live jobs (not yet archived), by sequence
// number, and the indexes kept beside them: which jobs hold GPUs on each
// node, and the array gates (arrays with max_running, and the tasks they
// hold back outside the scheduler).
//
// Owned by JobLifecycle, which alone changes it; everything else in the
// loop reads it through the const interface (a map-like view). A change of
// a job's state is a transition of JobLifecycle, never a write here.
//
// Invariants: a job is in active_on(n) iff it holds GPUs
// (rpc::HoldsGpus) and one of its placements is on n; a seq is held iff
// its array's gate lists it and it is PENDING outside the scheduler; a seq
// is waiting iff it is PENDING, outside the scheduler and its array's gate,
// and some JobSpec.after of it is not in Job.after_met; then waiters_ lists
// it under each of those.
//
// Not thread-safe: owned by the control loop's thread.

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>

#include "drover/common/ids.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// An array with a limit on how many of its tasks hold GPUs at once: tasks
// past it wait here, outside the scheduler, until one ends.
struct ArrayGate {
  int64_t active = 0;         // tasks in the scheduler (queued or holding GPUs)
  std::deque<uint64_t> held;  // by sequence number, submission order
};

class JobTable {
 public:
  using Map = std::map<uint64_t, v1::Job>;

  // The map's reading interface, in submission order.
  Map::const_iterator begin() const { return jobs_.begin(); }
  Map::const_iterator end() const { return jobs_.end(); }
  Map::const_iterator find(uint64_t seq) const { return jobs_.find(seq); }
  Map::const_iterator lower_bound(uint64_t seq) const { return jobs_.lower_bound(seq); }
  const v1::Job& at(uint64_t seq) const { return jobs_.at(seq); }
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  // By id; null when it is not live (unknown, or archived).
  const v1::Job* Find(const std::string& id) const {
    auto seq = ParseJobId(id);
    if (!seq.ok()) return nullptr;
    auto it = jobs_.find(*seq);
    return it == jobs_.end() ? nullptr : &it->second;
  }

  uint64_t next_seq() const { return next_seq_; }
  // Jobs holding GPUs on `node`.
  const std::set<uint64_t>& ActiveOn(const std::string& node) const {
    static const std::set<uint64_t> kNone;
    auto it = active_on_node_.find(node);
    return it == active_on_node_.end() ? kNone : it->second;
  }
  const std::map<std::string, std::set<uint64_t>>& active_on_node() const { return active_on_node_; }
  const std::set<uint64_t>& held() const { return held_; }
  // Jobs that wait for other jobs to end (JobSpec.after), outside the
  // scheduler, until each has ended as asked.
  const std::set<uint64_t>& waiting() const { return waiting_; }
  // Raised whenever a job is held back or let go (an array gate or a
  // dependency), so that cached wait reasons can tell they are stale.
  uint64_t gates_version() const { return gates_version_; }
  // Whether a live job has a time limit of its own (JobSpec.time_limit_seconds).
  bool AnyTimeLimit() const { return time_limited_ > 0; }

 private:
  friend class JobLifecycle;
  Map jobs_;
  uint64_t next_seq_ = 1;
  std::map<std::string, std::set<uint64_t>> active_on_node_;
  std::map<std::string, ArrayGate> gates_;  // arrays with max_running, by array id
  std::set<uint64_t> held_;                 // tasks an ArrayGate holds back
  std::set<uint64_t> waiting_;              // jobs waiting for their dependencies
  // By the seq of a job waited for: the jobs that wait for it.
  std::map<uint64_t, std::set<uint64_t>> waiters_;
  uint64_t gates_version_ = 0;
  size_t time_limited_ = 0;  // live jobs with time_limit_seconds > 0
};

}  // namespace drover::server
