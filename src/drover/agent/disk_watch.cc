#include "drover/agent/disk_watch.h"

#include <utility>
#include <vector>

#include "drover/common/files.h"

namespace drover::agent {

DiskWatch::DiskWatch(std::chrono::milliseconds every, Over over) : every_(every), over_(std::move(over)) {
  thread_ = std::thread([this] { Run(); });
}

DiskWatch::~DiskWatch() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  thread_.join();
}

void DiskWatch::Add(const std::string& key, const std::string& dir, int64_t limit) {
  MutexLock lock(&mu_);
  layers_[key] = Layer{dir, limit};
}

void DiskWatch::Remove(const std::string& key) {
  MutexLock lock(&mu_);
  layers_.erase(key);
}

void DiskWatch::Run() {
  for (;;) {
    std::vector<std::pair<std::string, Layer>> round;
    {
      MutexLock lock(&mu_);
      const auto until = std::chrono::steady_clock::now() + every_;
      while (!stopping_ && std::chrono::steady_clock::now() < until) wake_.WaitUntil(&mu_, until);
      if (stopping_) return;
      round.assign(layers_.begin(), layers_.end());
    }
    for (const auto& [key, layer] : round) {
      const int64_t bytes = TreeBytes(layer.dir);
      if (bytes <= layer.limit) continue;
      {
        MutexLock lock(&mu_);
        // Removed meanwhile (the job ended): not this layer's business now.
        auto it = layers_.find(key);
        if (it == layers_.end() || it->second.dir != layer.dir) continue;
      }
      over_(key, bytes, layer.limit);
    }
  }
}

}  // namespace drover::agent
