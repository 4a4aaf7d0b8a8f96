#include "drover/agent/exit_watcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

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

}  // namespace
}  // namespace drover::agent
