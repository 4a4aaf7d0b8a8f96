#include "drover/agent/telemetry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>

namespace drover::agent {
namespace {

using std::chrono::steady_clock;

int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(steady_clock::now().time_since_epoch()).count();
}
int64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

size_t HistoryFor(const TelemetryOptions& o) {
  if (o.history > 0) return o.history;
  auto per_minute = static_cast<size_t>(std::chrono::minutes(1) / std::max(o.period, std::chrono::nanoseconds(1)));
  return std::clamp<size_t>(per_minute, 1, 6000);
}

}  // namespace

Status ValidateTelemetryOptions(const TelemetryOptions& o) {
  using std::chrono::milliseconds;
  if (o.period < milliseconds(10) || o.period > std::chrono::seconds(1)) {
    return InvalidArgument(fmt::format("telemetry period {}ms is outside 10ms..1s",
                                       std::chrono::duration_cast<milliseconds>(o.period).count()));
  }
  if (o.health_interval < o.period || o.health_interval > std::chrono::minutes(1)) {
    return InvalidArgument(fmt::format("health check interval {}ms is outside the sampling period..1min",
                                       std::chrono::duration_cast<milliseconds>(o.health_interval).count()));
  }
  if (o.health.clean_checks < 1 || o.health.clean_checks > 1000) {
    return InvalidArgument(fmt::format("health clean checks {} is outside 1..1000", o.health.clean_checks));
  }
  if (o.health.thermal_throttle_ns < 0) return InvalidArgument("thermal throttle time must not be negative");
  return Status::Ok();
}

Telemetry::Telemetry(std::vector<std::unique_ptr<DeviceBackend>> backends, std::vector<DeviceSlot> slots,
                     TelemetryOptions options, std::function<void()> on_health_change, runtime::EventLoop* loop)
    : backends_(std::move(backends)),
      slots_(std::move(slots)),
      options_(options),
      history_(HistoryFor(options)),
      on_health_change_(std::move(on_health_change)),
      health_(static_cast<int>(slots_.size()), options.health),
      own_loop_(loop == nullptr ? std::make_unique<runtime::EventLoop>("telemetry") : nullptr),
      tasks_(loop == nullptr ? own_loop_.get() : loop),
      gpus_(slots_.size()) {
  for (PerGpu& g : gpus_) g.ring.resize(history_);
}

Telemetry::~Telemetry() { Stop(); }

void Telemetry::Start() {
  if (own_loop_) own_loop_->Start();
  next_tick_ = steady_clock::now();
  next_check_ = next_tick_ + options_.health_interval;
  tasks_.Post([this] { Tick(); });
}

void Telemetry::Stop() {
  tasks_.Close();
  if (own_loop_) own_loop_->Stop();
}

void Telemetry::Tick() {
  int64_t now = MonoNs();
  SampleAll(now);
  if (steady_clock::now() >= next_check_) {
    CheckHealth(now);
    next_check_ += options_.health_interval;
  }
  // Fixed-rate: the next tick is a period after the previous one, not after
  // this one ended; a sampler that fell behind skips ahead instead of bursting.
  next_tick_ += options_.period;
  auto now_tp = steady_clock::now();
  if (next_tick_ < now_tp) next_tick_ = now_tp + options_.period;
  tasks_.PostAfter(next_tick_ - now_tp, [this] { Tick(); });
}

void Telemetry::SampleAll(int64_t now_ns) {
  std::vector<std::pair<Result<GpuSample>, std::vector<HealthEvent>>> results;
  results.reserve(slots_.size());
  for (const DeviceSlot& slot : slots_)
    results.emplace_back(slot.backend->Sample(slot.index), std::vector<HealthEvent>{});
  // Events come per backend: hand each to the node GPU it names.
  for (auto& backend : backends_) {
    for (HealthEvent& e : backend->TakeEvents()) {
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].backend == backend.get() && slots_[i].index == e.device) {
          results[i].second.push_back(std::move(e));
          break;
        }
      }
    }
  }
  int64_t wall = WallNs();
  MutexLock lock(&mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    PerGpu& g = gpus_[i];
    auto& [sample, events] = results[i];
    for (HealthEvent& e : events) g.pending_events.push_back(std::move(e));
    g.answered = sample.ok();
    if (!sample.ok()) {
      // Its last reading is stale now: reported as unknown, not as current.
      g.sample_error = sample.status().message();
      g.reading.have_sample = false;
      continue;
    }
    sample->time_ns = now_ns;
    GpuReading& r = g.reading;
    r.have_sample = true;
    r.latest = *sample;
    r.latest_wall_ns = wall;
    ++r.samples;
    if (Known(sample->utilization_pct)) {
      g.util_sum += sample->utilization_pct;
      ++g.util_n;
      r.utilization_max =
          Known(r.utilization_max) ? std::max(r.utilization_max, sample->utilization_pct) : sample->utilization_pct;
    }
    if (Known(sample->temperature_c)) {
      r.temperature_max =
          Known(r.temperature_max) ? std::max(r.temperature_max, sample->temperature_c) : sample->temperature_c;
    }
    if (Known(sample->power_w)) {
      g.power_sum += sample->power_w;
      ++g.power_n;
    }
    g.ring[g.next] = std::move(*sample);
    g.next = (g.next + 1) % history_;
    g.size = std::min(g.size + 1, history_);
  }
}

void Telemetry::CheckHealth(int64_t now_ns) {
  bool changed = false;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < gpus_.size(); ++i) {
      PerGpu& g = gpus_[i];
      HealthCheckInput in;
      in.answered = g.answered;
      in.sample_error = g.sample_error;
      in.thermal_throttled = g.answered && g.reading.have_sample && (g.reading.latest.throttle & kThrottleThermal) != 0;
      in.events = std::exchange(g.pending_events, {});
      int gpu = static_cast<int>(i);
      bool was_healthy = health_.healthy(gpu);
      if (health_.Check(gpu, in, now_ns)) {
        changed = true;
        if (was_healthy != health_.healthy(gpu)) {
          if (health_.healthy(gpu)) {
            spdlog::info("node '{}': gpu {} is healthy again", options_.node_name, gpu);
          } else {
            spdlog::warn("node '{}': gpu {} is unhealthy: {}", options_.node_name, gpu, health_.reason(gpu));
          }
        }
      }
      g.reading.healthy = health_.healthy(gpu);
      g.reading.reason = health_.reason(gpu);
      g.reading.xid_errors = health_.xid_errors(gpu);
      g.reading.last_xid = health_.last_xid(gpu);
    }
  }
  if (changed && on_health_change_) on_health_change_();
}

std::vector<GpuReading> Telemetry::TakeReadings(bool summarise) {
  MutexLock lock(&mu_);
  std::vector<GpuReading> out;
  out.reserve(gpus_.size());
  for (PerGpu& g : gpus_) {
    GpuReading r = g.reading;
    r.utilization_avg = g.util_n > 0 ? g.util_sum / g.util_n : NAN;
    r.power_avg = g.power_n > 0 ? g.power_sum / g.power_n : NAN;
    out.push_back(std::move(r));
    if (summarise) {
      g.reading.samples = 0;
      g.reading.utilization_max = NAN;
      g.reading.temperature_max = NAN;
      g.util_sum = g.power_sum = 0;
      g.util_n = g.power_n = 0;
    }
  }
  return out;
}

std::vector<GpuSample> Telemetry::History(int gpu, size_t max) const {
  MutexLock lock(&mu_);
  if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return {};
  const PerGpu& g = gpus_[static_cast<size_t>(gpu)];
  size_t n = std::min(max, g.size);
  std::vector<GpuSample> out;
  out.reserve(n);
  for (size_t k = n; k > 0; --k) out.push_back(g.ring[(g.next + history_ - k) % history_]);
  return out;
}

void Telemetry::SetLoad(int gpu, double load) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= slots_.size()) return;
  DeviceSlot slot = slots_[static_cast<size_t>(gpu)];
  tasks_.Post([slot, load] { slot.backend->SetLoad(slot.index, load); });
}

Status Telemetry::InjectFault(int gpu, const Fault& fault) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= slots_.size()) {
    return InvalidArgument(fmt::format("gpu {} does not exist (the node has {})", gpu, slots_.size()));
  }
  DeviceSlot slot = slots_[static_cast<size_t>(gpu)];
  if (tasks_.InLoopThread()) return slot.backend->InjectFault(slot.index, fault);
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> answer = done->get_future();
  if (!tasks_.Post([slot, fault, done] { done->set_value(slot.backend->InjectFault(slot.index, fault)); })) {
    return Unavailable("the agent is stopping");
  }
  try {
    return answer.get();
  } catch (const std::future_error&) {
    return Unavailable("the agent is stopping");  // dropped by Stop
  }
}

}  // namespace drover::agent
