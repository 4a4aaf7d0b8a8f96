#include "drover/agent/devices/nvml/nvml_api.h"

#include <initializer_list>

namespace drover::agent::nvml {

namespace {

// Looks up one symbol; null when the library does not export it.
template <typename Fn>
Fn* Optional(runtime::DynamicLibrary& library, const char* symbol) {
  Result<Fn*> found = library.Symbol<Fn>(symbol);
  return found.ok() ? found.value() : nullptr;
}

// The first of `symbols` (newest first) that the library exports, and its
// position in the list and name; null, -1 and "" when none is.
template <typename Fn>
Fn* FirstOf(runtime::DynamicLibrary& library, std::initializer_list<const char*> symbols, int* position = nullptr,
            const char** name = nullptr) {
  int i = 0;
  for (const char* symbol : symbols) {
    if (Fn* fn = Optional<Fn>(library, symbol)) {
      if (position != nullptr) *position = i;
      if (name != nullptr) *name = symbol;
      return fn;
    }
    ++i;
  }
  if (position != nullptr) *position = -1;
  if (name != nullptr) *name = "";
  return nullptr;
}

Status Missing(const runtime::DynamicLibrary& library, const char* symbol) {
  return Unavailable("nvml library '" + library.name() + "' lacks the required symbol '" + symbol + "'");
}

// Resolves a required symbol into `*out` or returns the error naming it.
template <typename Fn>
Status Require(runtime::DynamicLibrary& library, const char* symbol, Fn** out) {
  *out = Optional<Fn>(library, symbol);
  return *out != nullptr ? Status::Ok() : Missing(library, symbol);
}

}  // namespace

Result<NvmlApi> ResolveNvmlApi(runtime::DynamicLibrary& library) {
  NvmlApi api;
  api.init = FirstOf<InitFn>(library, {"nvmlInit_v2", "nvmlInit"}, nullptr, &api.init_name);
  if (api.init == nullptr) return Missing(library, "nvmlInit_v2");
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlShutdown", &api.shutdown));
  api.device_get_count = FirstOf<DeviceGetCountFn>(library, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, nullptr,
                                                   &api.device_get_count_name);
  if (api.device_get_count == nullptr) return Missing(library, "nvmlDeviceGetCount_v2");
  api.device_get_handle_by_index =
      FirstOf<DeviceGetHandleByIndexFn>(library, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"},
                                        nullptr, &api.device_get_handle_by_index_name);
  if (api.device_get_handle_by_index == nullptr) return Missing(library, "nvmlDeviceGetHandleByIndex_v2");
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetName", &api.device_get_name));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetUUID", &api.device_get_uuid));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlSystemGetDriverVersion", &api.system_get_driver_version));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetMemoryInfo", &api.device_get_memory_info));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetUtilizationRates", &api.device_get_utilization_rates));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetTemperature", &api.device_get_temperature));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetPowerUsage", &api.device_get_power_usage));
  DROVER_RETURN_IF_ERROR(Require(library, "nvmlDeviceGetClockInfo", &api.device_get_clock_info));

  // The v3 PCI struct differs from the older one: keep the two apart.
  api.device_get_pci_info_v3 = Optional<DeviceGetPciInfoFn>(library, "nvmlDeviceGetPciInfo_v3");
  if (api.device_get_pci_info_v3 != nullptr) {
    api.pci_info_version = 3;
    api.device_get_pci_info_name = "nvmlDeviceGetPciInfo_v3";
  } else {
    int position = -1;
    api.device_get_pci_info_legacy = FirstOf<DeviceGetPciInfoLegacyFn>(
        library, {"nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"}, &position, &api.device_get_pci_info_name);
    if (api.device_get_pci_info_legacy == nullptr) return Missing(library, "nvmlDeviceGetPciInfo_v3");
    api.pci_info_version = 2 - position;
  }

  api.device_get_cuda_compute_capability =
      Optional<DeviceGetCudaComputeCapabilityFn>(library, "nvmlDeviceGetCudaComputeCapability");
  api.device_get_memory_affinity = Optional<DeviceGetMemoryAffinityFn>(library, "nvmlDeviceGetMemoryAffinity");
  api.device_get_numa_node_id = Optional<DeviceGetUintFn>(library, "nvmlDeviceGetNumaNodeId");
  api.device_get_mig_mode = Optional<DeviceGetMigModeFn>(library, "nvmlDeviceGetMigMode");
  api.device_get_max_mig_device_count = Optional<DeviceGetUintFn>(library, "nvmlDeviceGetMaxMigDeviceCount");
  api.device_get_mig_device_handle_by_index =
      Optional<DeviceGetMigDeviceHandleByIndexFn>(library, "nvmlDeviceGetMigDeviceHandleByIndex");
  api.device_get_gpu_instance_id = Optional<DeviceGetUintFn>(library, "nvmlDeviceGetGpuInstanceId");
  api.device_get_compute_instance_id = Optional<DeviceGetUintFn>(library, "nvmlDeviceGetComputeInstanceId");

  api.device_get_nvlink_state = Optional<DeviceGetNvLinkStateFn>(library, "nvmlDeviceGetNvLinkState");
  api.device_get_nvlink_remote_pci_info_v2 =
      Optional<DeviceGetNvLinkRemotePciInfoFn>(library, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  if (api.device_get_nvlink_remote_pci_info_v2 == nullptr) {
    api.device_get_nvlink_remote_pci_info_legacy =
        Optional<DeviceGetNvLinkRemotePciInfoLegacyFn>(library, "nvmlDeviceGetNvLinkRemotePciInfo");
  }
  api.device_get_nvlink_remote_device_type =
      Optional<DeviceGetNvLinkRemoteDeviceTypeFn>(library, "nvmlDeviceGetNvLinkRemoteDeviceType");
  api.device_get_topology_common_ancestor =
      Optional<DeviceGetTopologyCommonAncestorFn>(library, "nvmlDeviceGetTopologyCommonAncestor");

  api.device_get_enforced_power_limit = Optional<DeviceGetUintFn>(library, "nvmlDeviceGetEnforcedPowerLimit");
  api.device_get_throttle_reasons = FirstOf<DeviceGetUllFn>(
      library, {"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetCurrentClocksEventReasons"});
  api.device_get_total_ecc_errors = Optional<DeviceGetTotalEccErrorsFn>(library, "nvmlDeviceGetTotalEccErrors");
  api.device_get_remapped_rows = Optional<DeviceGetRemappedRowsFn>(library, "nvmlDeviceGetRemappedRows");
  api.device_get_nvlink_error_counter =
      Optional<DeviceGetNvLinkErrorCounterFn>(library, "nvmlDeviceGetNvLinkErrorCounter");
  int position = -1;
  api.device_get_compute_running_processes = FirstOf<DeviceGetComputeRunningProcessesFn>(
      library,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
       "nvmlDeviceGetComputeRunningProcesses"},
      &position, &api.device_get_compute_running_processes_name);
  api.processes_version = position < 0 ? 0 : 3 - position;
  api.device_get_compute_running_processes_v2 =
      Optional<DeviceGetComputeRunningProcessesFn>(library, "nvmlDeviceGetComputeRunningProcesses_v2");

  api.event_set_create = Optional<EventSetCreateFn>(library, "nvmlEventSetCreate");
  api.event_set_free = Optional<EventSetFreeFn>(library, "nvmlEventSetFree");
  api.device_register_events = Optional<DeviceRegisterEventsFn>(library, "nvmlDeviceRegisterEvents");
  api.device_get_supported_event_types = Optional<DeviceGetUllFn>(library, "nvmlDeviceGetSupportedEventTypes");
  api.event_set_wait = FirstOf<EventSetWaitFn>(library, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  if (!api.HasEvents()) {
    // Half an event API is no event API: never create a set we cannot free.
    api.event_set_create = nullptr;
    api.event_set_free = nullptr;
    api.device_register_events = nullptr;
    api.event_set_wait = nullptr;
  }
  return api;
}

std::string NvmlReturnName(nvmlReturn_t rc) {
  static constexpr struct {
    nvmlReturn_t rc;
    const char* name;
  } kNames[] = {
      {NVML_SUCCESS, "NVML_SUCCESS"},
      {NVML_ERROR_UNINITIALIZED, "NVML_ERROR_UNINITIALIZED"},
      {NVML_ERROR_INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT"},
      {NVML_ERROR_NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED"},
      {NVML_ERROR_NO_PERMISSION, "NVML_ERROR_NO_PERMISSION"},
      {NVML_ERROR_ALREADY_INITIALIZED, "NVML_ERROR_ALREADY_INITIALIZED"},
      {NVML_ERROR_NOT_FOUND, "NVML_ERROR_NOT_FOUND"},
      {NVML_ERROR_INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE"},
      {NVML_ERROR_INSUFFICIENT_POWER, "NVML_ERROR_INSUFFICIENT_POWER"},
      {NVML_ERROR_DRIVER_NOT_LOADED, "NVML_ERROR_DRIVER_NOT_LOADED"},
      {NVML_ERROR_TIMEOUT, "NVML_ERROR_TIMEOUT"},
      {NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE"},
      {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML_ERROR_LIBRARY_NOT_FOUND"},
      {NVML_ERROR_FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND"},
      {NVML_ERROR_CORRUPTED_INFOROM, "NVML_ERROR_CORRUPTED_INFOROM"},
      {NVML_ERROR_GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST"},
      {NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED"},
      {NVML_ERROR_OPERATING_SYSTEM, "NVML_ERROR_OPERATING_SYSTEM"},
      {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"},
      {NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE"},
      {NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY"},
      {NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA"},
      {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED"},
      {NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES"},
      {NVML_ERROR_FREQ_NOT_SUPPORTED, "NVML_ERROR_FREQ_NOT_SUPPORTED"},
      {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"},
      {NVML_ERROR_DEPRECATED, "NVML_ERROR_DEPRECATED"},
      {NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY"},
      {NVML_ERROR_GPU_NOT_FOUND, "NVML_ERROR_GPU_NOT_FOUND"},
      {NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN"},
  };
  for (const auto& entry : kNames) {
    if (entry.rc == rc) return std::string(entry.name) + " (" + std::to_string(rc) + ")";
  }
  return "NVML error " + std::to_string(rc);
}

std::string NvmlError(std::string_view call, int device, nvmlReturn_t rc) {
  std::string text(call);
  if (device >= 0) text += " on device " + std::to_string(device);
  return text + ": " + NvmlReturnName(rc);
}

}  // namespace drover::agent::nvml
