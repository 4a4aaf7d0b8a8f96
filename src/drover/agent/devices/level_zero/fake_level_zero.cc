// fake_level_zero: the Level Zero entry points the level-zero backend calls,
// answering from scripted state (see fake_level_zero.h). Tests only.

#include "drover/agent/devices/level_zero/fake_level_zero.h"

#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

extern "C" {
// Spec 1.5, newer than Debian's headers.
ZE_APIEXPORT ze_result_t zesInit(uint32_t flags);
ZE_APIEXPORT ze_result_t zesDriverGet(uint32_t* count, zes_driver_handle_t* drivers);
ZE_APIEXPORT ze_result_t zesDeviceGet(zes_driver_handle_t driver, uint32_t* count, zes_device_handle_t* devices);
}

namespace {

// A component handle points at one of these.
struct Component {
  uint32_t device;
  uint32_t index;
};

void Describe(uint32_t i, FakeZeDevice* d);

struct State {
  State() {
    for (uint32_t i = 0; i < kFakeZeMaxDevices; ++i) Describe(i, &devices[i]);
  }
  uint32_t reported_devices = 2;
  FakeZeDevice devices[kFakeZeMaxDevices];
  Component slots[kFakeZeMaxDevices];                        // device handles
  Component components[kFakeZeMaxDevices][kFakeZeMaxPorts];  // every other handle
  std::map<std::string, std::map<int, int>> failures;        // function -> device -> result
  std::map<std::string, int> calls;
  bool zes_initialized = false;
  bool ze_initialized = false;
  std::string sysman_env;
  int driver = 0;  // its address is the one driver handle
};

void Describe(uint32_t i, FakeZeDevice* d) {
  *d = FakeZeDevice{};
  std::snprintf(d->name, sizeof(d->name), "Intel(R) Data Center GPU Max 1550");
  for (uint8_t b = 0; b < 16; ++b) d->uuid[b] = static_cast<uint8_t>(0x10 * (i + 1) + b);
  d->vendor_id = 0x8086;
  d->device_id = 0x0bd5;
  std::snprintf(d->driver_version, sizeof(d->driver_version), "1.3.26918");
  d->pci_domain = 0;
  d->pci_bus = 0x3a + 0x60 * i;
  d->memory_physical = uint64_t{64} << 30;
  d->memory_size = uint64_t{64} << 30;
  d->memory_free = uint64_t{64} << 30;
  d->core_memory_total = uint64_t{48} << 30;
  d->timestamp_us = 1000000;
  d->temperature_c = 40;
  d->power_limit_enabled = 1;
  d->power_limit_mw = 600000;
  d->gpu_mhz = 1600;
  d->memory_mhz = 3200;
  d->fabric_id = 100 + i;
}

State& S() {
  static auto* const kState = new State();
  return *kState;
}

// The device of a handle, or -1 when the handle is not one of ours.
int DeviceOf(const void* handle) {
  State& s = S();
  for (uint32_t i = 0; i < kFakeZeMaxDevices; ++i) {
    if (handle == &s.slots[i]) return static_cast<int>(i);
  }
  auto* first = &s.components[0][0];
  auto* last = first + kFakeZeMaxDevices * kFakeZeMaxPorts;
  auto* c = static_cast<const Component*>(handle);
  if (c >= first && c < last) return static_cast<int>(c->device);
  return -1;
}

uint32_t IndexOf(const void* handle) { return static_cast<const Component*>(handle)->index; }

// Counts the call; a scripted failure for `device` (or every device) wins.
ze_result_t Enter(const char* function, int device) {
  State& s = S();
  ++s.calls[function];
  auto it = s.failures.find(function);
  if (it == s.failures.end()) return ZE_RESULT_SUCCESS;
  auto one = it->second.find(device);
  if (one != it->second.end()) return static_cast<ze_result_t>(one->second);
  auto every = it->second.find(-1);
  if (every != it->second.end()) return static_cast<ze_result_t>(every->second);
  return ZE_RESULT_SUCCESS;
}

// Component enumeration of `n` per device, handles from components[device].
template <typename Handle>
ze_result_t Components(const char* function, const void* device_handle, uint32_t n, uint32_t* count, Handle* out) {
  int device = DeviceOf(device_handle);
  if (device < 0) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  ze_result_t r = Enter(function, device);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (*count == 0 || out == nullptr) {
    *count = n;
    return ZE_RESULT_SUCCESS;
  }
  *count = std::min(*count, n);
  for (uint32_t i = 0; i < *count; ++i) {
    Component& c = S().components[device][i];
    c = {static_cast<uint32_t>(device), i};
    out[i] = reinterpret_cast<Handle>(&c);
  }
  return ZE_RESULT_SUCCESS;
}

FakeZeDevice& Dev(const void* handle) { return S().devices[DeviceOf(handle)]; }

#define FAKE_ENTER(function, handle)                                      \
  do {                                                                    \
    if (DeviceOf(handle) < 0) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE; \
    ze_result_t fake_result_ = Enter(function, DeviceOf(handle));         \
    if (fake_result_ != ZE_RESULT_SUCCESS) return fake_result_;           \
  } while (0)

ze_result_t Devices(uint32_t* count, ze_device_handle_t* out) {
  State& s = S();
  if (*count == 0 || out == nullptr) {
    *count = s.reported_devices;
    return ZE_RESULT_SUCCESS;
  }
  *count = std::min({*count, s.reported_devices, kFakeZeMaxDevices});
  for (uint32_t i = 0; i < *count; ++i) out[i] = reinterpret_cast<ze_device_handle_t>(&s.slots[i]);
  return ZE_RESULT_SUCCESS;
}

ze_result_t Drivers(uint32_t* count, ze_driver_handle_t* out) {
  if (*count == 0 || out == nullptr) {
    *count = 1;
    return ZE_RESULT_SUCCESS;
  }
  *count = 1;
  out[0] = reinterpret_cast<ze_driver_handle_t>(&S().driver);
  return ZE_RESULT_SUCCESS;
}

}  // namespace

// Control side.
extern "C" {

ZE_APIEXPORT void fake_ze_reset() {
  State& s = S();
  s.failures.clear();
  s.calls.clear();
  s.zes_initialized = s.ze_initialized = false;
  s.sysman_env.clear();
  s.reported_devices = 2;
  for (uint32_t i = 0; i < kFakeZeMaxDevices; ++i) Describe(i, &s.devices[i]);
}

ZE_APIEXPORT void fake_ze_set_devices(uint32_t count) { S().reported_devices = count; }

ZE_APIEXPORT FakeZeDevice* fake_ze_device(uint32_t index) {
  return index < kFakeZeMaxDevices ? &S().devices[index] : nullptr;
}

ZE_APIEXPORT void fake_ze_fail(const char* function, int device, int result) {
  if (result == 0) {
    S().failures[function].erase(device);
  } else {
    S().failures[function][device] = result;
  }
}

ZE_APIEXPORT void fake_ze_advance(uint32_t device, uint64_t elapsed_us, uint64_t active_us, uint64_t energy_uj) {
  FakeZeDevice& d = S().devices[device];
  d.timestamp_us += elapsed_us;
  d.active_us += active_us;
  d.energy_uj += energy_uj;
}

ZE_APIEXPORT int fake_ze_calls(const char* function) {
  auto it = S().calls.find(function);
  return it == S().calls.end() ? 0 : it->second;
}

ZE_APIEXPORT const char* fake_ze_sysman_env_at_init() { return S().sysman_env.c_str(); }

}  // extern "C"

// Initialization and enumeration.

#ifndef FAKE_ZE_NO_ZES_INIT
ze_result_t zesInit(uint32_t) {
  ze_result_t r = Enter("zesInit", -1);
  if (r == ZE_RESULT_SUCCESS) S().zes_initialized = true;
  return r;
}

ze_result_t zesDriverGet(uint32_t* count, zes_driver_handle_t* out) {
  ze_result_t r = Enter("zesDriverGet", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (!S().zes_initialized) return ZE_RESULT_ERROR_UNINITIALIZED;
  return Drivers(count, out);
}

ze_result_t zesDeviceGet(zes_driver_handle_t, uint32_t* count, zes_device_handle_t* out) {
  ze_result_t r = Enter("zesDeviceGet", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  return Devices(count, out);
}
#endif

ze_result_t zeInit(ze_init_flags_t flags) {
  ze_result_t r = Enter("zeInit", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (flags != ZE_INIT_FLAG_GPU_ONLY) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  const char* env = std::getenv("ZES_ENABLE_SYSMAN");
  S().sysman_env = env != nullptr ? env : "";
  S().ze_initialized = true;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zeDriverGet(uint32_t* count, ze_driver_handle_t* out) {
  ze_result_t r = Enter("zeDriverGet", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (!S().ze_initialized) return ZE_RESULT_ERROR_UNINITIALIZED;
  return Drivers(count, out);
}

ze_result_t zeDeviceGet(ze_driver_handle_t, uint32_t* count, ze_device_handle_t* out) {
  ze_result_t r = Enter("zeDeviceGet", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  return Devices(count, out);
}

ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t h, uint32_t* count, ze_device_memory_properties_t* out) {
  FAKE_ENTER("zeDeviceGetMemoryProperties", h);
  if (*count == 0 || out == nullptr) {
    *count = 1;
    return ZE_RESULT_SUCCESS;
  }
  *count = 1;
  out[0].totalSize = Dev(h).core_memory_total;
  return ZE_RESULT_SUCCESS;
}

// Device.

#ifndef FAKE_ZE_NO_DEVICE_PROPERTIES
ze_result_t zesDeviceGetProperties(zes_device_handle_t h, zes_device_properties_t* p) {
  FAKE_ENTER("zesDeviceGetProperties", h);
  const FakeZeDevice& d = Dev(h);
  if (p->stype != ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  p->core.type = ZE_DEVICE_TYPE_GPU;
  p->core.vendorId = d.vendor_id;
  p->core.deviceId = d.device_id;
  std::memcpy(p->core.uuid.id, d.uuid, sizeof(d.uuid));
  std::memcpy(p->core.name, d.name, sizeof(p->core.name));
  std::memcpy(p->driverVersion, d.driver_version, sizeof(p->driverVersion));
  p->numSubdevices = 2;
  return ZE_RESULT_SUCCESS;
}
#endif

ze_result_t zesDeviceGetState(zes_device_handle_t h, zes_device_state_t* state) {
  FAKE_ENTER("zesDeviceGetState", h);
  state->reset = Dev(h).reset_reasons;
  state->repaired = ZES_REPAIR_STATUS_NOT_PERFORMED;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDevicePciGetProperties(zes_device_handle_t h, zes_pci_properties_t* p) {
  FAKE_ENTER("zesDevicePciGetProperties", h);
  const FakeZeDevice& d = Dev(h);
  p->address = {d.pci_domain, d.pci_bus, d.pci_device, d.pci_function};
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDeviceProcessesGetState(zes_device_handle_t h, uint32_t* count, zes_process_state_t* out) {
  FAKE_ENTER("zesDeviceProcessesGetState", h);
  const FakeZeDevice& d = Dev(h);
  const uint32_t n = std::min(d.process_count, kFakeZeMaxProcesses);
  if (*count == 0 || out == nullptr) {
    *count = n;
    return ZE_RESULT_SUCCESS;
  }
  if (*count < n) return ZE_RESULT_ERROR_INVALID_SIZE;
  *count = n;
  for (uint32_t i = 0; i < n; ++i) {
    out[i].processId = d.pids[i];
    out[i].memSize = d.process_memory[i];
  }
  return ZE_RESULT_SUCCESS;
}

// Memory: [0] SYSTEM, [1] DEVICE.

ze_result_t zesDeviceEnumMemoryModules(zes_device_handle_t h, uint32_t* count, zes_mem_handle_t* out) {
  return Components("zesDeviceEnumMemoryModules", h, 2, count, out);
}

ze_result_t zesMemoryGetProperties(zes_mem_handle_t h, zes_mem_properties_t* p) {
  FAKE_ENTER("zesMemoryGetProperties", h);
  const bool device = IndexOf(h) == 1;
  p->location = device ? ZES_MEM_LOC_DEVICE : ZES_MEM_LOC_SYSTEM;
  p->physicalSize = device ? Dev(h).memory_physical : uint64_t{512} << 30;
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesMemoryGetState(zes_mem_handle_t h, zes_mem_state_t* state) {
  FAKE_ENTER("zesMemoryGetState", h);
  if (IndexOf(h) != 1) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // never asked for system memory
  state->size = Dev(h).memory_size;
  state->free = Dev(h).memory_free;
  return ZE_RESULT_SUCCESS;
}

// Engines: [0] MEDIA_ALL (never busy), [1] ALL.

ze_result_t zesDeviceEnumEngineGroups(zes_device_handle_t h, uint32_t* count, zes_engine_handle_t* out) {
  return Components("zesDeviceEnumEngineGroups", h, 2, count, out);
}

ze_result_t zesEngineGetProperties(zes_engine_handle_t h, zes_engine_properties_t* p) {
  FAKE_ENTER("zesEngineGetProperties", h);
  p->type = IndexOf(h) == 1 ? ZES_ENGINE_GROUP_ALL : ZES_ENGINE_GROUP_MEDIA_ALL;
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesEngineGetActivity(zes_engine_handle_t h, zes_engine_stats_t* stats) {
  FAKE_ENTER("zesEngineGetActivity", h);
  stats->activeTime = IndexOf(h) == 1 ? Dev(h).active_us : 0;
  stats->timestamp = Dev(h).timestamp_us;
  return ZE_RESULT_SUCCESS;
}

// Temperature: [0] MEMORY, [1] GPU.

ze_result_t zesDeviceEnumTemperatureSensors(zes_device_handle_t h, uint32_t* count, zes_temp_handle_t* out) {
  return Components("zesDeviceEnumTemperatureSensors", h, 2, count, out);
}

ze_result_t zesTemperatureGetProperties(zes_temp_handle_t h, zes_temp_properties_t* p) {
  FAKE_ENTER("zesTemperatureGetProperties", h);
  p->type = IndexOf(h) == 1 ? ZES_TEMP_SENSORS_GPU : ZES_TEMP_SENSORS_MEMORY;
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesTemperatureGetState(zes_temp_handle_t h, double* celsius) {
  FAKE_ENTER("zesTemperatureGetState", h);
  *celsius = Dev(h).temperature_c - (IndexOf(h) == 1 ? 0 : 20);
  return ZE_RESULT_SUCCESS;
}

// Power: one device-level domain.

ze_result_t zesDeviceEnumPowerDomains(zes_device_handle_t h, uint32_t* count, zes_pwr_handle_t* out) {
  return Components("zesDeviceEnumPowerDomains", h, 1, count, out);
}

ze_result_t zesPowerGetProperties(zes_pwr_handle_t h, zes_power_properties_t* p) {
  FAKE_ENTER("zesPowerGetProperties", h);
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesPowerGetEnergyCounter(zes_pwr_handle_t h, zes_power_energy_counter_t* energy) {
  FAKE_ENTER("zesPowerGetEnergyCounter", h);
  energy->energy = Dev(h).energy_uj;
  energy->timestamp = Dev(h).timestamp_us;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesPowerGetLimits(zes_pwr_handle_t h, zes_power_sustained_limit_t* sustained,
                              zes_power_burst_limit_t* burst, zes_power_peak_limit_t* peak) {
  FAKE_ENTER("zesPowerGetLimits", h);
  if (sustained != nullptr) {
    sustained->enabled = Dev(h).power_limit_enabled;
    sustained->power = Dev(h).power_limit_mw;
  }
  if (burst != nullptr) *burst = {};
  if (peak != nullptr) *peak = {};
  return ZE_RESULT_SUCCESS;
}

// Frequency: [0] GPU, [1] MEMORY.

ze_result_t zesDeviceEnumFrequencyDomains(zes_device_handle_t h, uint32_t* count, zes_freq_handle_t* out) {
  return Components("zesDeviceEnumFrequencyDomains", h, 2, count, out);
}

ze_result_t zesFrequencyGetProperties(zes_freq_handle_t h, zes_freq_properties_t* p) {
  FAKE_ENTER("zesFrequencyGetProperties", h);
  p->type = IndexOf(h) == 0 ? ZES_FREQ_DOMAIN_GPU : ZES_FREQ_DOMAIN_MEMORY;
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesFrequencyGetState(zes_freq_handle_t h, zes_freq_state_t* state) {
  FAKE_ENTER("zesFrequencyGetState", h);
  const bool gpu = IndexOf(h) == 0;
  state->actual = gpu ? Dev(h).gpu_mhz : Dev(h).memory_mhz;
  state->throttleReasons = gpu ? Dev(h).throttle_reasons : 0;
  return ZE_RESULT_SUCCESS;
}

// RAS: [0] CORRECTABLE, [1] UNCORRECTABLE; counts split over two categories.

ze_result_t zesDeviceEnumRasErrorSets(zes_device_handle_t h, uint32_t* count, zes_ras_handle_t* out) {
  return Components("zesDeviceEnumRasErrorSets", h, 2, count, out);
}

ze_result_t zesRasGetProperties(zes_ras_handle_t h, zes_ras_properties_t* p) {
  FAKE_ENTER("zesRasGetProperties", h);
  p->type = IndexOf(h) == 0 ? ZES_RAS_ERROR_TYPE_CORRECTABLE : ZES_RAS_ERROR_TYPE_UNCORRECTABLE;
  p->onSubdevice = 0;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesRasGetState(zes_ras_handle_t h, ze_bool_t clear, zes_ras_state_t* state) {
  FAKE_ENTER("zesRasGetState", h);
  if (clear != 0) return ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS;  // the backend must never clear
  uint64_t total = IndexOf(h) == 0 ? Dev(h).ras_correctable : Dev(h).ras_uncorrectable;
  std::memset(state->category, 0, sizeof(state->category));
  state->category[0] = total / 2;
  state->category[1] = total - total / 2;
  return ZE_RESULT_SUCCESS;
}

// Fabric.

ze_result_t zesDeviceEnumFabricPorts(zes_device_handle_t h, uint32_t* count, zes_fabric_port_handle_t* out) {
  if (DeviceOf(h) < 0) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return Components("zesDeviceEnumFabricPorts", h, std::min(Dev(h).port_count, kFakeZeMaxPorts), count, out);
}

ze_result_t zesFabricPortGetProperties(zes_fabric_port_handle_t h, zes_fabric_port_properties_t* p) {
  FAKE_ENTER("zesFabricPortGetProperties", h);
  p->portId = {Dev(h).fabric_id, 0, static_cast<uint8_t>(IndexOf(h))};
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesFabricPortGetState(zes_fabric_port_handle_t h, zes_fabric_port_state_t* state) {
  FAKE_ENTER("zesFabricPortGetState", h);
  state->status = static_cast<zes_fabric_port_status_t>(Dev(h).port_status[IndexOf(h)]);
  state->remotePortId = {Dev(h).port_remote[IndexOf(h)], 0, 0};
  return ZE_RESULT_SUCCESS;
}

// Events.

ze_result_t zesDeviceEventRegister(zes_device_handle_t h, zes_event_type_flags_t events) {
  FAKE_ENTER("zesDeviceEventRegister", h);
  Dev(h).registered_events = events;
  return ZE_RESULT_SUCCESS;
}

ze_result_t zesDriverEventListen(ze_driver_handle_t driver, uint32_t timeout, uint32_t count,
                                 zes_device_handle_t* devices, uint32_t* with_events, zes_event_type_flags_t* events) {
  ze_result_t r = Enter("zesDriverEventListen", -1);
  if (r != ZE_RESULT_SUCCESS) return r;
  if (driver != reinterpret_cast<ze_driver_handle_t>(&S().driver)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (timeout != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // the backend must never block
  *with_events = 0;
  for (uint32_t k = 0; k < count; ++k) {
    if (DeviceOf(devices[k]) < 0) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    FakeZeDevice& d = Dev(devices[k]);
    events[k] = d.pending_events & d.registered_events;
    d.pending_events = 0;
    if (events[k] != 0) ++*with_events;
  }
  return ZE_RESULT_SUCCESS;
}
