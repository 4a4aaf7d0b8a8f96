#pragma once
// LoopBoard: what the control loop publishes for readers besides jobs
// (JobReplica) and nodes (NodeReplica): why pending jobs wait, the
// scheduler's statistics, tenants' usage and each GPU's reading history.
// `drover jobs`, the dashboard's tenants and scheduler panels and a GPU's
// chart read here on their own thread; a read costs the loop nothing,
// except a pending reason not yet rendered since the scheduler last
// changed (one loop call for all of them, see ControlLoop::AnswerWithReasons).
//
// Pending reasons: a reason is kept with the reason epoch it was rendered
// at; the loop raises the epoch after every batch that ran a pass or
// changed the scheduler (what a reason says can only change then), so a
// reason of the current epoch is what the loop would render now. Reasons
// of jobs that stopped pending are dropped as the loop publishes them.
//
// Thread-safety: the Set/Put/Append/Drop methods from the loop thread
// (one writer); everything else from any thread. One short mutex guards
// each part; no reader holds one while it renders.

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/sched/scheduler.h"
#include "drover/server/loop_stats.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class LoopBoard {
 public:
  // ---- pending reasons ----
  void SetReasonEpoch(uint64_t epoch);
  uint64_t reason_epoch() const { return reason_epoch_.load(std::memory_order_acquire); }
  // Reasons rendered at `epoch` (by sequence number).
  void PutReasons(uint64_t epoch, std::vector<std::pair<uint64_t, std::string>> reasons);
  // The reason of `seq` if it was rendered at the current epoch.
  std::optional<std::string> Reason(uint64_t seq) const;
  // Forgets the reasons of jobs that no longer wait.
  void DropReasons(const std::vector<uint64_t>& seqs);
  void ClearReasons();

  // ---- scheduler statistics ----
  // Decisions and preemptions since start, and jobs in the scheduler's
  // queue and bound, after the last batch.
  void SetCounts(int64_t decisions, int64_t preemptions, int64_t queue_depth, int64_t bound);
  // Appends a (time, decisions) sample at most once a second (the last 11
  // kept) and a queue point at most every 5 s (the last hour).
  void Sample(int64_t now_ns);
  // The loop's counters for /metrics (LoopStats without what the
  // replicas count).
  void SetCounters(const LoopStats& counters);
  LoopStats Counters() const;
  // Counters, queue history and decisions per second over the last ten
  // seconds or so (up to `now_ns`); the decision latency histogram is the
  // caller's to add.
  v1::SchedulerStats Stats(int64_t now_ns) const;

  // ---- tenants ----
  struct Tenant {
    sched::TenantInfo info;                       // weight 1, no guarantee, for a tenant known only by its jobs
    bool configured = false;                      // in the server's configuration or stored
    std::optional<v1::TenantQuota> stored_quota;  // set when stored
    std::vector<std::string> mount_roots;         // Tenant.mount_roots, when stored
    sched::Scheduler::TenantUsage usage;
  };
  // Every tenant (configured, stored, or holding GPUs), replacing what was
  // there.
  void SetTenants(std::map<std::string, Tenant> tenants);
  // The usage of these tenants (after jobs of theirs bound or let go).
  void SetUsage(const std::vector<std::pair<std::string, sched::Scheduler::TenantUsage>>& usage);
  std::map<std::string, Tenant> Tenants() const;

  // ---- GPU reading history ----
  // Appends a point for each GPU of `node` (`gpus`: how many it has) that
  // a heartbeat reported, if that GPU's last point is at least 2 s older;
  // keeps ten minutes.
  void AppendHistory(const std::string& node, int gpus, const v1::Heartbeat& hb);
  // Forgets the node's points (it registered again).
  void DropHistory(const std::string& node);
  // The points of one GPU, oldest first (none when unknown).
  std::vector<v1::GpuPoint> History(const std::string& node, int gpu) const;

 private:
  struct Rendered {
    uint64_t epoch = 0;
    std::string text;
  };
  std::atomic<uint64_t> reason_epoch_{1};
  mutable Mutex reasons_mu_;
  std::map<uint64_t, Rendered> reasons_ DROVER_GUARDED_BY(reasons_mu_);

  std::atomic<int64_t> decisions_{0}, preemptions_{0}, queue_depth_{0}, bound_{0};
  mutable Mutex stats_mu_;
  std::deque<std::pair<int64_t, int64_t>> decision_samples_ DROVER_GUARDED_BY(stats_mu_);  // (ns, decisions)
  std::deque<v1::QueuePoint> queue_history_ DROVER_GUARDED_BY(stats_mu_);
  LoopStats counters_ DROVER_GUARDED_BY(stats_mu_);

  mutable Mutex tenants_mu_;
  std::map<std::string, Tenant> tenants_ DROVER_GUARDED_BY(tenants_mu_);

  mutable Mutex history_mu_;
  std::map<std::string, std::vector<std::deque<v1::GpuPoint>>> history_ DROVER_GUARDED_BY(history_mu_);
};

}  // namespace drover::server
