#pragma once
// Telemetry: samples every GPU of the node at a fixed period (1 s down to
// 10 ms) on its own thread, keeps the recent samples of each GPU in a ring
// buffer, runs the health checks (health.h) and summarises what it saw for
// the agent's heartbeats and /metrics.
//
// Owns the device backends once the agent discovered them: every backend
// call happens on the telemetry thread (the backends are not thread-safe).
// Other threads read snapshots (a leaf mutex guards them) and post load
// changes and fault injections to the thread.
//
// Not copyable. Thread-safe: every public method.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/health.h"
#include "drover/common/mutex.h"
#include "drover/runtime/event_loop.h"

namespace drover::agent {

struct TelemetryOptions {
  std::string node_name;  // for the log
  std::chrono::nanoseconds period = std::chrono::seconds(1);
  std::chrono::nanoseconds health_interval = std::chrono::seconds(1);
  HealthOptions health;
  // Samples kept per GPU; 0 keeps one minute's worth (at most 6,000).
  size_t history = 0;
};
// kInvalidArgument unless 10 ms <= period <= 1 s, period <= health_interval
// <= 1 min and clean_checks in 1..1000.
Status ValidateTelemetryOptions(const TelemetryOptions& options);

// Where node GPU i lives: which backend, and its index there.
struct DeviceSlot {
  DeviceBackend* backend = nullptr;
  int index = 0;
};

// What the agent reports of one GPU.
struct GpuReading {
  bool healthy = true;
  std::string reason;  // why not, with the recovery progress
  bool have_sample = false;
  GpuSample latest;            // time_ns is CLOCK_MONOTONIC
  int64_t latest_wall_ns = 0;  // the same moment on the wall clock
  int64_t xid_errors = 0;
  int64_t last_xid = 0;
  // Since the previous TakeReadings(summarise = true).
  int samples = 0;
  double utilization_avg = NAN, utilization_max = NAN, temperature_max = NAN, power_avg = NAN;
};

class Telemetry {
 public:
  // `backends` are owned; `slots[i]` names node GPU i. `on_health_change`
  // runs on the telemetry thread when any GPU's health or reason changes.
  // `loop`: the thread to sample on, shared with others (simulated nodes);
  // null: a thread of its own.
  Telemetry(std::vector<std::unique_ptr<DeviceBackend>> backends, std::vector<DeviceSlot> slots,
            TelemetryOptions options, std::function<void()> on_health_change, runtime::EventLoop* loop = nullptr);
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  void Start();
  void Stop();

  size_t gpu_count() const { return slots_.size(); }
  // Every GPU's reading; with `summarise`, the summaries restart.
  std::vector<GpuReading> TakeReadings(bool summarise);
  // Up to `max` most recent samples of `gpu`, oldest first.
  std::vector<GpuSample> History(int gpu, size_t max) const;
  // How busy the work placed on `gpu` is (0..1), for backends that model it.
  void SetLoad(int gpu, double load);
  // Runs the injection on the telemetry thread and waits for its answer
  // (at once when called on that thread).
  Status InjectFault(int gpu, const Fault& fault);

 private:
  struct PerGpu {
    std::vector<GpuSample> ring;  // capacity history_, circular
    size_t next = 0;
    size_t size = 0;
    GpuReading reading;
    double util_sum = 0, power_sum = 0;
    int util_n = 0, power_n = 0;
    std::vector<HealthEvent> pending_events;  // since the last health check (telemetry thread)
    bool answered = true;
    std::string sample_error;
  };

  void Tick();
  void SampleAll(int64_t now_ns);
  void CheckHealth(int64_t now_ns);

  std::vector<std::unique_ptr<DeviceBackend>> backends_;
  const std::vector<DeviceSlot> slots_;
  const TelemetryOptions options_;
  const size_t history_;
  std::function<void()> on_health_change_;
  HealthTracker health_;  // telemetry thread only
  std::chrono::steady_clock::time_point next_tick_;
  std::chrono::steady_clock::time_point next_check_;
  std::unique_ptr<runtime::EventLoop> own_loop_;  // when not given one
  runtime::LoopClient tasks_;

  mutable Mutex mu_;
  std::vector<PerGpu> gpus_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::agent
