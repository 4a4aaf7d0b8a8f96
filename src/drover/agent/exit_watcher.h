#pragma once
// ExitWatcher: says at once when a watched process ends (or a watched
// descriptor becomes readable), so the agent
// reports a job's end the moment its supervisor has recorded it instead of
// at its next look (pidfd_open(2), Linux 5.3 or newer, on one epoll
// thread for any number of processes; nothing polls).
//
// Thread-safety: thread-safe. Callbacks run on the watcher's thread, one
// at a time, and must not block or call back into the watcher (they post
// to their owner's loop). After Cancel(handle) returns, its callback is not
// running and never will.

#include <sys/types.h>

#include <functional>
#include <memory>

#include "drover/common/status.h"

namespace drover::agent {

class ExitWatcher {
 public:
  static Result<std::unique_ptr<ExitWatcher>> Start();
  virtual ~ExitWatcher() = default;

  // Calls `on_exit` once when `pid` has ended: soon after, on the watcher's
  // thread, when it already has. kUnimplemented where the kernel has no
  // pidfd (the caller then notices ends by looking).
  virtual Result<uint64_t> Watch(pid_t pid, std::function<void()> on_exit) = 0;
  // Calls `on_ready` once when `fd` has something to read or its peer hung
  // up (a pooled supervisor's socket, supervisor.h). The caller keeps `fd`
  // open until then or until Cancel; the watcher watches a copy.
  virtual Result<uint64_t> WatchReadable(int fd, std::function<void()> on_ready) = 0;
  virtual void Cancel(uint64_t handle) = 0;
};

}  // namespace drover::agent
