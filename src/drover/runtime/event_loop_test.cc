#include "drover/runtime/event_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
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

// Posts from different threads, one after another (as a gRPC stream's
// reactions run on whichever thread is free), run in the order posted.
TEST(EventLoopTest, PostsFromThreadsTakingTurnsRunInTheirOrder) {
  EventLoop loop("order");
  std::vector<int> seen;  // loop thread only
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;  // under mu (a local: the analysis cannot check it): the next number to post
  constexpr int kPosts = 4000;
  auto poster = [&](int parity) {
    for (;;) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return turn >= kPosts || turn % 2 == parity; });
      if (turn >= kPosts) return;
      int n = turn++;
      loop.Post([&seen, n] { seen.push_back(n); });
      cv.notify_all();
    }
  };
  std::thread even(poster, 0), odd(poster, 1);
  even.join();
  odd.join();
  std::promise<void> done;
  loop.Post([&] { done.set_value(); });
  loop.Start();  // everything is queued: one batch, as a busy loop would take it
  done.get_future().wait();
  loop.Stop();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kPosts));
  for (int i = 0; i < kPosts; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i) << "reordered at " << i;
}

// Two clients share one loop; one closes while its timer is pending and
// tasks of it are queued: none of them runs afterwards, the other's do.
TEST(LoopClientTest, ClosedClientRunsNothingWhileItsNeighbourRunsOn) {
  EventLoop loop("shared");
  loop.Start();
  std::atomic<int> closed_runs{0};
  std::promise<void> neighbour_ran;
  {
    LoopClient doomed(&loop);
    LoopClient neighbour(&loop);
    doomed.PostAfter(std::chrono::milliseconds(20), [&] { ++closed_runs; });
    std::promise<void> gate;
    std::shared_future<void> open = gate.get_future().share();
    neighbour.Post([open] { open.wait(); });  // holds the loop while `doomed` queues up
    for (int i = 0; i < 100; ++i) doomed.Post([&] { ++closed_runs; });
    std::thread closer([&] { doomed.Close(); });  // waits for the loop: queued behind the gate
    gate.set_value();
    closer.join();
    EXPECT_FALSE(doomed.Post([&] { ++closed_runs; }));
    // Queued before Close: they ran, in order, before Close returned.
    EXPECT_EQ(closed_runs.load(), 100);
    neighbour.PostAfter(std::chrono::milliseconds(40), [&] { neighbour_ran.set_value(); });
    neighbour_ran.get_future().wait();  // after the closed client's timer was due
    EXPECT_EQ(closed_runs.load(), 100);
    neighbour.Close();
  }
  loop.Stop();
}

TEST(LoopClientTest, CloseOnItsOwnLoopThreadDoesNotWait) {
  EventLoop loop("self");
  loop.Start();
  LoopClient client(&loop);
  std::promise<bool> answered;
  client.Post([&] {
    client.Close();
    answered.set_value(client.Post([] {}));
  });
  EXPECT_FALSE(answered.get_future().get());
  loop.Stop();
}

// An owner whose start failed before its loop started closes without waiting.
TEST(LoopClientTest, CloseOnALoopNeverStartedReturns) {
  EventLoop loop("idle");
  LoopClient client(&loop);
  EXPECT_TRUE(client.Post([] {}));
  client.Close();
  EXPECT_FALSE(client.Post([] {}));
}

TEST(LoopClientTest, CloseAfterTheLoopStoppedReturns) {
  EventLoop loop("stopped");
  loop.Start();
  LoopClient client(&loop);
  loop.Stop();
  client.Close();
  EXPECT_FALSE(client.Post([] {}));
}

}  // namespace
}  // namespace drover::runtime
