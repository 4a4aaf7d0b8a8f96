// Placeholder until the rocm_smi backend lands: never available.
#include "drover/agent/devices/device_backend.h"

namespace drover::agent {
namespace {
class UnavailableRocmSmiBackend final : public DeviceBackend {
 public:
  std::string_view Name() const override { return "rocm_smi"; }
  bool IsAvailable() override { return false; }
  Status Initialize() override { return Unavailable("rocm_smi backend is not built"); }
  Result<std::vector<GpuDevice>> Discover() override { return Unavailable("rocm_smi backend is not built"); }
  Result<GpuSample> Sample(int) override { return Unavailable("rocm_smi backend is not built"); }
};
}  // namespace
std::unique_ptr<DeviceBackend> MakeRocmSmiBackend(VendorLibrary) { return std::make_unique<UnavailableRocmSmiBackend>(); }
}  // namespace drover::agent
