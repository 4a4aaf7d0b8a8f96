#pragma once
// EventLoop: one owner thread that runs posted tasks in the order they were
// posted. State owned by a loop is touched only from its thread, so it needs
// no locks; other threads Post() work to it through a lock-free MPSC queue.
//
// Tasks are drained in batches; after each batch the loop runs its batch hook
// (the server's control loop schedules and group-commits there, once per
// batch rather than once per command). Timers run on the loop thread too.
//
// Thread-safety: Post, PostAfter and Stop may be called from any thread.

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

namespace drover::runtime {

class EventLoop {
 public:
  using Task = std::function<void()>;

  explicit EventLoop(std::string name);
  ~EventLoop();  // Stop()s
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Set before Start(). Runs on the loop thread after every non-empty batch
  // of tasks and after timers fire.
  void SetBatchHook(Task hook) { batch_hook_ = std::move(hook); }

  void Start();
  // Runs the tasks already posted, then joins the thread. Tasks posted after
  // Stop() are dropped.
  void Stop();

  // False (and the task is dropped) once Stop() was called.
  bool Post(Task task);
  // Runs `task` on the loop thread no earlier than `delay` from now.
  void PostAfter(std::chrono::steady_clock::duration delay, Task task);

  bool InLoopThread() const { return std::this_thread::get_id() == thread_id_.load(); }

 private:
  struct Timer {
    std::chrono::steady_clock::time_point due;
    uint64_t seq;
    Task task;
    bool operator>(const Timer& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };

  void Run();
  void RunDueTimers();

  std::string name_;
  moodycamel::BlockingConcurrentQueue<Task> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::thread::id> thread_id_{};
  std::thread thread_;
  Task batch_hook_;
  // Owned by the loop thread.
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_seq_ = 0;
};

}  // namespace drover::runtime
