#include "drover/server/job_replica.h"

#include <mutex>
#include <utility>

namespace drover::server {

void JobReplica::Replace(std::map<uint64_t, JobPtr> jobs) {
  WriterMutexLock lock(&mu_);
  jobs_.swap(jobs);
  counts_.clear();
  by_tenant_.clear();
  for (const auto& [seq, job] : jobs_) Count(*job, +1);
  available_ = Status::Ok();
  ++version_;
  // The older copies go out with `jobs`, after the lock.
}

void JobReplica::Update(std::vector<std::pair<uint64_t, JobPtr>> changed) {
  if (changed.empty()) return;
  {
    WriterMutexLock lock(&mu_);
    for (auto& [seq, job] : changed) {
      auto it = jobs_.find(seq);
      if (it != jobs_.end()) Count(*it->second, -1);
      if (job != nullptr) Count(*job, +1);
      if (it == jobs_.end()) {
        if (job != nullptr) jobs_.emplace(seq, std::move(job));
      } else if (job == nullptr) {
        job = std::move(it->second);  // freed after the lock
        jobs_.erase(it);
      } else {
        std::swap(it->second, job);  // the older copy is freed after the lock
      }
    }
    ++version_;
  }
  changed.clear();
}

void JobReplica::SetUnavailable(Status why) {
  WriterMutexLock lock(&mu_);
  available_ = std::move(why);
}

Result<JobReplica::JobPtr> JobReplica::Get(uint64_t seq) const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  auto it = jobs_.find(seq);
  return it == jobs_.end() ? nullptr : it->second;
}

Result<std::vector<JobReplica::JobPtr>> JobReplica::Scan(uint64_t from, const std::function<bool(const v1::Job&)>& more,
                                                         const std::function<bool(const v1::Job&)>& keep) const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  std::vector<JobPtr> out;
  for (auto it = jobs_.lower_bound(from); it != jobs_.end() && more(*it->second); ++it) {
    if (keep(*it->second)) out.push_back(it->second);
  }
  return out;
}

Result<std::vector<JobReplica::JobPtr>> JobReplica::ScanBack(uint64_t before, uint64_t min, size_t limit,
                                                             const std::function<bool(const v1::Job&)>& keep) const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  std::vector<JobPtr> out;
  for (auto it = jobs_.lower_bound(before); it != jobs_.begin() && out.size() < limit;) {
    --it;
    if (it->first < min) break;
    if (keep(*it->second)) out.push_back(it->second);
  }
  return out;
}

void JobReplica::Count(const v1::Job& job, int delta) {
  v1::JobState state = job.status().state();
  auto drop_zero = [](auto& map, const auto& key) {
    auto it = map.find(key);
    if (it != map.end() && it->second == 0) map.erase(it);
  };
  counts_[state] += delta;
  drop_zero(counts_, state);
  auto& tenant = by_tenant_[job.spec().tenant()];
  tenant[state] += delta;
  drop_zero(tenant, state);
  if (tenant.empty()) by_tenant_.erase(job.spec().tenant());
}

Result<std::map<std::string, std::map<v1::JobState, int64_t>>> JobReplica::CountsByTenant() const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  return by_tenant_;
}

Result<std::map<v1::JobState, int64_t>> JobReplica::Counts() const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  std::map<v1::JobState, int64_t> out = counts_;
  for (int st = v1::JobState_MIN; st <= v1::JobState_MAX; ++st) {
    if (st != v1::JOB_STATE_UNSPECIFIED && v1::JobState_IsValid(st)) out.try_emplace(static_cast<v1::JobState>(st), 0);
  }
  return out;
}

uint64_t JobReplica::version() const {
  ReaderMutexLock lock(&mu_);
  return version_;
}

}  // namespace drover::server
