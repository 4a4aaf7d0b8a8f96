#pragma once
// Reads of single ROCm SMI values for the rocm-smi backend, each with its
// unit conversion and its sanity limits. A value the library does not
// support (RSMI_STATUS_NOT_SUPPORTED), fails to read or reports as garbage
// stays unknown (-1 / NaN / empty): telemetry is best effort, and whether
// the device answers at all is decided by the backend's own probe.
//
// Internal to the rocm_smi backend folder. Stateless; not thread-safe only
// in so far as the library's calls are not.

#include <cstdint>
#include <string>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/rocm_smi/rocm_smi_api.h"
#include "drover/common/quantity.h"

namespace drover::agent::rocm_smi {

// Sanity limits on what a (possibly broken) library reports: far above any
// real device, low enough that garbage cannot reach the scheduler or make
// us allocate without bound.
inline constexpr uint32_t kMaxDevices = 256;  // 8 MI300X in CPX mode are 64
inline constexpr int64_t kMaxDeviceMemoryBytes = 16 * kTiB;
inline constexpr uint32_t kMaxNumaNode = 1023;
inline constexpr uint32_t kMaxProcesses = 16384;

// "0000:03:00.0" from a BDFID, which rsmi_dev_pci_id_get encodes as
//   (domain << 32) | (bus << 8) | (device << 3) | function
// with bits 31..16 reserved (newer ROCm puts a partition id there; ignored).
std::string FormatPciBusId(uint64_t bdfid);

// A string the library writes into a caller buffer, e.g.
//   ReadString([&](char* buf, uint32_t len) { return api.rsmi_dev_name_get(i, buf, len); })
// Trimmed of white space, other control characters replaced by '?'; "" when the call fails
// (a truncated value, RSMI_STATUS_INSUFFICIENT_SIZE, is kept).
template <typename Call>
std::string ReadString(Call call);

// The stable identity of a device: "amd-" + 16 hex digits of its unique id
// (the chip's serial, as ROCR_VISIBLE_DEVICES' "GPU-<hex>" uses it), else
// "amd-sn-" + its board serial number (lower-case letters and digits only),
// else "amd-" + FNV-1a of its PCI address, else of `fallback_key`.
std::string DeviceUuid(const RocmSmiApi& api, uint32_t device, const std::string& pci_bus_id,
                       const std::string& fallback_key);

// The NUMA node of the device: rsmi_topo_numa_affinity_get, with -1 (no
// affinity, single-node machines) and absurd values read as node 0.
int NumaNode(const RocmSmiApi& api, uint32_t device);

// Temperature (edge sensor, else junction), from millidegrees C; sets
// kThrottleThermal when it reached that sensor's RSMI_TEMP_CRITICAL.
void ReadTemperature(const RocmSmiApi& api, uint32_t device, GpuSample& sample);
// Average power and power cap, from microwatts.
void ReadPower(const RocmSmiApi& api, uint32_t device, GpuSample& sample);
// The current system (shader) and memory clock levels, from Hz.
void ReadClocks(const RocmSmiApi& api, uint32_t device, GpuSample& sample);
// Correctable / uncorrectable ECC errors summed over every GPU block that
// counts them; unknown when no block does.
void ReadEcc(const RocmSmiApi& api, uint32_t device, GpuSample& sample);
// The compute processes on `device` and their VRAM. `device_count` is the
// number of devices discovered: without rsmi_compute_process_gpus_get a
// process can only be placed when there is a single device.
void ReadProcesses(const RocmSmiApi& api, uint32_t device, uint32_t device_count, GpuSample& sample);

// ---------------------------------------------------------------------------

namespace internal {
std::string CleanString(const char* buffer, size_t capacity);
}  // namespace internal

template <typename Call>
std::string ReadString(Call call) {
  constexpr uint32_t kCapacity = 256;
  char buffer[kCapacity + 1] = {};
  rsmi_status_t status = call(buffer, kCapacity);
  if (status != RSMI_STATUS_SUCCESS && status != RSMI_STATUS_INSUFFICIENT_SIZE) return "";
  return internal::CleanString(buffer, kCapacity);
}

}  // namespace drover::agent::rocm_smi
