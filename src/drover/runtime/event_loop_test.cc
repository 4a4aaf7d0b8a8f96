#include "drover/runtime/event_loop.h"

#include <gtest/gtest.h>

#include <future>
#include <vector>

namespace drover::runtime {
namespace {

TEST(EventLoopTest, RunsTasksInPostOrderOnOneThread) {
  EventLoop loop("test");
  loop.Start();
  std::vector<int> seen;  // touched only on the loop thread
  std::promise<void> done;
  std::thread::id loop_thread;
  for (int i = 0; i < 1000; ++i) {
    loop.Post([&, i] {
      if (i == 0) loop_thread = std::this_thread::get_id();
      EXPECT_EQ(std::this_thread::get_id(), loop_thread);
      EXPECT_TRUE(loop.InLoopThread());
      seen.push_back(i);
      if (i == 999) done.set_value();
    });
  }
  done.get_future().wait();
  loop.Stop();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST(EventLoopTest, BatchHookRunsAfterBatches) {
  EventLoop loop("test");
  int tasks = 0;
  int hooks = 0;
  std::promise<void> done;
  loop.SetBatchHook([&] {
    ++hooks;
    if (tasks == 50 && hooks > 0) {
      static bool once = false;
      if (!once) {
        once = true;
        done.set_value();
      }
    }
  });
  for (int i = 0; i < 50; ++i) loop.Post([&] { ++tasks; });
  loop.Start();
  done.get_future().wait();
  loop.Stop();
  EXPECT_EQ(tasks, 50);
  EXPECT_GE(hooks, 1);
  EXPECT_LE(hooks, 50);  // batched: never more hooks than tasks
}

TEST(EventLoopTest, TimersFireInDueOrder) {
  EventLoop loop("test");
  loop.Start();
  std::vector<int> order;
  std::promise<void> done;
  loop.PostAfter(std::chrono::milliseconds(30), [&] {
    order.push_back(2);
    done.set_value();
  });
  loop.PostAfter(std::chrono::milliseconds(1), [&] { order.push_back(1); });
  done.get_future().wait();
  loop.Stop();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(EventLoopTest, StopRunsAlreadyPostedTasks) {
  EventLoop loop("test");
  int n = 0;
  loop.Start();
  for (int i = 0; i < 100; ++i) loop.Post([&] { ++n; });
  loop.Stop();
  EXPECT_EQ(n, 100);
  loop.Post([&] { ++n; });  // dropped after Stop
  EXPECT_EQ(n, 100);
}

}  // namespace
}  // namespace drover::runtime
