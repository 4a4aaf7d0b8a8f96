#pragma once
// The subset of the NVML C ABI (nvml.h, NVML API version 12) that the nvml
// backend calls. NVIDIA's header is not packaged in Debian, so the types,
// constants and struct layouts are declared here, spelled and laid out exactly
// as in nvml.h; the static_asserts at the end pin the layouts that matter.
//
// Enums are passed as `int` / `unsigned int`: a C enum is 4 bytes on every
// Linux ABI NVML ships for, so the calling convention is the same.

#include <cstddef>
#include <cstdint>

namespace drover::agent::nvml {

// Opaque handles: never dereferenced, only passed back to the library.
struct NvmlDeviceSt;
struct NvmlEventSetSt;
using nvmlDevice_t = NvmlDeviceSt*;
using nvmlEventSet_t = NvmlEventSetSt*;

// nvmlReturn_t
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_ALREADY_INITIALIZED = 5;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_POWER = 8;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_IRQ_ISSUE = 11;
constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_CORRUPTED_INFOROM = 14;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
constexpr nvmlReturn_t NVML_ERROR_OPERATING_SYSTEM = 17;
constexpr nvmlReturn_t NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18;
constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
constexpr nvmlReturn_t NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
constexpr nvmlReturn_t NVML_ERROR_FREQ_NOT_SUPPORTED = 24;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_DEPRECATED = 26;
constexpr nvmlReturn_t NVML_ERROR_NOT_READY = 27;
constexpr nvmlReturn_t NVML_ERROR_GPU_NOT_FOUND = 28;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// Buffer sizes (the _V2 name and uuid sizes are the larger, current ones).
constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE_ULL = ~0ull;  // (unsigned long long)-1

// nvmlNvLinkErrorCounter_t
constexpr int NVML_NVLINK_ERROR_DL_REPLAY = 0;
constexpr int NVML_NVLINK_ERROR_DL_RECOVERY = 1;
constexpr int NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;
constexpr int NVML_NVLINK_ERROR_DL_CRC_DATA = 3;
// nvmlEnableState_t
constexpr int NVML_FEATURE_DISABLED = 0;
constexpr int NVML_FEATURE_ENABLED = 1;
// nvmlDeviceGetMigMode
constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
// nvmlTemperatureSensors_t
constexpr int NVML_TEMPERATURE_GPU = 0;
// nvmlClockType_t
constexpr int NVML_CLOCK_GRAPHICS = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_CLOCK_MEM = 2;
// nvmlMemoryErrorType_t
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
// nvmlEccCounterType_t
constexpr int NVML_VOLATILE_ECC = 0;
constexpr int NVML_AGGREGATE_ECC = 1;
// nvmlAffinityScope_t
constexpr unsigned int NVML_AFFINITY_SCOPE_NODE = 0;
// nvmlIntNvLinkDeviceType_t
constexpr int NVML_NVLINK_DEVICE_TYPE_GPU = 0x00;
constexpr int NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01;
constexpr int NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02;
constexpr int NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF;
// nvmlGpuTopologyLevel_t
constexpr int NVML_TOPOLOGY_INTERNAL = 0;
constexpr int NVML_TOPOLOGY_SINGLE = 10;
constexpr int NVML_TOPOLOGY_MULTIPLE = 20;
constexpr int NVML_TOPOLOGY_HOSTBRIDGE = 30;
constexpr int NVML_TOPOLOGY_NODE = 40;
constexpr int NVML_TOPOLOGY_SYSTEM = 50;

// Event types (nvmlDeviceRegisterEvents).
constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x0000000000000001ull;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x0000000000000002ull;
constexpr unsigned long long nvmlEventTypePState = 0x0000000000000004ull;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ull;

// Clock throttle ("clocks event") reasons.
constexpr unsigned long long nvmlClocksThrottleReasonGpuIdle = 0x0000000000000001ull;
constexpr unsigned long long nvmlClocksThrottleReasonApplicationsClocksSetting = 0x0000000000000002ull;
constexpr unsigned long long nvmlClocksThrottleReasonSwPowerCap = 0x0000000000000004ull;
constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008ull;
constexpr unsigned long long nvmlClocksThrottleReasonSyncBoost = 0x0000000000000010ull;
constexpr unsigned long long nvmlClocksThrottleReasonSwThermalSlowdown = 0x0000000000000020ull;
constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x0000000000000040ull;
constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080ull;
constexpr unsigned long long nvmlClocksThrottleReasonDisplayClockSetting = 0x0000000000000100ull;

// nvmlMemory_t (v1).
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlUtilization_t
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2 (the current layout).
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

// The pre-v3 nvmlPciInfo_t, filled by nvmlDeviceGetPciInfo, _v2 and
// nvmlDeviceGetNvLinkRemotePciInfo: a 16-byte busId first, reserved words last.
struct nvmlPciInfoLegacy_t {
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  unsigned int reserved0;
  unsigned int reserved1;
  unsigned int reserved2;
  unsigned int reserved3;
};

// nvmlProcessInfo_v1_t: nvmlDeviceGetComputeRunningProcesses (unversioned).
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};

// nvmlProcessInfo_v2_t (== nvmlProcessInfo_t): _v2 and, except on the R535
// drivers noted in nvml_util.h, _v3 of nvmlDeviceGetComputeRunningProcesses.
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlEventData_t with the MIG fields that nvmlEventSetWait_v2 fills; the
// unversioned nvmlEventSetWait fills only the first three members.
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlPciInfoLegacy_t) == 52);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16);
static_assert(sizeof(nvmlEventData_t) == 32);

// Entry points, one type per signature (nvmlReturn_t DECLDIR f(...)).
using InitFn = nvmlReturn_t();
using ShutdownFn = nvmlReturn_t();
using DeviceGetCountFn = nvmlReturn_t(unsigned int* count);
using DeviceGetHandleByIndexFn = nvmlReturn_t(unsigned int index, nvmlDevice_t* device);
using DeviceGetStringFn = nvmlReturn_t(nvmlDevice_t device, char* buffer, unsigned int length);
using SystemGetDriverVersionFn = nvmlReturn_t(char* version, unsigned int length);
using DeviceGetMemoryInfoFn = nvmlReturn_t(nvmlDevice_t device, nvmlMemory_t* memory);
using DeviceGetPciInfoFn = nvmlReturn_t(nvmlDevice_t device, nvmlPciInfo_t* pci);
using DeviceGetPciInfoLegacyFn = nvmlReturn_t(nvmlDevice_t device, nvmlPciInfoLegacy_t* pci);
using DeviceGetCudaComputeCapabilityFn = nvmlReturn_t(nvmlDevice_t device, int* major, int* minor);
using DeviceGetMemoryAffinityFn = nvmlReturn_t(nvmlDevice_t device, unsigned int node_set_size, unsigned long* node_set,
                                               unsigned int scope);
using DeviceGetUintFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* value);
using DeviceGetMigModeFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* current_mode, unsigned int* pending_mode);
using DeviceGetMigDeviceHandleByIndexFn = nvmlReturn_t(nvmlDevice_t device, unsigned int index,
                                                       nvmlDevice_t* mig_device);
using DeviceGetNvLinkStateFn = nvmlReturn_t(nvmlDevice_t device, unsigned int link, int* is_active);
using DeviceGetNvLinkRemotePciInfoFn = nvmlReturn_t(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci);
using DeviceGetNvLinkRemotePciInfoLegacyFn = nvmlReturn_t(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfoLegacy_t* pci);
using DeviceGetNvLinkRemoteDeviceTypeFn = nvmlReturn_t(nvmlDevice_t device, unsigned int link, int* device_type);
using DeviceGetTopologyCommonAncestorFn = nvmlReturn_t(nvmlDevice_t device1, nvmlDevice_t device2, int* path_info);
using DeviceGetUtilizationRatesFn = nvmlReturn_t(nvmlDevice_t device, nvmlUtilization_t* utilization);
using DeviceGetTemperatureFn = nvmlReturn_t(nvmlDevice_t device, int sensor_type, unsigned int* temp);
using DeviceGetClockInfoFn = nvmlReturn_t(nvmlDevice_t device, int type, unsigned int* clock);
using DeviceGetUllFn = nvmlReturn_t(nvmlDevice_t device, unsigned long long* value);
using DeviceGetTotalEccErrorsFn = nvmlReturn_t(nvmlDevice_t device, int error_type, int counter_type,
                                               unsigned long long* ecc_counts);
// Ampere and later; NOT_SUPPORTED before.
using DeviceGetRemappedRowsFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* corr_rows, unsigned int* unc_rows,
                                             unsigned int* is_pending, unsigned int* failure_occurred);
using DeviceGetNvLinkErrorCounterFn = nvmlReturn_t(nvmlDevice_t device, unsigned int link, int counter,
                                                   unsigned long long* value);
// The process array is typed per version (v1 or v2 layout) by the caller.
using DeviceGetComputeRunningProcessesFn = nvmlReturn_t(nvmlDevice_t device, unsigned int* info_count, void* infos);
using EventSetCreateFn = nvmlReturn_t(nvmlEventSet_t* set);
using EventSetFreeFn = nvmlReturn_t(nvmlEventSet_t set);
using DeviceRegisterEventsFn = nvmlReturn_t(nvmlDevice_t device, unsigned long long event_types, nvmlEventSet_t set);
using EventSetWaitFn = nvmlReturn_t(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms);

}  // namespace drover::agent::nvml
