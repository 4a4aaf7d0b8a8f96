// Placeholder until the nvml backend lands: never available.
#include "drover/agent/devices/device_backend.h"

namespace drover::agent {
namespace {
class UnavailableNvmlBackend final : public DeviceBackend {
 public:
  std::string_view Name() const override { return "nvml"; }
  bool IsAvailable() override { return false; }
  Status Initialize() override { return Unavailable("nvml backend is not built"); }
  Result<std::vector<GpuDevice>> Discover() override { return Unavailable("nvml backend is not built"); }
  Result<GpuSample> Sample(int) override { return Unavailable("nvml backend is not built"); }
};
}  // namespace
std::unique_ptr<DeviceBackend> MakeNvmlBackend(VendorLibrary) { return std::make_unique<UnavailableNvmlBackend>(); }
}  // namespace drover::agent
