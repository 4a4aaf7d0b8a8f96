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
  int numa_node = 0;       // the NUMA node it is attached to
};

// How closely two devices are linked, as the server's scheduler counts it
// (v1 Node.links): a larger value is closer.
enum class DeviceLink : int {
  kCrossSocket = 0,  // through the CPU interconnect
  kSameNuma = 1,     // same NUMA node / host bridge
  kPcieSwitch = 2,   // behind one PCIe switch
  kFabric = 3,       // NVLink / NVSwitch, xGMI, Xe Link
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
  // Row-major n x n links among the devices of the last Discover(); empty
  // when the backend does not know (the agent then derives them from the
  // NUMA nodes).
  virtual std::vector<DeviceLink> Links() const { return {}; }
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

// A GPU model the simulator knows: vendor, memory and how a node of them is
// wired.
struct SimulatedModel {
  std::string_view model;
  std::string_view vendor;
  int64_t memory_bytes;
  // SXM / OAM boards: every 8 GPUs share one fabric (NVSwitch, xGMI, Xe
  // Link). Otherwise PCIe cards, in pairs behind one PCIe switch.
  bool fabric = false;
};
// Known models ("H100 80GB", "A100 80GB", "A100 40GB", "L4", "MI300X", ...).
const std::vector<SimulatedModel>& SimulatedModels();

// Simulated topology: GPUs [0, n/2) on NUMA node 0 and the rest on NUMA
// node 1; fabric models join every 8 GPUs in one island, PCIe models put
// pairs (0-1, 2-3, ...) behind one PCIe switch; other pairs are linked
// through their NUMA node or across sockets.
// Fails with kInvalidArgument for an unknown model or a count outside 0..64.
Result<std::unique_ptr<DeviceBackend>> MakeSimulatedBackend(const SimulatedSpec& spec);
// Every device of every OpenCL platform, through libOpenCL.so.1 loaded at run time.
std::unique_ptr<DeviceBackend> MakeOpenClBackend();

}  // namespace drover::agent
