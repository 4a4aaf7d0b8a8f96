// LevelZeroBackend::Sample(): one telemetry reading of one device through
// Sysman. Counters (engine activity, energy) become rates between two
// samples; every field the driver does not support stays unknown; a device
// that stops answering fails the sample and raises one kDeviceLost event.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/agent/devices/level_zero/level_zero_backend.h"
#include "drover/common/quantity.h"

namespace drover::agent::level_zero {

namespace {

// Sanity limits on telemetry; a reading outside them is left unknown.
constexpr uint32_t kMaxProcesses = 4096;
constexpr int64_t kMaxMemoryBytes = 1024 * kTiB;
constexpr double kMinTemperatureC = -60;
constexpr double kMaxTemperatureC = 250;
constexpr double kMaxPowerW = 10000;
constexpr double kMaxClockMhz = 100000;
// Engine activity and its timestamp are read together but not atomically:
// a ratio a little above 100% is jitter, far above it is garbage.
constexpr double kMaxUtilizationPct = 105;
constexpr uint64_t kMaxErrorCount = uint64_t{1} << 48;

// The call that found the device lost.
struct Loss {
  const char* call;
  ze_result_t result;
};

// What one reader works on.
struct Reading {
  const Api& api;
  DeviceState& device;
  GpuSample& sample;
  std::vector<HealthEvent>& events;
  int index;
};

// Either the call succeeded, or it failed: a lost device records the loss,
// anything else (ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, permissions, ...)
// leaves the field unknown.
bool Succeeded(ze_result_t result, const char* call, std::optional<Loss>* loss) {
  if (result == ZE_RESULT_SUCCESS) return true;
  if (IsLost(result) && !*loss) *loss = Loss{call, result};
  return false;
}

// Rate of a counter between two readings, per unit of its timestamp; nullopt
// on the first reading, a stalled clock or a counter that went backwards.
std::optional<double> Rate(const std::optional<Counter>& previous, const Counter& now) {
  if (!previous || now.timestamp_us <= previous->timestamp_us || now.value < previous->value) {
    return std::nullopt;
  }
  return static_cast<double>(now.value - previous->value) /
         static_cast<double>(now.timestamp_us - previous->timestamp_us);
}

std::optional<Loss> ReadState(Reading& r) {
  std::optional<Loss> loss;
  if (r.api.zesDeviceGetState == nullptr) return loss;
  zes_device_state_t state{};
  state.stype = ZES_STRUCTURE_TYPE_DEVICE_STATE;
  if (!Succeeded(r.api.zesDeviceGetState(r.device.handle, &state), "zesDeviceGetState", &loss)) return loss;
  // A wedged device still answers Sysman but runs nothing: report it once.
  if (state.reset != 0 && state.reset != r.device.reset_reported) {
    std::string why = (state.reset & ZES_RESET_REASON_FLAG_WEDGED) != 0 ? "is wedged" : "needs a repair";
    r.events.push_back({r.index, HealthEvent::Kind::kDeviceLost, static_cast<int64_t>(state.reset),
                        r.device.where + " " + why + " and needs a reset"});
  }
  r.device.reset_reported = state.reset;
  return loss;
}

std::optional<Loss> ReadUtilization(Reading& r) {
  std::optional<Loss> loss;
  double sum = 0;
  int known = 0;
  bool garbage = false;
  for (size_t k = 0; k < r.device.engines.size(); ++k) {
    zes_engine_stats_t stats{};
    if (!Succeeded(r.api.zesEngineGetActivity(r.device.engines[k], &stats), "zesEngineGetActivity", &loss)) {
      if (loss) return loss;
      r.device.last_activity[k].reset();
      garbage = true;
      continue;
    }
    Counter now{stats.activeTime, stats.timestamp};
    std::optional<double> share = Rate(r.device.last_activity[k], now);
    r.device.last_activity[k] = now;
    if (!share) continue;
    double pct = *share * 100;
    if (!std::isfinite(pct) || pct > kMaxUtilizationPct) {
      garbage = true;
      continue;
    }
    sum += std::min(pct, 100.0);
    ++known;
  }
  // The tiles' engine groups average into the device's utilization.
  if (known > 0 && !garbage && static_cast<size_t>(known) == r.device.engines.size()) {
    r.sample.utilization_pct = sum / known;
  }
  return loss;
}

std::optional<Loss> ReadMemory(Reading& r) {
  std::optional<Loss> loss;
  if (r.api.zesMemoryGetState == nullptr || r.device.memory.empty()) return loss;
  int64_t used = 0;
  int64_t total = 0;
  for (zes_mem_handle_t module : r.device.memory) {
    zes_mem_state_t state{};
    state.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
    if (!Succeeded(r.api.zesMemoryGetState(module, &state), "zesMemoryGetState", &loss)) return loss;
    if (state.free > state.size || state.size > static_cast<uint64_t>(kMaxMemoryBytes)) return loss;
    used += static_cast<int64_t>(state.size - state.free);
    total += static_cast<int64_t>(state.size);
  }
  if (total > kMaxMemoryBytes) return loss;
  r.sample.memory_used_bytes = used;
  r.sample.memory_total_bytes = total;
  return loss;
}

std::optional<Loss> ReadTemperature(Reading& r) {
  std::optional<Loss> loss;
  if (r.api.zesTemperatureGetState == nullptr) return loss;
  double hottest = NAN;
  for (zes_temp_handle_t sensor : r.device.temperature) {
    double celsius = NAN;
    if (!Succeeded(r.api.zesTemperatureGetState(sensor, &celsius), "zesTemperatureGetState", &loss)) return loss;
    if (!std::isfinite(celsius) || celsius < kMinTemperatureC || celsius > kMaxTemperatureC) return loss;
    if (std::isnan(hottest) || celsius > hottest) hottest = celsius;
  }
  r.sample.temperature_c = hottest;
  return loss;
}

std::optional<Loss> ReadPower(Reading& r) {
  std::optional<Loss> loss;
  // Energy in microjoules over microseconds: watts. Sub-device domains add up.
  if (r.api.zesPowerGetEnergyCounter != nullptr && !r.device.power.empty()) {
    double watts = 0;
    bool complete = true;
    for (size_t k = 0; k < r.device.power.size(); ++k) {
      zes_power_energy_counter_t energy{};
      if (!Succeeded(r.api.zesPowerGetEnergyCounter(r.device.power[k], &energy), "zesPowerGetEnergyCounter", &loss)) {
        if (loss) return loss;
        r.device.last_energy[k].reset();
        complete = false;
        continue;
      }
      Counter now{energy.energy, energy.timestamp};
      std::optional<double> w = Rate(r.device.last_energy[k], now);
      r.device.last_energy[k] = now;
      if (!w || !std::isfinite(*w) || *w > kMaxPowerW) {
        complete = false;
        continue;
      }
      watts += *w;
    }
    if (complete && watts <= kMaxPowerW) r.sample.power_w = watts;
  }
  if (r.api.zesPowerGetLimits != nullptr && !r.device.power.empty()) {
    double limit_w = 0;
    bool complete = true;
    for (zes_pwr_handle_t domain : r.device.power) {
      zes_power_sustained_limit_t sustained{};
      if (!Succeeded(r.api.zesPowerGetLimits(domain, &sustained, nullptr, nullptr), "zesPowerGetLimits", &loss)) {
        if (loss) return loss;
        complete = false;
        break;
      }
      // Milliwatts; a disabled limit means the domain has none.
      if (sustained.enabled == 0 || sustained.power <= 0) {
        complete = false;
        break;
      }
      limit_w += sustained.power / 1000.0;
    }
    if (complete && limit_w <= kMaxPowerW) r.sample.power_limit_w = limit_w;
  }
  return loss;
}

uint32_t ThrottleBits(zes_freq_throttle_reason_flags_t reasons) {
  uint32_t bits = 0;
  if ((reasons & ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT) != 0) bits |= kThrottleThermal;
  constexpr zes_freq_throttle_reason_flags_t kPower =
      ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP | ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP |
      ZES_FREQ_THROTTLE_REASON_FLAG_CURRENT_LIMIT | ZES_FREQ_THROTTLE_REASON_FLAG_PSU_ALERT;
  if ((reasons & kPower) != 0) bits |= kThrottlePower;
  if ((reasons & ~(kPower | ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT)) != 0) bits |= kThrottleOther;
  return bits;
}

// The fastest domain's actual clock (tiles may differ); throttle reasons of all.
std::optional<Loss> ReadClock(Reading& r, const std::vector<zes_freq_handle_t>& domains, int* mhz) {
  std::optional<Loss> loss;
  double fastest = -1;
  for (zes_freq_handle_t domain : domains) {
    zes_freq_state_t state{};
    state.stype = ZES_STRUCTURE_TYPE_FREQ_STATE;
    if (!Succeeded(r.api.zesFrequencyGetState(domain, &state), "zesFrequencyGetState", &loss)) return loss;
    r.sample.throttle |= ThrottleBits(state.throttleReasons);
    // Sysman says -1 for "cannot tell".
    if (std::isfinite(state.actual) && state.actual >= 0 && state.actual <= kMaxClockMhz) {
      fastest = std::max(fastest, state.actual);
    }
  }
  if (fastest >= 0) *mhz = static_cast<int>(std::lround(fastest));
  return loss;
}

std::optional<Loss> ReadClocks(Reading& r) {
  if (r.api.zesFrequencyGetState == nullptr) return std::nullopt;
  if (auto loss = ReadClock(r, r.device.gpu_clock, &r.sample.sm_clock_mhz)) return loss;
  return ReadClock(r, r.device.memory_clock, &r.sample.memory_clock_mhz);
}

std::optional<Loss> ReadEcc(Reading& r) {
  std::optional<Loss> loss;
  if (r.api.zesRasGetState == nullptr || r.device.ras.empty()) return loss;
  int64_t corrected = -1;
  int64_t uncorrected = -1;
  for (const DeviceState::Ras& set : r.device.ras) {
    zes_ras_state_t state{};
    state.stype = ZES_STRUCTURE_TYPE_RAS_STATE;
    if (!Succeeded(r.api.zesRasGetState(set.handle, 0, &state), "zesRasGetState", &loss)) return loss;
    uint64_t errors = 0;
    for (uint64_t count : state.category) {
      if (count > kMaxErrorCount) return loss;
      errors += count;
    }
    int64_t& total = set.type == ZES_RAS_ERROR_TYPE_UNCORRECTABLE ? uncorrected : corrected;
    total = std::max<int64_t>(total, 0) + static_cast<int64_t>(errors);
  }
  r.sample.ecc_corrected = corrected;
  r.sample.ecc_uncorrected = uncorrected;
  // Counts since the agent started watching: the first reading is the baseline.
  if (uncorrected >= 0 && r.device.last_uncorrected >= 0 && uncorrected > r.device.last_uncorrected) {
    const int64_t added = uncorrected - r.device.last_uncorrected;
    r.events.push_back({r.index, HealthEvent::Kind::kEccUncorrected, added,
                        r.device.where + " reported " + std::to_string(added) + " new uncorrectable errors (" +
                            std::to_string(uncorrected) + " in all)"});
  }
  if (uncorrected >= 0) r.device.last_uncorrected = uncorrected;
  return loss;
}

std::optional<Loss> ReadProcesses(Reading& r) {
  std::optional<Loss> loss;
  if (r.api.zesDeviceProcessesGetState == nullptr) return loss;
  uint32_t count = 0;
  if (!Succeeded(r.api.zesDeviceProcessesGetState(r.device.handle, &count, nullptr), "zesDeviceProcessesGetState",
                 &loss)) {
    return loss;
  }
  if (count > kMaxProcesses) return loss;
  std::vector<zes_process_state_t> states(count);
  for (auto& s : states) {
    s = {};
    s.stype = ZES_STRUCTURE_TYPE_PROCESS_STATE;
  }
  if (count > 0) {
    uint32_t returned = count;
    // ZE_RESULT_ERROR_INVALID_SIZE: processes started between the calls; unknown this time.
    if (!Succeeded(r.api.zesDeviceProcessesGetState(r.device.handle, &returned, states.data()),
                   "zesDeviceProcessesGetState", &loss)) {
      return loss;
    }
    if (returned < count) states.resize(returned);
  }
  std::vector<ProcessUsage> processes;
  for (const zes_process_state_t& s : states) {
    if (s.processId == 0 || s.memSize > static_cast<uint64_t>(kMaxMemoryBytes)) return loss;
    processes.push_back({static_cast<int64_t>(s.processId), static_cast<int64_t>(s.memSize)});
  }
  r.sample.processes = std::move(processes);
  r.sample.processes_known = true;
  return loss;
}

}  // namespace

Result<GpuSample> LevelZeroBackend::Sample(int device) {
  if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
    return NotFound("level zero device " + std::to_string(device) + " was not discovered");
  }
  DeviceState& state = devices_[static_cast<size_t>(device)];
  GpuSample sample;
  Reading reading{api_, state, sample, events_, device};
  // The device state first: a lost device fails there before anything else.
  for (auto* read :
       {ReadState, ReadUtilization, ReadMemory, ReadTemperature, ReadPower, ReadClocks, ReadEcc, ReadProcesses}) {
    if (std::optional<Loss> loss = read(reading)) return MarkLost(&state, device, loss->call, loss->result);
  }
  state.lost = false;
  return sample;
}

Status LevelZeroBackend::MarkLost(DeviceState* state, int index, const char* call, ze_result_t result) {
  std::string message = CallError(call, state->where, result);
  if (!state->lost) {
    events_.push_back({index, HealthEvent::Kind::kDeviceLost, static_cast<int64_t>(result), message});
    state->lost = true;
  }
  // Counters read before the loss say nothing about the rates after it.
  for (auto& c : state->last_activity) c.reset();
  for (auto& c : state->last_energy) c.reset();
  return Unavailable(message);
}

}  // namespace drover::agent::level_zero
