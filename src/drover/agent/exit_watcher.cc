#include "drover/agent/exit_watcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace drover::agent {
namespace {

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

class EpollExitWatcher final : public ExitWatcher {
 public:
  EpollExitWatcher(int epoll, int wake) : epoll_(epoll), wake_(wake) {
    thread_ = std::thread([this] { Run(); });
  }
  ~EpollExitWatcher() override {
    stopping_ = true;
    uint64_t one = 1;
    (void)::write(wake_, &one, sizeof(one));
    thread_.join();
    for (auto& [handle, w] : watches_) ::close(w.fd);
    ::close(wake_);
    ::close(epoll_);
  }

  Result<uint64_t> Watch(pid_t pid, std::function<void()> on_exit) override {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0 && errno == ENOSYS) return Unimplemented("this kernel has no pidfd_open (Linux 5.3 or newer)");
    std::lock_guard lock(mu_);
    uint64_t handle = next_++;
    if (fd < 0) {
      // ESRCH: it is gone already (reaped). Report it from the thread, as
      // every other end is.
      gone_.emplace(handle, std::move(on_exit));
      uint64_t one = 1;
      (void)::write(wake_, &one, sizeof(one));
      return handle;
    }
    return AddLocked(handle, fd, std::move(on_exit));
  }

  Result<uint64_t> WatchReadable(int fd, std::function<void()> on_ready) override {
    // A copy: the watcher closes its own when it fires or is cancelled.
    int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0) return Internal(fmt::format("dup: {}", std::strerror(errno)));
    std::lock_guard lock(mu_);
    return AddLocked(next_++, own, std::move(on_ready));
  }

  void Cancel(uint64_t handle) override {
    // Taken first: a callback of this handle that is running ends before
    // Cancel returns.
    std::lock_guard calling(calling_);
    std::lock_guard lock(mu_);
    gone_.erase(handle);
    auto it = watches_.find(handle);
    if (it == watches_.end()) return;
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    ::close(it->second.fd);
    watches_.erase(it);
  }

 private:
  struct Entry {
    int fd;
    std::function<void()> on_exit;
  };

  // Takes `fd`: watched until it is readable (or hung up), then closed.
  Result<uint64_t> AddLocked(uint64_t handle, int fd, std::function<void()> fn) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = handle;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      int err = errno;
      ::close(fd);
      return Internal(fmt::format("epoll_ctl: {}", std::strerror(err)));
    }
    watches_.emplace(handle, Entry{fd, std::move(fn)});
    return handle;
  }

  void Run() {
    epoll_event events[64];
    for (;;) {
      int n = ::epoll_wait(epoll_, events, 64, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      bool stop = false;
      for (int i = 0; i < n; ++i) {
        uint64_t handle = events[i].data.u64;
        if (handle == 0) {
          uint64_t count = 0;
          (void)::read(wake_, &count, sizeof(count));
          Drain();
          stop = stopping_;
          continue;
        }
        std::lock_guard calling(calling_);
        std::function<void()> fn;
        {
          std::lock_guard lock(mu_);
          auto it = watches_.find(handle);
          if (it == watches_.end()) continue;  // cancelled meanwhile
          ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd, nullptr);
          ::close(it->second.fd);
          fn = std::move(it->second.on_exit);
          watches_.erase(it);
        }
        fn();
      }
      if (stop) return;
    }
  }

  // Runs the callbacks of processes that were gone when watched.
  void Drain() {
    std::lock_guard calling(calling_);
    std::map<uint64_t, std::function<void()>> gone;
    {
      std::lock_guard lock(mu_);
      gone.swap(gone_);
    }
    for (auto& [handle, fn] : gone) fn();
  }

  const int epoll_;
  const int wake_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex calling_;  // held while a callback runs
  std::mutex mu_;
  uint64_t next_ = 1;  // 0 is the wake-up fd's
  std::map<uint64_t, Entry> watches_;
  std::map<uint64_t, std::function<void()>> gone_;
};

}  // namespace

Result<std::unique_ptr<ExitWatcher>> ExitWatcher::Start() {
  int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll < 0) return Internal(fmt::format("epoll_create1: {}", std::strerror(errno)));
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    int err = errno;
    ::close(epoll);
    return Internal(fmt::format("eventfd: {}", std::strerror(err)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &ev) != 0) {
    int err = errno;
    ::close(wake);
    ::close(epoll);
    return Internal(fmt::format("epoll_ctl: {}", std::strerror(err)));
  }
  return std::unique_ptr<ExitWatcher>(new EpollExitWatcher(epoll, wake));
}

}  // namespace drover::agent
