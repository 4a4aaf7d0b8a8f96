#pragma once
// Scheduler: decides which pending job runs on which GPUs.
//
// Pure: no threads, no clocks, no I/O. The caller feeds it events (nodes
// added or changed, jobs queued, jobs ended) and asks for decisions; it
// persists the decisions and only then acts on them. The server and tests
// drive the same object. Same inputs, same decisions.
//
// This is the placeholder of the first slice: strict FIFO order (the head of
// the queue blocks the rest, so a large job is never starved) and first-fit
// whole-GPU placement (nodes in name order, lowest free indices).
//
// Invariants:
//  - a GPU is held by at most one job; held_ of a node is the union of the
//    masks of the jobs bound to it;
//  - a job is either queued, bound, or unknown, never two at once.
//
// Not thread-safe: owned by the server's control loop.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/model.h"

namespace drover::sched {

class Scheduler {
 public:
  // Adds a node or replaces its inventory. GPUs held by bound jobs stay held
  // (a bound job whose GPU disappeared keeps its claim until it ends).
  Status UpsertNode(const NodeInfo& node);
  void SetSchedulable(const std::string& node, bool schedulable);

  // Queues a job at the tail. kAlreadyExists if known.
  Status Enqueue(const JobRequest& job);
  // Records a binding made earlier (recovery from the store). The GPUs must
  // be free; kFailedPrecondition otherwise.
  Status Restore(const JobRequest& job, const Binding& binding);
  // Forgets a job, queued or bound, and frees its GPUs. No-op when unknown.
  void Remove(const std::string& job_id);

  // Places queued jobs, head first, until the head does not fit now.
  std::vector<Binding> Schedule();

  // Empty when some node could hold `job` once idle (drained, disconnected or
  // busy nodes count); otherwise why it never can, in words.
  std::optional<std::string> NeverFits(const JobRequest& job) const;

  // Why a queued job waits, in words; empty when it is not queued.
  std::string PendingReason(const std::string& job_id) const;

  size_t queued() const { return queue_.size(); }
  size_t bound() const { return bound_.size(); }
  // GPUs of `node` held by jobs, as a mask over node-local indices.
  uint64_t HeldMask(const std::string& node) const;

 private:
  struct NodeSlot {
    NodeInfo info;
    uint64_t held = 0;
  };
  struct BoundJob {
    std::string node;
    uint64_t mask = 0;
  };

  // The GPUs of `node` that could serve `job` (ignoring whether they are held).
  static uint64_t MatchingMask(const NodeInfo& node, const JobRequest& job);
  std::optional<Binding> FirstFit(const JobRequest& job) const;

  std::map<std::string, NodeSlot> nodes_;  // ordered by name: first-fit order
  std::deque<JobRequest> queue_;
  std::unordered_set<std::string> queued_ids_;  // the ids in queue_, for O(1) duplicate checks
  std::unordered_map<std::string, BoundJob> bound_;
};

}  // namespace drover::sched
