#include "drover/server/job_watch.h"

namespace drover::server {

uint64_t JobWatch::Add(Filter filter, Callback callback) {
  std::lock_guard lock(mu_);
  uint64_t id = next_++;
  for (const std::string& job : filter.ids) by_job_.emplace(job, id);
  if (!filter.array_id.empty()) by_array_.emplace(filter.array_id, id);
  if (filter.ids.empty() && filter.array_id.empty()) everything_.insert(id);
  watchers_.emplace(id, Watcher{std::move(filter), std::make_shared<const Callback>(std::move(callback))});
  count_.store(watchers_.size(), std::memory_order_relaxed);
  return id;
}

void JobWatch::Remove(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return;
  auto erase = [id](std::multimap<std::string, uint64_t>& index, const std::string& key) {
    auto [lo, hi] = index.equal_range(key);
    for (auto i = lo; i != hi; ++i) {
      if (i->second == id) {
        index.erase(i);
        return;
      }
    }
  };
  for (const std::string& job : it->second.filter.ids) erase(by_job_, job);
  if (!it->second.filter.array_id.empty()) erase(by_array_, it->second.filter.array_id);
  everything_.erase(id);
  watchers_.erase(it);
  count_.store(watchers_.size(), std::memory_order_relaxed);
}

void JobWatch::Collect(const v1::Job& job, std::vector<std::shared_ptr<const Callback>>* out) const {
  auto add = [&](uint64_t id) {
    const Watcher& w = watchers_.at(id);
    if (!w.filter.tenant.empty() && w.filter.tenant != job.spec().tenant()) return;
    out->push_back(w.callback);
  };
  auto [lo, hi] = by_job_.equal_range(job.id());
  for (auto i = lo; i != hi; ++i) add(i->second);
  if (!job.array().array_id().empty()) {
    auto [alo, ahi] = by_array_.equal_range(job.array().array_id());
    for (auto i = alo; i != ahi; ++i) add(i->second);
  }
  for (uint64_t id : everything_) add(id);
}

bool JobWatch::Wanted(const v1::Job& job) const {
  if (watchers() == 0) return false;
  std::vector<std::shared_ptr<const Callback>> callbacks;
  std::lock_guard lock(mu_);
  Collect(job, &callbacks);
  return !callbacks.empty();
}

void JobWatch::Publish(const v1::Job& job) {
  if (watchers() == 0) return;
  std::vector<std::shared_ptr<const Callback>> callbacks;
  {
    std::lock_guard lock(mu_);
    Collect(job, &callbacks);
  }
  // Outside the lock: a callback may Remove itself.
  for (const auto& cb : callbacks) (*cb)(job);
}

}  // namespace drover::server
