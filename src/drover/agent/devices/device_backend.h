#pragma once
// DeviceBackend: how an agent finds the GPUs (and other accelerators) of its
// machine. One implementation per vendor library, loaded at run time so that
// one binary runs with or without any vendor stack; picked by name.
//
// Not thread-safe: owned by the agent that created it.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

struct GpuDevice {
  int index = 0;           // node-local, 0..n-1, stable across restarts
  std::string uuid;        // stable identity ("GPU-..." for NVIDIA, "sim-..." simulated)
  std::string vendor;      // "nvidia", "amd", "intel" or "opencl"
  std::string model;       // "H100 80GB", "pthread-..." for PoCL
  int64_t memory_bytes = 0;
  bool healthy = true;
  std::string backend;     // the backend that found it
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string_view Name() const = 0;
  // Cheap check: is the vendor library present on this machine?
  virtual bool IsAvailable() = 0;
  virtual Status Initialize() = 0;
  // Every device, indexed 0..n-1 within this backend.
  virtual Result<std::vector<GpuDevice>> Discover() = 0;
};

// The environment variable that restricts a process to some devices of a
// vendor: "CUDA_VISIBLE_DEVICES" for nvidia, "ROCR_VISIBLE_DEVICES" for amd,
// "ZE_AFFINITY_MASK" for intel; empty for vendors without one.
std::string_view VisibilityVariable(std::string_view vendor);

struct SimulatedSpec {
  int count = 8;
  std::string model = "H100 80GB";
  std::string node_name;  // seeds the stable uuids
};

// A GPU model the simulator knows: vendor and memory.
struct SimulatedModel {
  std::string_view model;
  std::string_view vendor;
  int64_t memory_bytes;
};
// Known models ("H100 80GB", "A100 80GB", "A100 40GB", "L4", "MI300X", ...).
const std::vector<SimulatedModel>& SimulatedModels();

// Fails with kInvalidArgument for an unknown model or a count outside 0..64.
Result<std::unique_ptr<DeviceBackend>> MakeSimulatedBackend(const SimulatedSpec& spec);
// Every device of every OpenCL platform, through libOpenCL.so.1 loaded at run time.
std::unique_ptr<DeviceBackend> MakeOpenClBackend();

}  // namespace drover::agent
