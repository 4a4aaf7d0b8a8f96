#include "drover/server/job_replica.h"

#include <mutex>
#include <utility>

namespace drover::server {

void JobReplica::Replace(std::map<uint64_t, JobPtr> jobs) {
  std::map<v1::JobState, int64_t> counts;
  for (const auto& [seq, job] : jobs) ++counts[job->status().state()];
  std::unique_lock lock(mu_);
  jobs_ = std::move(jobs);
  counts_ = std::move(counts);
  available_ = Status::Ok();
  ++version_;
}

void JobReplica::Update(std::vector<std::pair<uint64_t, JobPtr>> changed) {
  if (changed.empty()) return;
  std::unique_lock lock(mu_);
  for (auto& [seq, job] : changed) {
    auto it = jobs_.find(seq);
    if (it != jobs_.end()) Uncount(it->second->status().state());
    if (job == nullptr) {
      if (it != jobs_.end()) jobs_.erase(it);
    } else {
      ++counts_[job->status().state()];
      if (it != jobs_.end()) {
        it->second = std::move(job);
      } else {
        jobs_.emplace(seq, std::move(job));
      }
    }
  }
  ++version_;
}

void JobReplica::SetUnavailable(Status why) {
  std::unique_lock lock(mu_);
  available_ = std::move(why);
}

Result<JobReplica::JobPtr> JobReplica::Get(uint64_t seq) const {
  std::shared_lock lock(mu_);
  if (!available_.ok()) return available_;
  auto it = jobs_.find(seq);
  return it == jobs_.end() ? nullptr : it->second;
}

Result<std::vector<JobReplica::JobPtr>> JobReplica::Scan(uint64_t from, const std::function<bool(const v1::Job&)>& more,
                                                         const std::function<bool(const v1::Job&)>& keep) const {
  std::shared_lock lock(mu_);
  if (!available_.ok()) return available_;
  std::vector<JobPtr> out;
  for (auto it = jobs_.lower_bound(from); it != jobs_.end() && more(*it->second); ++it) {
    if (keep(*it->second)) out.push_back(it->second);
  }
  return out;
}

Result<std::vector<JobReplica::JobPtr>> JobReplica::ScanBack(uint64_t before, uint64_t min, size_t limit,
                                                             const std::function<bool(const v1::Job&)>& keep) const {
  std::shared_lock lock(mu_);
  if (!available_.ok()) return available_;
  std::vector<JobPtr> out;
  for (auto it = jobs_.lower_bound(before); it != jobs_.begin() && out.size() < limit;) {
    --it;
    if (it->first < min) break;
    if (keep(*it->second)) out.push_back(it->second);
  }
  return out;
}

void JobReplica::Uncount(v1::JobState state) {
  auto it = counts_.find(state);
  if (it != counts_.end() && --it->second == 0) counts_.erase(it);
}

Result<std::map<v1::JobState, int64_t>> JobReplica::Counts() const {
  std::shared_lock lock(mu_);
  if (!available_.ok()) return available_;
  std::map<v1::JobState, int64_t> out = counts_;
  for (int st = v1::JobState_MIN; st <= v1::JobState_MAX; ++st) {
    if (st != v1::JOB_STATE_UNSPECIFIED && v1::JobState_IsValid(st)) out.try_emplace(static_cast<v1::JobState>(st), 0);
  }
  return out;
}

uint64_t JobReplica::version() const {
  std::shared_lock lock(mu_);
  return version_;
}

}  // namespace drover::server
