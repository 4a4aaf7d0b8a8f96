#pragma once
// Time is injected: code that needs "now" takes a Clock. Tests use ManualClock
// and advance it instead of sleeping.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace drover {

using Duration = std::chrono::nanoseconds;
// Wall-clock time as nanoseconds since the Unix epoch (what we persist).
using Timestamp = std::chrono::time_point<std::chrono::system_clock, std::chrono::nanoseconds>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Timestamp Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  Timestamp Now() const override { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }
  static SystemClock* Get();
};

// The monotonic clock (steady_clock) dressed as a Clock, for measuring
// intervals (leases, timeouts): its Now() is not a wall-clock time and is
// never persisted. The same for every process of one boot (CLOCK_MONOTONIC).
class SteadyClock final : public Clock {
 public:
  Timestamp Now() const override {
    return Timestamp(std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now().time_since_epoch()));
  }
  static SteadyClock* Get();
};

// A clock that moves only when told. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Timestamp start = Timestamp(std::chrono::seconds(1'700'000'000)))
      : now_(start.time_since_epoch().count()) {}
  Timestamp Now() const override { return Timestamp(Duration(now_.load())); }
  void Advance(Duration d) { now_.fetch_add(d.count()); }
  void Set(Timestamp t) { now_.store(t.time_since_epoch().count()); }

 private:
  std::atomic<int64_t> now_;
};

inline int64_t ToUnixNanos(Timestamp t) { return t.time_since_epoch().count(); }
inline Timestamp FromUnixNanos(int64_t ns) { return Timestamp(Duration(ns)); }

}  // namespace drover
