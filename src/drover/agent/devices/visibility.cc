// VisibilityVariable: which environment variable hides devices from a process.

#include "drover/agent/devices/device_backend.h"

namespace drover::agent {

std::string_view VisibilityVariable(std::string_view vendor) {
  // Vendors are the lower-case names a backend writes into GpuDevice::vendor.
  // "opencl" has no such variable: the ICD loader has no portable one, so the
  // launcher cannot restrict those devices and must not pretend to.
  if (vendor == "nvidia") return "CUDA_VISIBLE_DEVICES";
  if (vendor == "amd") return "ROCR_VISIBLE_DEVICES";
  if (vendor == "intel") return "ZE_AFFINITY_MASK";
  return "";
}

}  // namespace drover::agent
