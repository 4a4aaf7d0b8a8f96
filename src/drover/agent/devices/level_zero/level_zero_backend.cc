// Placeholder until the level_zero backend lands: never available.
#include "drover/agent/devices/device_backend.h"

namespace drover::agent {
namespace {
class UnavailableLevelZeroBackend final : public DeviceBackend {
 public:
  std::string_view Name() const override { return "level_zero"; }
  bool IsAvailable() override { return false; }
  Status Initialize() override { return Unavailable("level_zero backend is not built"); }
  Result<std::vector<GpuDevice>> Discover() override { return Unavailable("level_zero backend is not built"); }
  Result<GpuSample> Sample(int) override { return Unavailable("level_zero backend is not built"); }
};
}  // namespace
std::unique_ptr<DeviceBackend> MakeLevelZeroBackend(VendorLibrary) { return std::make_unique<UnavailableLevelZeroBackend>(); }
}  // namespace drover::agent
