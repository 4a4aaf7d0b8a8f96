// The simulated backend: a node with N identical GPUs of a known model, for
// the simulator, tests and demos on machines without GPUs.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/hash.h"
#include "drover/common/quantity.h"

namespace drover::agent {

namespace {

constexpr int kMaxSimulatedDevices = 64;


char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// Not thread-safe: owned by the agent (or simulator) that created it. Holds
// no state beyond its spec, so Discover() always returns the same devices.
class SimulatedBackend final : public DeviceBackend {
 public:
  SimulatedBackend(const SimulatedModel& model, int count, std::string node_name)
      : model_(model), count_(count), node_name_(std::move(node_name)) {}

  std::string_view Name() const override { return "simulated"; }
  bool IsAvailable() override { return true; }
  Status Initialize() override { return Status::Ok(); }

  Result<std::vector<GpuDevice>> Discover() override {
    // The uuid depends only on the node name and the index, so two agents
    // (or one agent restarted) on the same node see the same identities.
    char node_hash[17];
    std::snprintf(node_hash, sizeof(node_hash), "%016llx",
                  static_cast<unsigned long long>(Fnv1a64(node_name_)));
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
      devices.push_back(std::move(device));
    }
    return devices;
  }

  Result<GpuSample> Sample(int device) override {
    if (device < 0 || device >= count_) return NotFound("simulated device " + std::to_string(device) + " does not exist");
    GpuSample sample;
    sample.memory_total_bytes = model_.memory_bytes;
    return sample;
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
  // Two sockets, the first half of the GPUs on the first.
  int NumaOf(int i) const { return count_ >= 2 && i >= (count_ + 1) / 2 ? 1 : 0; }

  SimulatedModel model_;
  int count_;
  std::string node_name_;
};

}  // namespace

const std::vector<SimulatedModel>& SimulatedModels() {
  // Memory as the simulator accounts for it: the marketing size in GiB.
  static const std::vector<SimulatedModel> kModels = {
      {"H100 80GB", "nvidia", 80 * kGiB, true},   // HGX: NVSwitch
      {"H100 94GB", "nvidia", 94 * kGiB, true},
      {"H200 141GB", "nvidia", 141 * kGiB, true},
      {"A100 80GB", "nvidia", 80 * kGiB, true},
      {"A100 40GB", "nvidia", 40 * kGiB, true},
      {"L40S", "nvidia", 48 * kGiB, false},       // PCIe cards
      {"L4", "nvidia", 24 * kGiB, false},
      {"MI300X", "amd", 192 * kGiB, true},        // OAM: xGMI
      {"MI250X", "amd", 128 * kGiB, true},
      {"Max 1550", "intel", 128 * kGiB, true},    // Xe Link
  };
  return kModels;
}

Result<std::unique_ptr<DeviceBackend>> MakeSimulatedBackend(const SimulatedSpec& spec) {
  if (spec.count < 0 || spec.count > kMaxSimulatedDevices) {
    return InvalidArgument("simulated device count " + std::to_string(spec.count) +
                           " is outside 0.." + std::to_string(kMaxSimulatedDevices));
  }
  for (const SimulatedModel& model : SimulatedModels()) {
    // Case-insensitive so that "h100 80gb" from a command line works; the
    // devices still report the catalog's spelling.
    if (EqualsIgnoringCase(model.model, spec.model)) {
      return std::unique_ptr<DeviceBackend>(
          std::make_unique<SimulatedBackend>(model, spec.count, spec.node_name));
    }
  }
  std::string known;
  for (const SimulatedModel& model : SimulatedModels()) {
    if (!known.empty()) known += ", ";
    known += "'" + std::string(model.model) + "'";
  }
  return InvalidArgument("unknown simulated gpu model '" + spec.model + "' (known: " + known +
                         ")");
}

}  // namespace drover::agent
