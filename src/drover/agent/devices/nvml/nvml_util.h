#pragma once
// Pure helpers of the nvml backend: they turn what NVML reports into
// GpuDevice / GpuSample terms and touch no library, so tests call them
// directly.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/status.h"

namespace drover::agent::nvml {

// NVML prints bus ids with an 8-digit upper-case domain ("00000000:3B:00.0");
// hwloc and sysfs use "0000:3b:00.0". Accepts "domain:bus:device.function"
// or "bus:device.function" (domain 0) in either case and returns the
// lower-case form with a 4-digit domain (wider only if the domain needs it).
// Fails with kInvalidArgument on anything else (bus > ff, device > 1f,
// function > 7, junk characters).
Result<std::string> NormalizePciBusId(std::string_view bus_id);

// The text of a fixed-size string buffer an NVML call filled: up to the
// first NUL (the buffer need not hold one), surrounding blanks removed.
// Fails with kInvalidArgument when it is empty or holds control characters.
Result<std::string> BufferString(const char* buffer, size_t size);

// CUDA compute capability 9.0 -> "sm_90"; empty when the numbers are absurd.
std::string ArchitectureFor(int major, int minor);

// NVML clock throttle reasons -> ThrottleReason bits. Idle and
// application-clock limits are not slowdowns and are dropped; HW slowdown
// and HW/SW thermal slowdown are thermal, SW power cap and HW power brake
// are power, anything else (sync boost, display clock, unknown bits) other.
uint32_t ThrottleBits(unsigned long long reasons);

// The R535 drivers from 535.43 up to (not including) 535.98 fill a 32-byte
// struct per process in nvmlDeviceGetComputeRunningProcesses_v3 instead of
// the 24-byte nvmlProcessInfo_v2_t that every other driver uses with it; on
// those the backend calls _v2 instead. `driver_version` as
// nvmlSystemGetDriverVersion returns it ("535.54.03").
bool ProcessesV3LayoutIsBroken(std::string_view driver_version);

// What the backend learned about how the devices of one Discover() are wired.
struct LinkFacts {
  int count = 0;
  // Pairs of device indices joined by an active GPU-to-GPU NVLink.
  std::vector<std::pair<int, int>> nvlink_pairs;
  // Per device: has an active NVLink to an NVSwitch.
  std::vector<bool> on_nvswitch;
  // Row-major count x count nvmlGpuTopologyLevel_t values from
  // nvmlDeviceGetTopologyCommonAncestor; -1 where unknown. Empty when the
  // library has no topology call.
  std::vector<int> topology;
  // Per device: NUMA node, -1 where unknown.
  std::vector<int> numa_node;
};

// Row-major count x count matrix: kFabric on the diagonal and between
// devices joined by NVLink or both on NVSwitches (one NVSwitch fabric per
// node: that is how HGX boards are built); otherwise the common ancestor
// (INTERNAL/SINGLE/MULTIPLE -> kPcieSwitch, HOSTBRIDGE/NODE -> kSameNuma,
// SYSTEM -> kCrossSocket). When there is no fabric and the topology of some
// pair is unknown, returns {} (the agent derives links from hwloc instead);
// with a fabric, pairs of unknown topology fall back to the NUMA nodes (same
// known node -> kSameNuma, else kCrossSocket).
std::vector<DeviceLink> BuildLinks(const LinkFacts& facts);

}  // namespace drover::agent::nvml
