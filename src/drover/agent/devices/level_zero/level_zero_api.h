#pragma once
// The part of the Level Zero API (core and Sysman) the level-zero backend
// calls, resolved by dlsym from the loader (libze_loader.so.1) at run time:
// nothing links the loader, so the agent runs where it is absent. Types and
// constants come from Debian's headers (libze-dev, spec 1.4); the pointer
// types are decltype(&zesXxx) so that a mismatch with the header fails the
// build. zesInit, zesDriverGet and zesDeviceGet are spec 1.5, newer than the
// headers, so their types are spelled here.
//
// Internal to the backend; not thread-safe beyond what the loader promises.

#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "drover/common/status.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent::level_zero {

// Spec 1.5 (zes_init_flags_t is a uint32_t bit field; 0 is "default").
using ZesInitFn = ze_result_t(uint32_t flags);
using ZesDriverGetFn = ze_result_t(uint32_t* count, zes_driver_handle_t* drivers);
using ZesDeviceGetFn = ze_result_t(zes_driver_handle_t driver, uint32_t* count, zes_device_handle_t* devices);

// One typed pointer per entry point. Required ones are non-null after
// LoadApi(); the others are null when the loader lacks them, and whatever
// they read is then unknown.
struct Api {
  // Initialization: the zes path (spec 1.5+) or the ze path (every loader).
  ZesInitFn* zesInit = nullptr;
  ZesDriverGetFn* zesDriverGet = nullptr;
  ZesDeviceGetFn* zesDeviceGet = nullptr;
  decltype(&::zeInit) zeInit = nullptr;
  decltype(&::zeDriverGet) zeDriverGet = nullptr;
  decltype(&::zeDeviceGet) zeDeviceGet = nullptr;
  decltype(&::zeDeviceGetMemoryProperties) zeDeviceGetMemoryProperties = nullptr;
  // Discovery (zesDeviceGetProperties is required).
  decltype(&::zesDeviceGetProperties) zesDeviceGetProperties = nullptr;
  decltype(&::zesDeviceGetState) zesDeviceGetState = nullptr;
  decltype(&::zesDevicePciGetProperties) zesDevicePciGetProperties = nullptr;
  decltype(&::zesDeviceEnumMemoryModules) zesDeviceEnumMemoryModules = nullptr;
  decltype(&::zesMemoryGetProperties) zesMemoryGetProperties = nullptr;
  decltype(&::zesMemoryGetState) zesMemoryGetState = nullptr;
  // Telemetry.
  decltype(&::zesDeviceEnumEngineGroups) zesDeviceEnumEngineGroups = nullptr;
  decltype(&::zesEngineGetProperties) zesEngineGetProperties = nullptr;
  decltype(&::zesEngineGetActivity) zesEngineGetActivity = nullptr;
  decltype(&::zesDeviceEnumTemperatureSensors) zesDeviceEnumTemperatureSensors = nullptr;
  decltype(&::zesTemperatureGetProperties) zesTemperatureGetProperties = nullptr;
  decltype(&::zesTemperatureGetState) zesTemperatureGetState = nullptr;
  decltype(&::zesDeviceEnumPowerDomains) zesDeviceEnumPowerDomains = nullptr;
  decltype(&::zesPowerGetProperties) zesPowerGetProperties = nullptr;
  decltype(&::zesPowerGetEnergyCounter) zesPowerGetEnergyCounter = nullptr;
  decltype(&::zesPowerGetLimits) zesPowerGetLimits = nullptr;
  decltype(&::zesDeviceEnumFrequencyDomains) zesDeviceEnumFrequencyDomains = nullptr;
  decltype(&::zesFrequencyGetProperties) zesFrequencyGetProperties = nullptr;
  decltype(&::zesFrequencyGetState) zesFrequencyGetState = nullptr;
  decltype(&::zesDeviceEnumRasErrorSets) zesDeviceEnumRasErrorSets = nullptr;
  decltype(&::zesRasGetProperties) zesRasGetProperties = nullptr;
  decltype(&::zesRasGetState) zesRasGetState = nullptr;
  decltype(&::zesDeviceProcessesGetState) zesDeviceProcessesGetState = nullptr;
  // Links.
  decltype(&::zesDeviceEnumFabricPorts) zesDeviceEnumFabricPorts = nullptr;
  decltype(&::zesFabricPortGetProperties) zesFabricPortGetProperties = nullptr;
  decltype(&::zesFabricPortGetState) zesFabricPortGetState = nullptr;
  // Events.
  decltype(&::zesDeviceEventRegister) zesDeviceEventRegister = nullptr;
  decltype(&::zesDriverEventListen) zesDriverEventListen = nullptr;

  // True when zesInit and its enumeration functions are all present: the
  // backend then uses them; otherwise ZES_ENABLE_SYSMAN=1 and zeInit.
  bool HasZesInit() const { return zesInit != nullptr && zesDriverGet != nullptr && zesDeviceGet != nullptr; }
};

// Resolves every entry point of Api from `library`. Fails with kUnavailable
// naming the first required symbol that is missing: zesDeviceGetProperties,
// and zeInit, zeDriverGet and zeDeviceGet when the library has no zesInit.
Result<Api> LoadApi(runtime::DynamicLibrary& library);

// "ZE_RESULT_ERROR_DEVICE_LOST", or "ZE_RESULT_0x12345678" for a code the
// headers do not name.
std::string ResultName(ze_result_t result);

// "zesDeviceGetProperties on level zero device 3: ZE_RESULT_ERROR_DEVICE_LOST
// (0x70000001)"; `where` may be empty.
std::string CallError(const char* call, const std::string& where, ze_result_t result);

// The device stopped answering: it was lost, hung or needs a reset.
inline bool IsLost(ze_result_t result) {
  return result == ZE_RESULT_ERROR_DEVICE_LOST || result == ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET;
}

// Sanity limit on any component count (engines, sensors, ports, ...): far
// above real hardware, low enough that garbage cannot make us allocate much.
constexpr uint32_t kMaxComponents = 256;

// What a two-call enumeration gave. `too_many` means the library reported
// more than the limit (`count` says how many) and nothing was read.
template <typename Handle>
struct Enumerated {
  ze_result_t result = ZE_RESULT_SUCCESS;
  bool too_many = false;
  uint32_t count = 0;
  std::vector<Handle> handles;
  bool ok() const { return result == ZE_RESULT_SUCCESS && !too_many; }
};

// The usual Level Zero enumeration: ask for the count, then for that many
// handles. `call(count*, handles*)` wraps the entry point with its leading
// arguments. Handles that vanish between the calls are dropped, null ones
// rejected (result ZE_RESULT_ERROR_INVALID_NULL_HANDLE).
template <typename Handle, typename Call>
Enumerated<Handle> Enumerate(uint32_t limit, Call call) {
  Enumerated<Handle> out;
  out.result = call(&out.count, nullptr);
  if (out.result != ZE_RESULT_SUCCESS) return out;
  if (out.count > limit) {
    out.too_many = true;
    return out;
  }
  if (out.count == 0) return out;
  out.handles.assign(out.count, nullptr);
  uint32_t returned = out.count;
  out.result = call(&returned, out.handles.data());
  if (out.result != ZE_RESULT_SUCCESS) {
    out.handles.clear();
    return out;
  }
  if (returned < out.count) out.handles.resize(returned);
  for (Handle handle : out.handles) {
    if (handle == nullptr) {
      out.result = ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
      out.handles.clear();
      return out;
    }
  }
  return out;
}

}  // namespace drover::agent::level_zero
