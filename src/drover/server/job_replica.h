#pragma once
// JobReplica: the jobs as the last successful commit left them, for
// readers on any thread. The control loop publishes the jobs each batch
// changed after the batch commits (before it acknowledges the batch's
// commands, so a client that was answered reads its own write), and the
// whole set after it rebuilds its state from the store. GetJob and
// ListJobs read here: a read never waits behind the loop's work, and the
// loop pays for a read only the pending reasons it asks for
// (ControlLoop::PendingMessages), not a scan of every job.
//
// Each job is an immutable shared_ptr: publishing swaps pointers under a
// short exclusive lock; a reader copies the pointers it needs under a
// shared lock and reads the jobs after releasing it.
//
// The copies double the memory the jobs take (finished jobs leave both
// once they are archived).
//
// Thread-safety: Replace, Update and SetUnavailable from the loop thread
// (one writer); Get, Scan and version from any thread.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/v1/common.pb.h"

namespace drover::server {

class JobReplica {
 public:
  using JobPtr = std::shared_ptr<const v1::Job>;

  // Every job, by sequence number; reads are served again.
  void Replace(std::map<uint64_t, JobPtr> jobs);
  // Jobs (new or changed) by sequence number, replacing older copies; a
  // null copy removes the job (it went to the archive).
  void Update(std::vector<std::pair<uint64_t, JobPtr>> changed);
  // The loop cannot vouch for its state (the store is down): reads fail
  // with `why` until the next Replace.
  void SetUnavailable(Status why);

  // The job, null when unknown; an error while unavailable.
  Result<JobPtr> Get(uint64_t seq) const;
  // Jobs from sequence number `from` on, in order, while `more` holds for
  // the job at hand, those that `keep` accepts. Both run under the shared
  // lock: keep them cheap.
  Result<std::vector<JobPtr>> Scan(uint64_t from, const std::function<bool(const v1::Job&)>& more,
                                   const std::function<bool(const v1::Job&)>& keep) const;
  // Newest first: jobs below sequence number `before` down to `min`, those
  // `keep` accepts, at most `limit`. `keep` runs under the shared lock.
  Result<std::vector<JobPtr>> ScanBack(uint64_t before, uint64_t min, size_t limit,
                                       const std::function<bool(const v1::Job&)>& keep) const;
  // Raised by every Replace and Update.
  uint64_t version() const;
  // How many jobs are in each state, every state present (zero included):
  // kept as jobs are published, O(states) to read.
  Result<std::map<v1::JobState, int64_t>> Counts() const;
  // The same per tenant (states with none left out), O(tenants x states).
  Result<std::map<std::string, std::map<v1::JobState, int64_t>>> CountsByTenant() const;

 private:
  void Count(const v1::Job& job, int delta) DROVER_REQUIRES(mu_);

  mutable SharedMutex mu_;
  std::map<uint64_t, JobPtr> jobs_ DROVER_GUARDED_BY(mu_);
  Status available_ DROVER_GUARDED_BY(mu_);
  uint64_t version_ DROVER_GUARDED_BY(mu_) = 0;
  std::map<v1::JobState, int64_t> counts_ DROVER_GUARDED_BY(mu_);                            // jobs_ by state
  std::map<std::string, std::map<v1::JobState, int64_t>> by_tenant_ DROVER_GUARDED_BY(mu_);  // by tenant, then state
};

}  // namespace drover::server
