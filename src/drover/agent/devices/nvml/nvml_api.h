#pragma once
// NvmlApi: the typed entry points of one loaded NVML library, resolved once.
//
// Required entry points (present in every NVML since the R3xx drivers) make
// Resolve() fail, naming the symbol. Optional ones stay null when missing and
// the feature they serve is simply unknown. Versioned entry points are looked
// up newest first; the `*_version` fields say which one was found, because
// the struct layouts differ between versions.
//
// A plain struct of function pointers: copyable, valid as long as the
// DynamicLibrary it was resolved from stays open.

#include <string>
#include <string_view>

#include "drover/agent/devices/nvml/nvml_abi.h"
#include "drover/common/status.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent::nvml {

struct NvmlApi {
  // Required. The *_name fields hold the symbol found, for error messages.
  InitFn* init = nullptr;  // nvmlInit_v2, else nvmlInit
  const char* init_name = "";
  ShutdownFn* shutdown = nullptr;
  DeviceGetCountFn* device_get_count = nullptr;  // _v2, else unversioned
  const char* device_get_count_name = "";
  DeviceGetHandleByIndexFn* device_get_handle_by_index = nullptr;  // _v2, else unversioned
  const char* device_get_handle_by_index_name = "";
  DeviceGetStringFn* device_get_name = nullptr;
  DeviceGetStringFn* device_get_uuid = nullptr;
  SystemGetDriverVersionFn* system_get_driver_version = nullptr;
  DeviceGetMemoryInfoFn* device_get_memory_info = nullptr;
  DeviceGetUtilizationRatesFn* device_get_utilization_rates = nullptr;
  DeviceGetTemperatureFn* device_get_temperature = nullptr;
  DeviceGetUintFn* device_get_power_usage = nullptr;
  DeviceGetClockInfoFn* device_get_clock_info = nullptr;
  // PCI info: exactly one of the two is set. pci_info_version is 3, 2 or 1.
  DeviceGetPciInfoFn* device_get_pci_info_v3 = nullptr;
  DeviceGetPciInfoLegacyFn* device_get_pci_info_legacy = nullptr;
  int pci_info_version = 0;
  const char* device_get_pci_info_name = "";

  // Optional: discovery.
  DeviceGetCudaComputeCapabilityFn* device_get_cuda_compute_capability = nullptr;
  DeviceGetMemoryAffinityFn* device_get_memory_affinity = nullptr;
  DeviceGetUintFn* device_get_numa_node_id = nullptr;
  DeviceGetMigModeFn* device_get_mig_mode = nullptr;
  DeviceGetUintFn* device_get_max_mig_device_count = nullptr;
  DeviceGetMigDeviceHandleByIndexFn* device_get_mig_device_handle_by_index = nullptr;
  DeviceGetUintFn* device_get_gpu_instance_id = nullptr;
  DeviceGetUintFn* device_get_compute_instance_id = nullptr;

  // Optional: links. At most one of the two remote PCI entry points is set.
  DeviceGetNvLinkStateFn* device_get_nvlink_state = nullptr;
  DeviceGetNvLinkRemotePciInfoFn* device_get_nvlink_remote_pci_info_v2 = nullptr;
  DeviceGetNvLinkRemotePciInfoLegacyFn* device_get_nvlink_remote_pci_info_legacy = nullptr;
  DeviceGetNvLinkRemoteDeviceTypeFn* device_get_nvlink_remote_device_type = nullptr;
  DeviceGetTopologyCommonAncestorFn* device_get_topology_common_ancestor = nullptr;

  // Optional: telemetry.
  DeviceGetUintFn* device_get_enforced_power_limit = nullptr;
  // nvmlDeviceGetCurrentClocksThrottleReasons, else its newer name
  // nvmlDeviceGetCurrentClocksEventReasons (same values).
  DeviceGetUllFn* device_get_throttle_reasons = nullptr;
  DeviceGetTotalEccErrorsFn* device_get_total_ecc_errors = nullptr;
  DeviceGetRemappedRowsFn* device_get_remapped_rows = nullptr;
  // Read over the links nvmlDeviceGetNvLinkState says are active.
  DeviceGetNvLinkErrorCounterFn* device_get_nvlink_error_counter = nullptr;
  // _v3, _v2 or unversioned; processes_version says which (3, 2 or 1): v1
  // fills nvmlProcessInfo_v1_t, v2 and v3 fill nvmlProcessInfo_v2_t.
  DeviceGetComputeRunningProcessesFn* device_get_compute_running_processes = nullptr;
  int processes_version = 0;
  const char* device_get_compute_running_processes_name = "";
  // The _v2 entry point, kept to step down from _v3 on drivers whose _v3
  // uses another struct (see ProcessesV3LayoutIsBroken).
  DeviceGetComputeRunningProcessesFn* device_get_compute_running_processes_v2 = nullptr;

  // Optional: events. Either all of create/free/register/wait or none.
  EventSetCreateFn* event_set_create = nullptr;
  EventSetFreeFn* event_set_free = nullptr;
  DeviceRegisterEventsFn* device_register_events = nullptr;
  DeviceGetUllFn* device_get_supported_event_types = nullptr;
  EventSetWaitFn* event_set_wait = nullptr;  // _v2, else unversioned

  bool HasEvents() const {
    return event_set_create != nullptr && event_set_free != nullptr && device_register_events != nullptr &&
           event_set_wait != nullptr;
  }
};

// Resolves every entry point above from `library`. Fails with kUnavailable
// naming the first required symbol that is missing.
Result<NvmlApi> ResolveNvmlApi(runtime::DynamicLibrary& library);

// "NVML_ERROR_GPU_IS_LOST (15)"; unknown codes read "NVML error 1234".
std::string NvmlReturnName(nvmlReturn_t rc);

// "nvmlDeviceGetPowerUsage on device 3: NVML_ERROR_GPU_IS_LOST (15)";
// device < 0 leaves out the device.
std::string NvmlError(std::string_view call, int device, nvmlReturn_t rc);

// The device cannot be queried any more: fallen off the bus or in need of a
// reset. Either way it cannot take work until someone intervenes.
inline bool IsDeviceLost(nvmlReturn_t rc) { return rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_RESET_REQUIRED; }

}  // namespace drover::agent::nvml
