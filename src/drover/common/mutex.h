#pragma once
// Mutex, SharedMutex, their scoped locks and CondVar: std::mutex and friends
// with Clang's thread-safety annotations, so that a Clang build checks what a
// `GUARDED_BY` comment used to only say (libstdc++'s std::mutex carries no
// annotations). Under g++ the macros expand to nothing and the classes are
// thin inline wrappers over the std types.
//
//   class Counter {
//    public:
//     void Add(int n) DROVER_EXCLUDES(mu_) {
//       MutexLock lock(&mu_);
//       total_ += n;
//       changed_.SignalAll();
//     }
//     void AwaitAtLeast(int n) DROVER_EXCLUDES(mu_) {
//       MutexLock lock(&mu_);
//       while (total_ < n) changed_.Wait(&mu_);
//     }
//    private:
//     Mutex mu_;
//     CondVar changed_;
//     int total_ DROVER_GUARDED_BY(mu_) = 0;
//   };
//
// The macros carry a DROVER_ prefix: gRPC's headers pull in Abseil's legacy
// absl/base/internal/thread_annotations.h, which defines GUARDED_BY and
// PT_GUARDED_BY itself. scripts/check-thread-safety.py runs the analysis
// (`clang++ -Wthread-safety -Werror`) over every file that uses them; it is
// the `thread_safety` test of `make test`. See docs/style.md.
//
// The analysis cannot see that a lambda runs under its caller's lock: a
// predicate passed to CondVar::Wait reads guarded members, so it says so
// with DROVER_REQUIRES(mu_) after its parameter list.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define DROVER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DROVER_THREAD_ANNOTATION(x)
#endif

// On a member or global: reading or writing it needs `x` held.
#define DROVER_GUARDED_BY(x) DROVER_THREAD_ANNOTATION(guarded_by(x))
// On a pointer: what it points to needs `x` held (the pointer itself does not).
#define DROVER_PT_GUARDED_BY(x) DROVER_THREAD_ANNOTATION(pt_guarded_by(x))
// On a function: the caller holds these (exclusively / at least shared).
#define DROVER_REQUIRES(...) DROVER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DROVER_REQUIRES_SHARED(...) DROVER_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: the caller must not hold these (the function takes them).
#define DROVER_EXCLUDES(...) DROVER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it takes / releases these (no argument: `this`).
#define DROVER_ACQUIRE(...) DROVER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DROVER_ACQUIRE_SHARED(...) DROVER_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define DROVER_RELEASE(...) DROVER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define DROVER_RELEASE_SHARED(...) DROVER_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define DROVER_RELEASE_GENERIC(...) DROVER_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define DROVER_TRY_ACQUIRE(...) DROVER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function that checks (or knows) at run time that the lock is held.
#define DROVER_ASSERT_CAPABILITY(x) DROVER_THREAD_ANNOTATION(assert_capability(x))
// On a function returning a reference to the mutex that guards something.
#define DROVER_RETURN_CAPABILITY(x) DROVER_THREAD_ANNOTATION(lock_returned(x))
// Lock ordering.
#define DROVER_ACQUIRED_BEFORE(...) DROVER_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define DROVER_ACQUIRED_AFTER(...) DROVER_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// On a class: it is a lock / a scoped holder of one.
#define DROVER_CAPABILITY(x) DROVER_THREAD_ANNOTATION(capability(x))
#define DROVER_SCOPED_CAPABILITY DROVER_THREAD_ANNOTATION(scoped_lockable)
// Turns the analysis off for one function. Say why beside it.
#define DROVER_NO_THREAD_SAFETY_ANALYSIS DROVER_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace drover {

class CondVar;

// A std::mutex the analysis knows. Not recursive.
class DROVER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() DROVER_ACQUIRE() { mu_.lock(); }
  void Unlock() DROVER_RELEASE() { mu_.unlock(); }
  bool TryLock() DROVER_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (no run-time check).
  void AssertHeld() const DROVER_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// A std::shared_mutex the analysis knows: many readers or one writer.
class DROVER_CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() DROVER_ACQUIRE() { mu_.lock(); }
  void Unlock() DROVER_RELEASE() { mu_.unlock(); }
  void ReaderLock() DROVER_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void ReaderUnlock() DROVER_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a Mutex for its scope, like std::unique_lock: Unlock() and Lock()
// let go of it and take it again inside the scope (the destructor unlocks
// only when held).
class DROVER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) DROVER_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() DROVER_RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() DROVER_RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() DROVER_ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// Holds a SharedMutex exclusively for its scope.
class DROVER_SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) DROVER_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterMutexLock() DROVER_RELEASE() { mu_->Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// Holds a SharedMutex shared for its scope.
class DROVER_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) DROVER_ACQUIRE_SHARED(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() DROVER_RELEASE() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// A std::condition_variable that waits on a drover::Mutex the caller holds.
// The predicate forms behave like std::condition_variable's (spurious
// wake-ups are absorbed; the timed ones return the predicate's last value).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

  // Releases `mu` while it sleeps and holds it again when it returns.
  void Wait(Mutex* mu) DROVER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False when `timeout` passed (a wake-up may still be spurious).
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) DROVER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    std::cv_status s = cv_.wait_for(lock, timeout);
    lock.release();
    return s == std::cv_status::no_timeout;
  }
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline) DROVER_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    std::cv_status s = cv_.wait_until(lock, deadline);
    lock.release();
    return s == std::cv_status::no_timeout;
  }

  // The predicate runs with `mu` held; annotate it DROVER_REQUIRES(mu).
  // (The analysis cannot tie the lambda's capability to `mu`, hence off here.)
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate ready) DROVER_REQUIRES(mu) DROVER_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, std::move(ready));
    lock.release();
  }
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Predicate ready)
      DROVER_REQUIRES(mu) DROVER_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool ok = cv_.wait_for(lock, timeout, std::move(ready));
    lock.release();
    return ok;
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline, Predicate ready)
      DROVER_REQUIRES(mu) DROVER_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool ok = cv_.wait_until(lock, deadline, std::move(ready));
    lock.release();
    return ok;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace drover
