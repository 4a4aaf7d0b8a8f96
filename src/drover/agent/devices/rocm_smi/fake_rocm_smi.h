#pragma once
// The stand-in ROCm SMI library that rocm_smi_test loads in place of
// librocm_smi64 (fake_rocm_smi.cc, built as a shared library in three
// variants: complete, without some optional symbols, without a required
// one). It implements the rsmi_* calls the backend makes from a plain
// state struct that the test scripts: the test dlopens the same file,
// which yields the same handle and so the same state, and edits it through
// fake_rsmi_state().
//
// Not thread-safe; test-only.

#include <rocm_smi/rocm_smi.h>

#include <cstdint>

namespace drover::agent::fake_rsmi {

inline constexpr uint32_t kMaxDevices = 8;
inline constexpr uint32_t kMaxProcesses = 8;
inline constexpr uint32_t kMaxEvents = 16;
inline constexpr uint32_t kMaxFailures = 16;
inline constexpr uint32_t kEccBlocks = 14;  // RSMI_GPU_BLOCK_UMC .. RSMI_GPU_BLOCK_FUSE

struct Device {
  char name[64];
  char serial[64];
  uint16_t device_id;
  uint64_t unique_id;
  uint64_t bdfid;
  uint32_t numa_node;
  uint64_t vram_total;
  uint64_t vram_used;
  uint32_t busy_percent;
  uint32_t memory_busy_percent;
  // Millidegrees C by sensor: [0] edge, [1] junction; not_supported[s]
  // makes every metric of that sensor RSMI_STATUS_NOT_SUPPORTED.
  int64_t temp_current[2];
  int64_t temp_critical[2];
  bool temp_not_supported[2];
  uint64_t power_ave_uw;
  uint64_t power_cap_uw;
  rsmi_frequencies_t sys_clock;
  rsmi_frequencies_t mem_clock;
  // By bit position of the block (UMC is 0); a block whose bit is clear in
  // ecc_blocks answers RSMI_STATUS_NOT_SUPPORTED.
  rsmi_error_count_t ecc[kEccBlocks];
  uint64_t ecc_blocks;
};

struct Process {
  uint32_t pid;
  uint64_t vram_usage;
  uint32_t gpus[kMaxDevices];
  uint32_t num_gpus;
};

// rsmi_<function> on `device` (-1: any device and the device-less calls)
// returns `status` instead of doing its work.
struct Failure {
  char function[64];
  int device;
  rsmi_status_t status;
};

struct State {
  rsmi_status_t init_status;
  int init_calls;
  int shut_down_calls;
  // What rsmi_num_monitor_devices reports; may exceed kMaxDevices (calls
  // on devices past kMaxDevices answer RSMI_STATUS_INVALID_ARGS).
  uint32_t num_devices;
  Device devices[kMaxDevices];
  RSMI_IO_LINK_TYPE link_type[kMaxDevices][kMaxDevices];
  uint64_t link_hops[kMaxDevices][kMaxDevices];
  char driver_version[64];
  Process processes[kMaxProcesses];
  uint32_t num_processes;
  // Pending driver notifications, handed out by rsmi_event_notification_get
  // for devices that subscribed to their type.
  rsmi_evt_notification_data_t events[kMaxEvents];
  uint32_t num_events;
  bool event_subscribed[kMaxDevices];
  uint64_t event_mask[kMaxDevices];
  int event_stop_calls;
  Failure failures[kMaxFailures];
  uint32_t num_failures;
};

}  // namespace drover::agent::fake_rsmi

extern "C" {
// The state the rsmi_* calls read.
drover::agent::fake_rsmi::State* fake_rsmi_state();
// No devices, rsmi_init succeeds, no failures, counters at zero.
void fake_rsmi_reset();
// `count` plausible MI210-like devices (64 GiB, PCIe between all pairs,
// NUMA node 0, every sensor answering); count may exceed kMaxDevices.
void fake_rsmi_set_devices(uint32_t count);
// Makes rsmi_<function> return `status` on `device` (-1: everywhere);
// status 0 (RSMI_STATUS_SUCCESS) removes the failure.
void fake_rsmi_fail(const char* function, int device, int status);
}
