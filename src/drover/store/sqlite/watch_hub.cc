#include "drover/store/sqlite/watch_hub.h"

#include <utility>

namespace drover::store {

class HubWatchHandle final : public WatchHandle {
 public:
  HubWatchHandle(std::shared_ptr<WatchHub> hub, uint64_t id) : hub_(std::move(hub)), id_(id) {}
  ~HubWatchHandle() override { hub_->Cancel(id_); }

 private:
  std::shared_ptr<WatchHub> hub_;
  uint64_t id_;
};

void WatchHub::Publish(Batch batch) {
  MutexLock lock(&mu_);
  if (watchers_.empty() || stopping_) return;
  queue_.push_back(std::move(batch));
  work_cv_.Signal();
}

std::unique_ptr<WatchHandle> WatchHub::Add(std::string prefix, int64_t live_from, std::vector<Batch> history,
                                           WatchCallback callback) {
  MutexLock lock(&mu_);
  auto watcher = std::make_shared<Watcher>();
  watcher->id = next_id_++;
  watcher->prefix = std::move(prefix);
  watcher->live_from = live_from;
  watcher->callback = std::move(callback);
  watchers_[watcher->id] = watcher;
  queue_.push_back(Start{watcher, std::move(history)});
  if (!thread_.joinable() && !stopping_) {
    thread_ = std::thread([this] { Run(); });
    dispatcher_id_ = thread_.get_id();
  }
  work_cv_.Signal();
  return std::make_unique<HubWatchHandle>(shared_from_this(), watcher->id);
}

void WatchHub::Stop() {
  std::thread thread;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    thread = std::move(thread_);
  }
  work_cv_.SignalAll();
  if (thread.joinable()) thread.join();
}

void WatchHub::Cancel(uint64_t id) {
  MutexLock lock(&mu_);
  if (auto it = watchers_.find(id); it != watchers_.end()) {
    it->second->cancelled = true;
    watchers_.erase(it);
  }
  if (std::this_thread::get_id() == dispatcher_id_) return;  // inside some other watcher's callback
  idle_cv_.Wait(&mu_, [&]() DROVER_REQUIRES(mu_) { return running_ != id; });
}

void WatchHub::Run() {
  MutexLock lock(&mu_);
  while (true) {
    work_cv_.Wait(&mu_, [&]() DROVER_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    auto item = std::move(queue_.front());
    queue_.pop_front();
    if (auto* start = std::get_if<Start>(&item)) {
      for (const Batch& batch : start->history) Deliver(*start->watcher, batch.events);
      start->watcher->active = true;
      continue;
    }
    const Batch& batch = std::get<Batch>(item);
    // A snapshot: Deliver unlocks, and watchers may come and go meanwhile.
    std::vector<std::shared_ptr<Watcher>> targets;
    for (const auto& [id, watcher] : watchers_) {
      if (watcher->active && batch.revision >= watcher->live_from) targets.push_back(watcher);
    }
    for (const auto& watcher : targets) {
      if (watcher->prefix.empty()) {
        Deliver(*watcher, batch.events);
        continue;
      }
      std::vector<Event> mine;
      for (const Event& event : batch.events) {
        if (event.kv.key.starts_with(watcher->prefix)) mine.push_back(event);
      }
      Deliver(*watcher, mine);
    }
  }
}

void WatchHub::Deliver(Watcher& watcher, const std::vector<Event>& events) {
  if (watcher.cancelled || stopping_ || events.empty()) return;
  running_ = watcher.id;
  mu_.Unlock();
  watcher.callback(events);
  mu_.Lock();
  running_ = 0;
  idle_cv_.SignalAll();
}

}  // namespace drover::store
