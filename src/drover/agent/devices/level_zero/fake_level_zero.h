#pragma once
// The control side of fake_level_zero, a stand-in for libze_loader.so.1 that
// level_zero_test loads instead of the real loader. The test dlopens the
// same path and reaches these functions with dlsym, so it scripts the very
// library instance the backend loaded. Not thread-safe; tests only.
//
// Every device has, at the device level: engine groups MEDIA_ALL and ALL;
// memory modules SYSTEM and DEVICE; temperature sensors MEMORY and GPU; one
// power domain; frequency domains GPU and MEMORY; RAS sets CORRECTABLE and
// UNCORRECTABLE (category 0 and 1 hold the counts); `port_count` fabric ports.
// Built three times: complete, without zesInit/zesDriverGet/zesDeviceGet
// (FAKE_ZE_NO_ZES_INIT) and without zesDeviceGetProperties
// (FAKE_ZE_NO_DEVICE_PROPERTIES).

#include <cstdint>

extern "C" {

constexpr uint32_t kFakeZeMaxDevices = 16;
constexpr uint32_t kFakeZeMaxPorts = 8;
constexpr uint32_t kFakeZeMaxProcesses = 8;

struct FakeZeDevice {
  char name[256];
  uint8_t uuid[16];
  uint32_t vendor_id;
  uint32_t device_id;
  char driver_version[64];
  uint32_t pci_domain, pci_bus, pci_device, pci_function;
  uint64_t memory_physical;  // the DEVICE module's physicalSize
  uint64_t memory_size;      // zesMemoryGetState of the DEVICE module
  uint64_t memory_free;
  uint64_t core_memory_total;  // zeDeviceGetMemoryProperties
  uint64_t active_us;          // ALL engine group activity
  uint64_t timestamp_us;       // of activity and energy
  uint64_t energy_uj;
  double temperature_c;  // GPU sensor (the MEMORY sensor reads 20 below)
  uint32_t power_limit_enabled;
  int32_t power_limit_mw;
  double gpu_mhz;
  double memory_mhz;
  uint32_t throttle_reasons;
  uint64_t ras_correctable;
  uint64_t ras_uncorrectable;
  uint32_t reset_reasons;  // zesDeviceGetState
  uint32_t process_count;
  uint32_t pids[kFakeZeMaxProcesses];
  uint64_t process_memory[kFakeZeMaxProcesses];
  uint32_t fabric_id;  // of every port of the device
  uint32_t port_count;
  uint32_t port_remote[kFakeZeMaxPorts];  // remote port's fabric id
  int port_status[kFakeZeMaxPorts];       // zes_fabric_port_status_t
  uint32_t registered_events;             // from zesDeviceEventRegister
  uint32_t pending_events;                // delivered by zesDriverEventListen
};

// Back to two healthy devices ("Intel(R) Data Center GPU Max 1550", distinct
// uuids, 0000:3a:00.0 and 0000:9a:00.0, 64 GiB), no failures, nothing
// initialized.
void fake_ze_reset();
// How many devices zeDeviceGet/zesDeviceGet report; at most
// kFakeZeMaxDevices exist, any count above is reported but never returned.
void fake_ze_set_devices(uint32_t count);
FakeZeDevice* fake_ze_device(uint32_t index);
// Makes `function` return `result` on device `device` (-1: every device and
// device-less calls); result 0 clears.
void fake_ze_fail(const char* function, int device, int result);
// Moves a device's counters on: time, busy time, energy.
void fake_ze_advance(uint32_t device, uint64_t elapsed_us, uint64_t active_us, uint64_t energy_uj);
// How often `function` was called since the reset.
int fake_ze_calls(const char* function);
// ZES_ENABLE_SYSMAN as zeInit saw it ("" when unset).
const char* fake_ze_sysman_env_at_init();

using FakeZeResetFn = void();
using FakeZeSetDevicesFn = void(uint32_t);
using FakeZeDeviceFn = FakeZeDevice*(uint32_t);
using FakeZeFailFn = void(const char*, int, int);
using FakeZeAdvanceFn = void(uint32_t, uint64_t, uint64_t, uint64_t);
using FakeZeCallsFn = int(const char*);
using FakeZeSysmanEnvFn = const char*();

}  // extern "C"
