#pragma once
// EventLoop: one owner thread that runs posted tasks in the order they were
// posted. State owned by a loop is touched only from its thread, so it needs
// no locks; other threads Post() work to it through a lock-free MPSC queue.
//
// Tasks are drained in batches; after each batch the loop runs its batch hook
// (the server's control loop schedules and group-commits there, once per
// batch rather than once per command). Timers run on the loop thread too.
//
// Order: tasks run in the order their Post() calls happened, across
// threads too (a gRPC stream's reactions post from whichever of gRPC's
// threads runs them, one after another, and their messages must not be
// reordered). The queue alone orders tasks per producer thread only, so
// producers take a short lock around the enqueue and all enqueue through
// one producer token; the loop dequeues without a lock.
//
// Thread-safety: Post, PostAfter and Stop may be called from any thread.

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "drover/common/mutex.h"

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
  bool started() const { return started_.load(); }

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
  Mutex post_mu_;
  moodycamel::ProducerToken producer_ DROVER_GUARDED_BY(post_mu_){queue_};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  std::atomic<std::thread::id> thread_id_{};
  std::thread thread_;
  Task batch_hook_;
  // Owned by the loop thread.
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_seq_ = 0;
};

// One object's tasks on an EventLoop it may share with others (the
// simulated nodes of `drover up` share a few loops): its tasks and timers
// run only until Close(), so an object that goes away while the loop runs
// on leaves nothing of it to run later.
//
//   runtime::LoopClient tasks(shared_loop);   // a member, beside what the tasks touch
//   tasks.PostAfter(100ms, [this] { Tick(); });
//   ...
//   tasks.Close();                            // in the owner's Stop(), before members go
//
// Thread-safety: Post and PostAfter from any thread; Close from any thread
// but the loop's own (where it would wait for itself).
class LoopClient {
 public:
  explicit LoopClient(EventLoop* loop);
  ~LoopClient();  // Close()s
  LoopClient(const LoopClient&) = delete;
  LoopClient& operator=(const LoopClient&) = delete;

  // False (and the task is dropped) once closed or the loop stopped.
  bool Post(EventLoop::Task task);
  void PostAfter(std::chrono::steady_clock::duration delay, EventLoop::Task task);
  bool InLoopThread() const { return loop_->InLoopThread(); }
  // After it returns no task of this client runs, or is running, on the
  // loop. Idempotent.
  void Close();

 private:
  EventLoop* const loop_;
  std::shared_ptr<std::atomic<bool>> open_;
};

}  // namespace drover::runtime
