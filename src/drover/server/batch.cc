#include "drover/server/batch.h"

#include "drover/common/ids.h"

namespace drover::server {

void Batch::PutJob(const v1::Job& job) {
  ops_.push_back(store::Op::Put(std::string(kJobsPrefix) + job.id(), job.SerializeAsString()));
  if (!job.spec().deployment().empty()) deployment_jobs_changed_ = true;
  auto seq = ParseJobId(job.id());
  if (!seq.ok()) return;
  persisted_.insert(*seq);
}

void Batch::DeleteJob(uint64_t seq, const std::string& id) {
  ops_.push_back(store::Op::Delete(std::string(kJobsPrefix) + id));
  persisted_.erase(seq);
  unlisted_.push_back(seq);
}

void Batch::PutNode(const v1::Node& node) {
  Touch(node.name());
  ops_.push_back(store::Op::Put(std::string(kNodesPrefix) + node.name(), node.SerializeAsString()));
}

void Batch::Audit(auth::AuditEntry entry, std::shared_ptr<std::atomic<bool>> recorded) {
  audit_.push_back(std::move(entry));
  audit_recorded_.push_back(std::move(recorded));
}

Batch::Sealed Batch::Seal() {
  Sealed s;
  s.ops = std::move(ops_);
  s.acks = std::move(acks_);
  s.audit = std::move(audit_);
  s.audit_recorded = std::move(audit_recorded_);
  s.persisted = std::move(persisted_);
  s.unlisted = std::move(unlisted_);
  ops_.clear();
  acks_.clear();
  audit_.clear();
  audit_recorded_.clear();
  persisted_.clear();
  unlisted_.clear();
  return s;
}

}  // namespace drover::server
