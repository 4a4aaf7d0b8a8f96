#pragma once
// LevelZeroBackend: Intel GPUs (and any other Level Zero driver's devices)
// through Sysman, the Level Zero management API, with the loader opened at
// run time. Internal to the backend; the agent reaches it through
// MakeLevelZeroBackend() (device_backend.h).
//
// Initialization, in order of preference:
//   1. zesInit(0) + zesDriverGet + zesDeviceGet (spec 1.5+, optional symbols).
//      Sysman handles from this path are not core handles, so the
//      zeDeviceGetMemoryProperties fallback for memory is not used.
//   2. setenv("ZES_ENABLE_SYSMAN", "1", 0) + zeInit(ZE_INIT_FLAG_GPU_ONLY) +
//      zeDriverGet + zeDeviceGet: core handles double as Sysman handles. The
//      driver reads the variable in its first zeInit, so this only works when
//      nothing in the process initialized Level Zero before; a value the user
//      set is left alone. Also taken when zesInit fails and zeInit exists.
//   An initialization that reports ZE_RESULT_ERROR_UNINITIALIZED (the loader
//   found no driver) is not an error: Discover() returns 0 devices.
//
// What is not known: NUMA nodes (Sysman does not say; the agent's hwloc pass
// fills them from the PCI bus id), memory bandwidth utilization, sub-device
// counts (GpuDevice has no field for them).
//
// Not thread-safe: owned by the agent that created it, called from its
// telemetry thread only. The loader stays loaded until the process exits
// (see OpenLibrary in level_zero_backend.cc).

#include <optional>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/level_zero/level_zero_api.h"

namespace drover::agent::level_zero {

// A previous counter reading of one component, for deltas between samples.
struct Counter {
  uint64_t value = 0;
  uint64_t timestamp_us = 0;
};

// What Discover() learned of one device and what Sample() carries over.
// Invariants: every handle is non-null; `last_activity` is parallel to
// `engines` and `last_energy` to `power` (nullopt = no previous reading).
struct DeviceState {
  zes_device_handle_t handle = nullptr;
  size_t driver = 0;  // index into LevelZeroBackend::drivers_
  std::string where;  // "level zero device 3", for messages
  int64_t memory_bytes = 0;
  // Components chosen in Discover(): the device-level ones when the driver
  // has them, otherwise those of every sub-device (tile), combined.
  std::vector<zes_engine_handle_t> engines;
  std::vector<zes_mem_handle_t> memory;  // device-local modules only
  std::vector<zes_temp_handle_t> temperature;
  std::vector<zes_pwr_handle_t> power;
  std::vector<zes_freq_handle_t> gpu_clock;
  std::vector<zes_freq_handle_t> memory_clock;
  struct Ras {
    zes_ras_handle_t handle;
    zes_ras_error_type_t type;
  };
  std::vector<Ras> ras;
  // Carried between samples.
  std::vector<std::optional<Counter>> last_activity;
  std::vector<std::optional<Counter>> last_energy;
  int64_t last_uncorrected = -1;
  bool lost = false;            // a kDeviceLost event went out for the current loss
  uint32_t reset_reported = 0;  // reset reasons already reported
};

class LevelZeroBackend final : public DeviceBackend {
 public:
  explicit LevelZeroBackend(VendorLibrary lib) : lib_(std::move(lib)) {}

  std::string_view Name() const override { return "level-zero"; }
  bool IsAvailable() override;
  Status Initialize() override;
  Result<std::vector<GpuDevice>> Discover() override;
  std::vector<DeviceLink> Links() const override { return links_; }
  Result<GpuSample> Sample(int device) override;  // level_zero_sample.cc
  std::vector<HealthEvent> TakeEvents() override;

 private:
  struct Driver {
    zes_driver_handle_t handle = nullptr;
    std::vector<zes_device_handle_t> devices;  // those with events registered
    std::vector<int> indices;                  // their backend indices
  };

  Result<std::vector<GpuDevice>> DiscoverDevices();
  Result<GpuDevice> Describe(DeviceState* state, int index);
  // Picks the components Sample() reads; false when the device was lost.
  bool ChooseComponents(DeviceState* state);
  void ComputeLinks();
  // Queues a kDeviceLost event once per loss and returns the Sample() error.
  Status MarkLost(DeviceState* state, int index, const char* call, ze_result_t result);

  VendorLibrary lib_;
  Api api_;
  bool initialized_ = false;
  bool zes_path_ = false;   // initialized through zesInit
  bool no_driver_ = false;  // the loader found no driver: 0 devices
  std::vector<Driver> drivers_;
  std::vector<DeviceState> devices_;  // of the last Discover(), by index
  std::vector<DeviceLink> links_;
  std::vector<HealthEvent> events_;
};

}  // namespace drover::agent::level_zero
