#include "drover/agent/exit_watcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

extern char** environ;

namespace drover::agent {
namespace {

pid_t SpawnSleep() {
  pid_t pid = 0;
  char arg0[] = "sleep";
  char arg1[] = "600";
  char* argv[] = {arg0, arg1, nullptr};
  EXPECT_EQ(posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ), 0);
  return pid;
}

// Counts callbacks; waits for them without sleeping.
struct Calls {
  std::mutex mu;
  std::condition_variable cv;
  int n = 0;
  std::function<void()> Callback() {
    return [this] {
      std::lock_guard lock(mu);
      ++n;
      cv.notify_all();
    };
  }
  bool WaitFor(int want) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return n >= want; });
  }
};

TEST(ExitWatcherTest, SaysWhenAProcessEnds) {
  auto watcher = ExitWatcher::Start();
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  pid_t pid = SpawnSleep();
  Calls calls;
  auto handle = (*watcher)->Watch(pid, calls.Callback());
  if (!handle.ok() && handle.status().code() == Code::kUnimplemented) GTEST_SKIP() << handle.status().message();
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  {
    std::lock_guard lock(calls.mu);
    EXPECT_EQ(calls.n, 0);  // still running
  }
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(calls.WaitFor(1));
  ::waitpid(pid, nullptr, 0);
}

TEST(ExitWatcherTest, AProcessAlreadyGoneIsReportedToo) {
  auto watcher = ExitWatcher::Start();
  ASSERT_TRUE(watcher.ok());
  pid_t pid = SpawnSleep();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);  // reaped: the pid names nobody
  Calls calls;
  auto handle = (*watcher)->Watch(pid, calls.Callback());
  if (!handle.ok() && handle.status().code() == Code::kUnimplemented) GTEST_SKIP() << handle.status().message();
  ASSERT_TRUE(handle.ok());
  EXPECT_TRUE(calls.WaitFor(1));
}

TEST(ExitWatcherTest, NoCallbackAfterCancel) {
  auto watcher = ExitWatcher::Start();
  ASSERT_TRUE(watcher.ok());
  pid_t cancelled = SpawnSleep();
  pid_t watched = SpawnSleep();
  Calls none, calls;
  auto h1 = (*watcher)->Watch(cancelled, none.Callback());
  if (!h1.ok() && h1.status().code() == Code::kUnimplemented) GTEST_SKIP() << h1.status().message();
  ASSERT_TRUE(h1.ok());
  ASSERT_TRUE((*watcher)->Watch(watched, calls.Callback()).ok());
  (*watcher)->Cancel(*h1);
  ::kill(cancelled, SIGKILL);
  ::waitpid(cancelled, nullptr, 0);
  // Another end reported after it gives a wrong callback every chance to
  // have come.
  ::kill(watched, SIGKILL);
  EXPECT_TRUE(calls.WaitFor(1));
  ::waitpid(watched, nullptr, 0);
  std::lock_guard lock(none.mu);
  EXPECT_EQ(none.n, 0);
}

// A descriptor is watched until it has something to read or its peer hangs
// up, once; the caller's descriptor stays open.
TEST(ExitWatcherTest, SaysWhenADescriptorIsReadable) {
  auto watcher = ExitWatcher::Start();
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Calls calls;
  ASSERT_TRUE((*watcher)->WatchReadable(fds[0], calls.Callback()).ok());
  ASSERT_EQ(::write(fds[1], "done\n", 5), 5);
  ASSERT_TRUE(calls.WaitFor(1));
  char buf[8];
  EXPECT_EQ(::read(fds[0], buf, sizeof buf), 5) << "still the caller's, unread";

  ASSERT_TRUE((*watcher)->WatchReadable(fds[0], calls.Callback()).ok());
  ::close(fds[1]);  // the peer ends
  ASSERT_TRUE(calls.WaitFor(2));
  EXPECT_EQ(::read(fds[0], buf, sizeof buf), 0);

  // Cancelled before anything came: never called.
  int other[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
  auto handle = (*watcher)->WatchReadable(other[0], calls.Callback());
  ASSERT_TRUE(handle.ok());
  (*watcher)->Cancel(*handle);
  ASSERT_EQ(::write(other[1], "x", 1), 1);
  ::close(fds[0]);
  ::close(other[0]);
  ::close(other[1]);
  watcher->reset();  // joins its thread: no callback runs later
  EXPECT_EQ(calls.n, 2);
}

}  // namespace
}  // namespace drover::agent
