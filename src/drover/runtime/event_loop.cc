#include "drover/runtime/event_loop.h"

#include <future>

#include <pthread.h>

namespace drover::runtime {

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Start() {
  started_.store(true);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    thread_id_.store(std::this_thread::get_id());
    Run();
  });
}

void EventLoop::Stop() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable() && !InLoopThread()) thread_.join();
    return;
  }
  {
    MutexLock lock(&post_mu_);
    queue_.enqueue(producer_, Task{});  // wakes the loop
  }
  if (thread_.joinable() && !InLoopThread()) thread_.join();
}

bool EventLoop::Post(Task task) {
  if (stopping_.load(std::memory_order_relaxed)) return false;
  MutexLock lock(&post_mu_);
  queue_.enqueue(producer_, std::move(task));
  return true;
}

void EventLoop::PostAfter(std::chrono::steady_clock::duration delay, Task task) {
  auto due = std::chrono::steady_clock::now() + delay;
  Post([this, due, t = std::move(task)]() mutable { timers_.push(Timer{due, timer_seq_++, std::move(t)}); });
}

void EventLoop::RunDueTimers() {
  auto now = std::chrono::steady_clock::now();
  while (!timers_.empty() && timers_.top().due <= now) {
    Task t = std::move(const_cast<Timer&>(timers_.top()).task);  // NOLINT: popped next line
    timers_.pop();
    t();
  }
}

void EventLoop::Run() {
  constexpr size_t kBatch = 1024;
  std::vector<Task> batch(kBatch);
  for (;;) {
    auto wait = std::chrono::microseconds(std::chrono::milliseconds(100));
    if (!timers_.empty()) {
      auto until = timers_.top().due - std::chrono::steady_clock::now();
      wait = std::max(std::chrono::microseconds(0),
                      std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(until)));
    }
    size_t n = queue_.wait_dequeue_bulk_timed(batch.begin(), kBatch, wait.count());
    bool ran = n > 0;
    for (size_t i = 0; i < n; ++i) {
      if (batch[i]) batch[i]();
      batch[i] = nullptr;
    }
    if (!timers_.empty() && timers_.top().due <= std::chrono::steady_clock::now()) {
      RunDueTimers();
      ran = true;
    }
    if (ran && batch_hook_) batch_hook_();
    if (stopping_.load() && queue_.size_approx() == 0) break;
  }
}

LoopClient::LoopClient(EventLoop* loop) : loop_(loop), open_(std::make_shared<std::atomic<bool>>(true)) {}

LoopClient::~LoopClient() { Close(); }

bool LoopClient::Post(EventLoop::Task task) {
  if (!open_->load()) return false;
  return loop_->Post([open = open_, t = std::move(task)] {
    if (open->load()) t();
  });
}

void LoopClient::PostAfter(std::chrono::steady_clock::duration delay, EventLoop::Task task) {
  if (!open_->load()) return;
  loop_->PostAfter(delay, [open = open_, t = std::move(task)] {
    if (open->load()) t();
  });
}

void LoopClient::Close() {
  if (!open_->load()) return;
  if (loop_->InLoopThread() || !loop_->started()) {
    open_->store(false);  // no task of ours runs after this one (or runs at all: not started)
    return;
  }
  // Flipped on the loop thread, between two tasks: none of ours is halfway.
  auto flipped = std::make_shared<std::promise<void>>();
  std::future<void> done = flipped->get_future();
  if (!loop_->Post([open = open_, flipped] {
        open->store(false);
        flipped->set_value();
      })) {
    open_->store(false);  // the loop stopped: it runs nothing any more
    return;
  }
  done.wait();
}

}  // namespace drover::runtime
