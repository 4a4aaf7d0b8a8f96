#pragma once
// DiskWatch: how much each container's writable layer holds, as kubelet
// measures a pod's ephemeral storage (a walk of the layer's files every
// interval, docs/containers.md). It walks on a thread of its own, never the
// agent's loop: a layer of a million files takes seconds.
//
// Thread-safety: Add and Remove may be called from any thread; `over` is
// called on the watch's thread, at every look that finds a layer holding
// more than its limit, until the layer is removed.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "drover/common/mutex.h"

namespace drover::agent {

class DiskWatch {
 public:
  using Over = std::function<void(const std::string& key, int64_t bytes, int64_t limit)>;
  DiskWatch(std::chrono::milliseconds every, Over over);
  ~DiskWatch();
  DiskWatch(const DiskWatch&) = delete;
  DiskWatch& operator=(const DiskWatch&) = delete;

  // Watches `dir` as `key`'s layer, at most `limit` bytes (> 0).
  void Add(const std::string& key, const std::string& dir, int64_t limit);
  void Remove(const std::string& key);

 private:
  struct Layer {
    std::string dir;
    int64_t limit = 0;
  };
  void Run();

  const std::chrono::milliseconds every_;
  const Over over_;
  Mutex mu_;
  std::map<std::string, Layer> layers_ DROVER_GUARDED_BY(mu_);
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  CondVar wake_;
  std::thread thread_;
};

}  // namespace drover::agent
