#include "drover/agent/devices/level_zero/level_zero_api.h"

#include <cstdio>
#include <type_traits>

namespace drover::agent::level_zero {

namespace {

template <typename Pointer>
Status Required(runtime::DynamicLibrary& library, const char* name, Pointer* out) {
  auto symbol = library.Symbol<std::remove_pointer_t<Pointer>>(name);
  if (!symbol.ok()) {
    return Unavailable("level zero library '" + library.name() + "' lacks the required entry point " + name + ": " +
                       symbol.status().message());
  }
  *out = *symbol;
  return Status::Ok();
}

template <typename Pointer>
void Optional(runtime::DynamicLibrary& library, const char* name, Pointer* out) {
  auto symbol = library.Symbol<std::remove_pointer_t<Pointer>>(name);
  *out = symbol.ok() ? *symbol : nullptr;
}

// Resolves api.NAME from the symbol of the same name.
#define DROVER_ZE_REQUIRED(name) DROVER_RETURN_IF_ERROR(Required(library, #name, &api.name))
#define DROVER_ZE_OPTIONAL(name) Optional(library, #name, &api.name)

}  // namespace

Result<Api> LoadApi(runtime::DynamicLibrary& library) {
  Api api;
  DROVER_ZE_OPTIONAL(zesInit);
  DROVER_ZE_OPTIONAL(zesDriverGet);
  DROVER_ZE_OPTIONAL(zesDeviceGet);
  if (api.zesInit != nullptr) {
    // A loader with zesInit but not its enumeration functions is broken:
    // say so rather than silently taking the older path.
    DROVER_ZE_REQUIRED(zesDriverGet);
    DROVER_ZE_REQUIRED(zesDeviceGet);
    DROVER_ZE_OPTIONAL(zeInit);
    DROVER_ZE_OPTIONAL(zeDriverGet);
    DROVER_ZE_OPTIONAL(zeDeviceGet);
  } else {
    DROVER_ZE_REQUIRED(zeInit);
    DROVER_ZE_REQUIRED(zeDriverGet);
    DROVER_ZE_REQUIRED(zeDeviceGet);
  }
  DROVER_ZE_OPTIONAL(zeDeviceGetMemoryProperties);
  DROVER_ZE_REQUIRED(zesDeviceGetProperties);
  DROVER_ZE_OPTIONAL(zesDeviceGetState);
  DROVER_ZE_OPTIONAL(zesDevicePciGetProperties);
  DROVER_ZE_OPTIONAL(zesDeviceEnumMemoryModules);
  DROVER_ZE_OPTIONAL(zesMemoryGetProperties);
  DROVER_ZE_OPTIONAL(zesMemoryGetState);
  DROVER_ZE_OPTIONAL(zesDeviceEnumEngineGroups);
  DROVER_ZE_OPTIONAL(zesEngineGetProperties);
  DROVER_ZE_OPTIONAL(zesEngineGetActivity);
  DROVER_ZE_OPTIONAL(zesDeviceEnumTemperatureSensors);
  DROVER_ZE_OPTIONAL(zesTemperatureGetProperties);
  DROVER_ZE_OPTIONAL(zesTemperatureGetState);
  DROVER_ZE_OPTIONAL(zesDeviceEnumPowerDomains);
  DROVER_ZE_OPTIONAL(zesPowerGetProperties);
  DROVER_ZE_OPTIONAL(zesPowerGetEnergyCounter);
  DROVER_ZE_OPTIONAL(zesPowerGetLimits);
  DROVER_ZE_OPTIONAL(zesDeviceEnumFrequencyDomains);
  DROVER_ZE_OPTIONAL(zesFrequencyGetProperties);
  DROVER_ZE_OPTIONAL(zesFrequencyGetState);
  DROVER_ZE_OPTIONAL(zesDeviceEnumRasErrorSets);
  DROVER_ZE_OPTIONAL(zesRasGetProperties);
  DROVER_ZE_OPTIONAL(zesRasGetState);
  DROVER_ZE_OPTIONAL(zesDeviceProcessesGetState);
  DROVER_ZE_OPTIONAL(zesDeviceEnumFabricPorts);
  DROVER_ZE_OPTIONAL(zesFabricPortGetProperties);
  DROVER_ZE_OPTIONAL(zesFabricPortGetState);
  DROVER_ZE_OPTIONAL(zesDeviceEventRegister);
  DROVER_ZE_OPTIONAL(zesDriverEventListen);
  return api;
}

#undef DROVER_ZE_REQUIRED
#undef DROVER_ZE_OPTIONAL

std::string ResultName(ze_result_t result) {
  switch (result) {
#define DROVER_ZE_NAME(code) \
  case code: return #code;
    DROVER_ZE_NAME(ZE_RESULT_SUCCESS)
    DROVER_ZE_NAME(ZE_RESULT_NOT_READY)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_DEVICE_LOST)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_MODULE_LINK_FAILURE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_NOT_AVAILABLE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE)
    DROVER_ZE_NAME(ZE_RESULT_WARNING_DROPPED_DATA)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNINITIALIZED)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_SIZE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_ENUMERATION)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_GLOBAL_NAME)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_NAME)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_FUNCTION_NAME)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_OVERLAPPING_REGIONS)
    DROVER_ZE_NAME(ZE_RESULT_WARNING_ACTION_REQUIRED)
    DROVER_ZE_NAME(ZE_RESULT_ERROR_UNKNOWN)
#undef DROVER_ZE_NAME
    default: break;
  }
  char unnamed[32];
  std::snprintf(unnamed, sizeof(unnamed), "ZE_RESULT_0x%08x", static_cast<unsigned>(result));
  return unnamed;
}

std::string CallError(const char* call, const std::string& where, ze_result_t result) {
  char code[16];
  std::snprintf(code, sizeof(code), "0x%08x", static_cast<unsigned>(result));
  std::string message = call;
  if (!where.empty()) message += " on " + where;
  return message + ": " + ResultName(result) + " (" + code + ")";
}

}  // namespace drover::agent::level_zero
