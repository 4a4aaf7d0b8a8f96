// The simulated backend: a node with N identical GPUs of a known model, for
// the simulator, tests and demos on machines without GPUs, with a
// behavioural telemetry model and fault injection.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/hash.h"
#include "drover/common/quantity.h"
#include "drover/common/rng.h"

namespace drover::agent {

namespace {

constexpr int kMaxSimulatedDevices = 64;
constexpr double kAmbientC = 30;
constexpr double kRiseC = 55;       // above ambient at full power
constexpr double kOverheatC = 60;   // more with broken cooling
constexpr double kSlowdownC = 87;   // clocks drop above this
constexpr double kThermalTau = 20;  // seconds
constexpr double kUtilizationTau = 0.5;
constexpr int kBoostMhz = 1980;
constexpr int kIdleMhz = 345;
constexpr int kMemoryMhz = 2619;

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// The behavioural model of one simulated GPU. Each Sample() advances it by
// dt seconds of simulated time:
//   utilization -> the load the agent set (SetLoad), with a 0.5 s lag and a
//                  little seeded noise while busy;
//   power       =  idle + (tdp - idle) x utilization, cut to 60 % while
//                  throttled;
//   temperature -> ambient + 55 C x power / tdp (+ 60 C with broken cooling),
//                  first order with a 20 s time constant (thermal inertia);
//   clocks      =  boost clock, or 60 % of it above the slowdown temperature
//                  (throttle = thermal).
// Worked example (H100, 700 W TDP, 70 W idle): at full load power is 700 W
// and the temperature heads to 30 + 55 = 85 C, reaching 84 C after ~80 s;
// with broken cooling it heads to 145 C and throttles at 87 C within ~25 s.
struct DeviceModel {
  double load = 0;         // what the agent set, 0..1
  double utilization = 0;  // percent
  double temperature = kAmbientC;
  int64_t ecc_uncorrected = 0;
  bool lost = false;
  bool overheat = false;
  int64_t last_ns = 0;  // when it was last advanced (wall clock mode)
};

// Not thread-safe: owned by the agent's telemetry thread (or a test).
class SimulatedBackend final : public DeviceBackend {
 public:
  SimulatedBackend(const SimulatedModel& model, int count, std::string node_name, double step_seconds)
      : model_(model),
        count_(count),
        node_name_(std::move(node_name)),
        step_seconds_(step_seconds),
        devices_(static_cast<size_t>(count)),
        rng_(Fnv1a64(node_name_)) {}

  std::string_view Name() const override { return "simulated"; }
  bool IsAvailable() override { return true; }
  Status Initialize() override { return Status::Ok(); }

  Result<std::vector<GpuDevice>> Discover() override {
    // The uuid depends only on the node name and the index, so two agents
    // (or one agent restarted) on the same node see the same identities.
    char node_hash[17];
    std::snprintf(node_hash, sizeof(node_hash), "%016llx", static_cast<unsigned long long>(Fnv1a64(node_name_)));
    std::vector<GpuDevice> devices;
    devices.reserve(static_cast<size_t>(count_));
    for (int i = 0; i < count_; ++i) {
      GpuDevice device;
      device.index = i;
      device.uuid = "sim-" + std::string(node_hash) + "-" + std::to_string(i);
      device.vendor = std::string(model_.vendor);
      device.model = std::string(model_.model);
      device.memory_bytes = model_.memory_bytes;
      device.healthy = true;
      device.backend = "simulated";
      device.numa_node = NumaOf(i);
      char bus[32];
      std::snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x10 + i);
      device.pci_bus_id = bus;
      device.architecture = std::string(model_.architecture);
      device.driver_version = "simulated";
      devices.push_back(std::move(device));
    }
    return devices;
  }

  Result<GpuSample> Sample(int device) override {
    DROVER_ASSIGN_OR_RETURN(DeviceModel * d, Find(device));
    if (d->lost) return Unavailable("simulated device " + std::to_string(device) + " is lost");
    Advance(d);
    bool throttled = d->temperature >= kSlowdownC;
    GpuSample sample;
    sample.utilization_pct = d->utilization;
    sample.memory_utilization_pct = d->utilization * 0.6;
    sample.memory_total_bytes = model_.memory_bytes;
    // The framework's context and caches, then what the work touches.
    sample.memory_used_bytes =
        d->load > 0 ? static_cast<int64_t>(static_cast<double>(model_.memory_bytes) * (0.05 + 0.6 * d->load)) : 0;
    sample.temperature_c = d->temperature;
    sample.power_w = Power(*d);
    sample.power_limit_w = model_.tdp_w;
    sample.sm_clock_mhz = throttled ? kBoostMhz * 6 / 10 : (d->utilization > 1 ? kBoostMhz : kIdleMhz);
    sample.memory_clock_mhz = kMemoryMhz;
    sample.throttle = throttled ? uint32_t{kThrottleThermal} : 0u;
    sample.ecc_corrected = 0;
    sample.ecc_uncorrected = d->ecc_uncorrected;
    sample.row_remap_failure = 0;
    if (model_.fabric) sample.nvlink_crc_errors = sample.nvlink_replay_errors = sample.nvlink_recovery_errors = 0;
    return sample;
  }

  std::vector<HealthEvent> TakeEvents() override { return std::exchange(events_, {}); }

  void SetLoad(int device, double load) override {
    auto d = Find(device);
    if (d.ok()) (*d)->load = std::clamp(std::isnan(load) ? 0.0 : load, 0.0, 1.0);
  }

  Status InjectFault(int device, const Fault& fault) override {
    DROVER_ASSIGN_OR_RETURN(DeviceModel * d, Find(device));
    switch (fault.kind) {
      case Fault::Kind::kXid: events_.push_back({device, HealthEvent::Kind::kXid, fault.code, "injected"}); break;
      case Fault::Kind::kEccUncorrected:
        ++d->ecc_uncorrected;
        events_.push_back({device, HealthEvent::Kind::kEccUncorrected, 0, "injected double-bit ecc error"});
        break;
      case Fault::Kind::kLost:
        d->lost = true;
        events_.push_back({device, HealthEvent::Kind::kDeviceLost, 0, "injected: the device stopped answering"});
        break;
      case Fault::Kind::kOverheat: d->overheat = true; break;
      case Fault::Kind::kClear:
        d->lost = false;
        d->overheat = false;
        d->last_ns = 0;  // no catching up on the time it was lost
        break;
    }
    return Status::Ok();
  }

  std::vector<DeviceLink> Links() const override {
    std::vector<DeviceLink> links;
    links.reserve(static_cast<size_t>(count_) * static_cast<size_t>(count_));
    for (int i = 0; i < count_; ++i) {
      for (int j = 0; j < count_; ++j) {
        if (model_.fabric && i / 8 == j / 8) {
          links.push_back(DeviceLink::kFabric);
        } else if (!model_.fabric && i / 2 == j / 2) {
          links.push_back(DeviceLink::kPcieSwitch);
        } else {
          links.push_back(NumaOf(i) == NumaOf(j) ? DeviceLink::kSameNuma : DeviceLink::kCrossSocket);
        }
      }
    }
    return links;
  }

 private:
  Result<DeviceModel*> Find(int device) {
    if (device < 0 || device >= count_) {
      return NotFound("simulated device " + std::to_string(device) + " does not exist");
    }
    return &devices_[static_cast<size_t>(device)];
  }

  double Power(const DeviceModel& d) const {
    double p = model_.idle_w + (model_.tdp_w - model_.idle_w) * d.utilization / 100.0;
    return d.temperature >= kSlowdownC ? p * 0.6 : p;
  }

  void Advance(DeviceModel* d) {
    double dt = step_seconds_;
    if (dt <= 0) {
      int64_t now =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
              .count();
      dt = d->last_ns == 0 ? 0 : static_cast<double>(now - d->last_ns) / 1e9;
      d->last_ns = now;
      dt = std::min(dt, 60.0);  // a stalled sampler does not jump the model
    }
    double noise = d->load > 0 ? (rng_.UniformReal() - 0.5) * 6 : 0;
    double target = std::clamp(d->load * 100 + noise, 0.0, 100.0);
    d->utilization += (target - d->utilization) * (1 - std::exp(-dt / kUtilizationTau));
    double rise = kRiseC * Power(*d) / model_.tdp_w + (d->overheat ? kOverheatC : 0);
    d->temperature += (kAmbientC + rise - d->temperature) * (1 - std::exp(-dt / kThermalTau));
  }

  // Two sockets, the first half of the GPUs on the first.
  int NumaOf(int i) const { return count_ >= 2 && i >= (count_ + 1) / 2 ? 1 : 0; }

  SimulatedModel model_;
  int count_;
  std::string node_name_;
  double step_seconds_;
  std::vector<DeviceModel> devices_;
  std::vector<HealthEvent> events_;
  Rng rng_;
};

}  // namespace

const std::vector<SimulatedModel>& SimulatedModels() {
  // Memory as the simulator accounts for it: the marketing size in GiB.
  static const std::vector<SimulatedModel> kModels = {
      // model, vendor, memory, fabric, idle W, TDP W, architecture
      {"H100 80GB", "nvidia", 80 * kGiB, true, 70, 700, "sm_90"},  // HGX: NVSwitch
      {"H100 94GB", "nvidia", 94 * kGiB, true, 70, 700, "sm_90"},
      {"H200 141GB", "nvidia", 141 * kGiB, true, 75, 700, "sm_90"},
      {"A100 80GB", "nvidia", 80 * kGiB, true, 55, 400, "sm_80"},
      {"A100 40GB", "nvidia", 40 * kGiB, true, 55, 400, "sm_80"},
      {"L40S", "nvidia", 48 * kGiB, false, 35, 350, "sm_89"},  // PCIe cards
      {"L4", "nvidia", 24 * kGiB, false, 16, 72, "sm_89"},
      {"MI300X", "amd", 192 * kGiB, true, 140, 750, "gfx942"},  // OAM: xGMI
      {"MI250X", "amd", 128 * kGiB, true, 90, 500, "gfx90a"},
      {"Max 1550", "intel", 128 * kGiB, true, 100, 600, "xe-hpc"},  // Xe Link
  };
  return kModels;
}

Result<std::unique_ptr<DeviceBackend>> MakeSimulatedBackend(const SimulatedSpec& spec) {
  if (spec.count < 0 || spec.count > kMaxSimulatedDevices) {
    return InvalidArgument("simulated device count " + std::to_string(spec.count) + " is outside 0.." +
                           std::to_string(kMaxSimulatedDevices));
  }
  for (const SimulatedModel& model : SimulatedModels()) {
    // Case-insensitive so that "h100 80gb" from a command line works; the
    // devices still report the catalog's spelling.
    if (EqualsIgnoringCase(model.model, spec.model)) {
      return std::unique_ptr<DeviceBackend>(
          std::make_unique<SimulatedBackend>(model, spec.count, spec.node_name, spec.step_seconds));
    }
  }
  std::string known;
  for (const SimulatedModel& model : SimulatedModels()) {
    if (!known.empty()) known += ", ";
    known += "'" + std::string(model.model) + "'";
  }
  return InvalidArgument("unknown simulated gpu model '" + spec.model + "' (known: " + known + ")");
}

}  // namespace drover::agent
