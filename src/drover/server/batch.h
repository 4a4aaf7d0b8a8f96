#pragma once
// Batch: the control loop's open group commit, typed. Every state owner of
// the loop (the job lifecycle, the node registry, tenants, deployments, the
// archive) writes its records here and says what else the commit must do:
// which nodes get their desired workloads again, which node views are
// republished, which callers are answered and which audit entries go with
// it. The loop writes the records in one store transaction (with the audit
// entries), then does the rest; nothing is sent or answered before that.
//
// Invariants: a job's seq is in persisted() iff its record is among the
// batch's puts; a seq in unlisted() (deleted for the archive) is not in
// persisted().
//
// Not thread-safe: owned by the control loop's thread.

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "drover/auth/audit.h"
#include "drover/common/status.h"
#include "drover/store/store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// Store keys: one record per job, by id; one per node, by name; the next job
// sequence number (written when jobs leave for the archive).
inline constexpr std::string_view kJobsPrefix = "/jobs/";
inline constexpr std::string_view kNodesPrefix = "/nodes/";
inline constexpr std::string_view kNextJobKey = "/meta/next-job";

class Batch {
 public:
  using Ack = std::function<void(const Status&)>;

  // ---- records ----
  void PutJob(const v1::Job& job);
  // A job that leaves the store for the archive.
  void DeleteJob(uint64_t seq, const std::string& id);
  void PutNode(const v1::Node& node);
  // Any other record (tenants, deployments, the next job number).
  void Put(std::string key, std::string value) { ops_.push_back(store::Op::Put(std::move(key), std::move(value))); }
  void Delete(std::string key) { ops_.push_back(store::Op::Delete(std::move(key))); }

  // ---- what the commit does after the write ----
  // The node's desired workloads may have changed: sent again at commit.
  void MarkDesired(const std::string& node) { desired_.insert(node); }
  // The node's view changed: republished at commit.
  void Touch(const std::string& node) { touched_.insert(node); }
  // Called with the commit's outcome.
  void OnCommit(Ack ack) { acks_.push_back(std::move(ack)); }
  // An audit entry written in the same transaction; `recorded` turns true
  // once it is.
  void Audit(auth::AuditEntry entry, std::shared_ptr<std::atomic<bool>> recorded);

  // Whether an answer given now would run ahead of the store or of the
  // published node views: the batch has records, answers, audit entries or
  // node views to publish.
  bool Pending() const { return !ops_.empty() || !acks_.empty() || !touched_.empty() || !audit_.empty(); }
  // Whether a job of a deployment changed since the last call.
  bool TakeDeploymentJobsChanged() { return std::exchange(deployment_jobs_changed_, false); }

  // What the commit takes out of the batch at once: its records and their
  // consequences. Node marks stay until ClearNodes (the commit reads them
  // after the write).
  struct Sealed {
    std::vector<store::Op> ops;
    std::vector<Ack> acks;
    std::vector<auth::AuditEntry> audit;
    std::vector<std::shared_ptr<std::atomic<bool>>> audit_recorded;
    std::set<uint64_t> persisted;    // jobs put
    std::vector<uint64_t> unlisted;  // jobs deleted for the archive
  };
  Sealed Seal();
  const std::set<std::string>& desired() const { return desired_; }
  const std::set<std::string>& touched() const { return touched_; }
  void ClearDesired() { desired_.clear(); }
  void ClearTouched() { touched_.clear(); }
  // The job records put so far in the open batch (for the archive's check
  // that a job it removes was not changed meanwhile).
  const std::set<uint64_t>& persisted() const { return persisted_; }

 private:
  std::vector<store::Op> ops_;
  std::vector<Ack> acks_;
  std::vector<auth::AuditEntry> audit_;
  std::vector<std::shared_ptr<std::atomic<bool>>> audit_recorded_;
  std::set<uint64_t> persisted_;
  std::vector<uint64_t> unlisted_;
  std::set<std::string> desired_;
  std::set<std::string> touched_;
  bool deployment_jobs_changed_ = false;
};

}  // namespace drover::server
