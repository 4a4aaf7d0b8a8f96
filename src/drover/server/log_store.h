#pragma once
// LogStore: the output of every job, as one file per job under
// <data-dir>/logs/. Agents ship byte ranges (offset, data) up their session;
// a write at an offset is idempotent, so an agent that reconnects may send a
// range again. Readers read ranges.
//
// Thread-safety: all methods may be called from any thread; writes for one
// job come from the one session of its node.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "drover/common/status.h"

namespace drover::server {

class LogStore {
 public:
  // Creates `dir` if missing.
  static Result<LogStore> Open(const std::string& dir);

  // One log per attempt of a job and per replica of a gang: the first
  // attempt's is named by the job id, later ones "j-000007@2"; replica 1's
  // "j-000007.1", "j-000007.1@2" (LogId). A new attempt's output starts
  // from 0.
  static std::string LogId(const std::string& job_id, int attempt, int replica = 0);

  Status Write(const std::string& log_id, int64_t offset, const std::string& data);
  // Up to `max_bytes` (at most kMaxLogReadBytes) from `offset`; empty at end
  // of file or when the job has written nothing yet.
  Result<std::string> Read(const std::string& log_id, int64_t offset, int64_t max_bytes) const;

  // Calls `on_write` after each write to any log of `job_id` (any attempt
  // or replica),
  // on the writer's thread: it must not block. For followers (`logs -f`),
  // so that nobody polls.
  uint64_t Watch(const std::string& job_id, std::function<void()> on_write);
  void Unwatch(uint64_t id);

 private:
  struct Watchers {
    std::mutex mu;
    uint64_t next = 1;
    std::multimap<std::string, std::pair<uint64_t, std::shared_ptr<const std::function<void()>>>> by_job;
  };
  explicit LogStore(std::string dir) : dir_(std::move(dir)), watchers_(std::make_shared<Watchers>()) {}
  Result<std::string> PathFor(const std::string& log_id) const;
  void Notify(const std::string& log_id);

  std::string dir_;
  std::shared_ptr<Watchers> watchers_;  // shared: a LogStore moves
};

// The most one job may log; later bytes are dropped.
inline constexpr int64_t kMaxJobLogBytes = int64_t{1} << 30;
// The most one Read returns.
inline constexpr int64_t kMaxLogReadBytes = int64_t{4} << 20;

}  // namespace drover::server
