// The stand-in ROCm SMI library for rocm_smi_test; see fake_rocm_smi.h.
// Its rsmi_* definitions take their signatures from Debian's rocm_smi.h, so
// they match what the backend resolves. Compile definitions drop symbols:
//   FAKE_RSMI_OMIT_OPTIONAL  rsmi_status_string, rsmi_dev_unique_id_get,
//                            rsmi_topo_get_link_type, rsmi_compute_process_gpus_get
//   FAKE_RSMI_OMIT_REQUIRED  rsmi_num_monitor_devices

#include "drover/agent/devices/rocm_smi/fake_rocm_smi.h"

#include <cstdio>
#include <cstring>

namespace {

using drover::agent::fake_rsmi::Device;
using drover::agent::fake_rsmi::kEccBlocks;
using drover::agent::fake_rsmi::kMaxDevices;
using drover::agent::fake_rsmi::kMaxFailures;
using drover::agent::fake_rsmi::State;

State g_state;

rsmi_status_t Injected(const char* function, int device) {
  for (uint32_t i = 0; i < g_state.num_failures; ++i) {
    const auto& failure = g_state.failures[i];
    if (std::strcmp(failure.function, function) == 0 && (failure.device == -1 || failure.device == device)) {
      return failure.status;
    }
  }
  return RSMI_STATUS_SUCCESS;
}

// Returns the injected failure of the calling function, if any.
#define FAKE_INJECTED(device)                                              \
  do {                                                                     \
    rsmi_status_t injected = Injected(__func__, static_cast<int>(device)); \
    if (injected != RSMI_STATUS_SUCCESS) return injected;                  \
  } while (0)

// Validates a device index, then applies injection.
#define FAKE_INDEX(device)                                            \
  do {                                                                \
    if ((device) >= g_state.num_devices || (device) >= kMaxDevices) { \
      return RSMI_STATUS_INVALID_ARGS;                                \
    }                                                                 \
    FAKE_INJECTED(device);                                            \
  } while (0)

// Validates a device index and the out pointer, then applies injection.
#define FAKE_DEVICE(device, out)                           \
  do {                                                     \
    if ((out) == nullptr) return RSMI_STATUS_INVALID_ARGS; \
    FAKE_INDEX(device);                                    \
  } while (0)

Device& At(uint32_t device) { return g_state.devices[device]; }

rsmi_status_t CopyString(const char* value, char* buffer, size_t length) {
  if (length == 0) return RSMI_STATUS_INVALID_ARGS;
  std::snprintf(buffer, length, "%s", value);
  return std::strlen(value) < length ? RSMI_STATUS_SUCCESS : RSMI_STATUS_INSUFFICIENT_SIZE;
}

void FillClock(rsmi_frequencies_t& clock, uint64_t low_hz, uint64_t high_hz, uint32_t current) {
  clock = {};
  clock.num_supported = 2;
  clock.current = current;
  clock.frequency[0] = low_hz;
  clock.frequency[1] = high_hz;
}

}  // namespace

extern "C" {

State* fake_rsmi_state() { return &g_state; }

void fake_rsmi_reset() {
  g_state = State{};
  g_state.init_status = RSMI_STATUS_SUCCESS;
  std::snprintf(g_state.driver_version, sizeof(g_state.driver_version), "%s", "6.2.4-fake");
}

void fake_rsmi_set_devices(uint32_t count) {
  g_state.num_devices = count;
  for (uint32_t i = 0; i < kMaxDevices; ++i) {
    Device& d = At(i);
    d = Device{};
    std::snprintf(d.name, sizeof(d.name), "%s", "AMD Instinct MI210");
    std::snprintf(d.serial, sizeof(d.serial), "SN%04u", i);
    d.device_id = 0x740f;
    d.unique_id = 0x1000 + i;
    d.bdfid = static_cast<uint64_t>(0x03 + i) << 8;  // 0000:0x:00.0
    d.numa_node = 0;
    d.vram_total = 64ULL << 30;
    d.vram_used = 1ULL << 30;
    d.busy_percent = 10;
    d.memory_busy_percent = 5;
    d.temp_current[0] = d.temp_current[1] = 40'000;
    d.temp_critical[0] = d.temp_critical[1] = 100'000;
    d.power_ave_uw = 100'000'000;
    d.power_cap_uw = 300'000'000;
    FillClock(d.sys_clock, 500'000'000, 1'700'000'000, 1);
    FillClock(d.mem_clock, 400'000'000, 1'600'000'000, 1);
    d.ecc_blocks = 1;  // UMC only, at zero
    for (uint32_t j = 0; j < kMaxDevices; ++j) {
      g_state.link_type[i][j] = RSMI_IOLINK_TYPE_PCIEXPRESS;
      g_state.link_hops[i][j] = 2;
    }
  }
}

void fake_rsmi_fail(const char* function, int device, int status) {
  uint32_t kept = 0;
  for (uint32_t i = 0; i < g_state.num_failures; ++i) {
    const auto& failure = g_state.failures[i];
    if (std::strcmp(failure.function, function) == 0 && failure.device == device) continue;
    g_state.failures[kept++] = failure;
  }
  g_state.num_failures = kept;
  if (status == RSMI_STATUS_SUCCESS || kept == kMaxFailures) return;
  auto& failure = g_state.failures[g_state.num_failures++];
  std::snprintf(failure.function, sizeof(failure.function), "%s", function);
  failure.device = device;
  failure.status = static_cast<rsmi_status_t>(status);
}

// --- Lifecycle ---------------------------------------------------------------

rsmi_status_t rsmi_init(uint64_t) {
  ++g_state.init_calls;
  return g_state.init_status;
}

rsmi_status_t rsmi_shut_down() {
  ++g_state.shut_down_calls;
  return RSMI_STATUS_SUCCESS;
}

#ifndef FAKE_RSMI_OMIT_REQUIRED
rsmi_status_t rsmi_num_monitor_devices(uint32_t* num_devices) {
  if (num_devices == nullptr) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  *num_devices = g_state.num_devices;
  return RSMI_STATUS_SUCCESS;
}
#endif

#ifndef FAKE_RSMI_OMIT_OPTIONAL
rsmi_status_t rsmi_status_string(rsmi_status_t status, const char** status_string) {
  if (status_string == nullptr) return RSMI_STATUS_INVALID_ARGS;
  switch (status) {
    case RSMI_STATUS_SUCCESS:
      *status_string = "RSMI_STATUS_SUCCESS: The function has been executed successfully.";
      break;
    case RSMI_STATUS_NOT_FOUND: *status_string = "RSMI_STATUS_NOT_FOUND: An item was searched for but not found"; break;
    case RSMI_STATUS_INIT_ERROR:
      *status_string = "An error occurred during initialization, during monitor discovery";
      break;
    default: *status_string = "fake description"; break;
  }
  return RSMI_STATUS_SUCCESS;
}
#endif

// --- Identity ----------------------------------------------------------------

rsmi_status_t rsmi_dev_id_get(uint32_t dv_ind, uint16_t* id) {
  FAKE_DEVICE(dv_ind, id);
  *id = At(dv_ind).device_id;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_name_get(uint32_t dv_ind, char* name, size_t len) {
  FAKE_DEVICE(dv_ind, name);
  return CopyString(At(dv_ind).name, name, len);
}

rsmi_status_t rsmi_dev_serial_number_get(uint32_t dv_ind, char* serial_num, uint32_t len) {
  FAKE_DEVICE(dv_ind, serial_num);
  return CopyString(At(dv_ind).serial, serial_num, len);
}

#ifndef FAKE_RSMI_OMIT_OPTIONAL
rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t* id) {
  FAKE_DEVICE(dv_ind, id);
  *id = At(dv_ind).unique_id;
  return RSMI_STATUS_SUCCESS;
}
#endif

rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t* bdfid) {
  FAKE_DEVICE(dv_ind, bdfid);
  *bdfid = At(dv_ind).bdfid;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_topo_numa_affinity_get(uint32_t dv_ind, uint32_t* numa_node) {
  FAKE_DEVICE(dv_ind, numa_node);
  *numa_node = At(dv_ind).numa_node;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_version_str_get(rsmi_sw_component_t component, char* ver_str, uint32_t len) {
  if (ver_str == nullptr || component != RSMI_SW_COMP_DRIVER) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  return CopyString(g_state.driver_version, ver_str, len);
}

#ifndef FAKE_RSMI_OMIT_OPTIONAL
rsmi_status_t rsmi_topo_get_link_type(uint32_t dv_ind_src, uint32_t dv_ind_dst, uint64_t* hops,
                                      RSMI_IO_LINK_TYPE* type) {
  FAKE_DEVICE(dv_ind_src, hops);
  if (dv_ind_dst >= g_state.num_devices || dv_ind_dst >= kMaxDevices || type == nullptr) {
    return RSMI_STATUS_INVALID_ARGS;
  }
  *hops = g_state.link_hops[dv_ind_src][dv_ind_dst];
  *type = g_state.link_type[dv_ind_src][dv_ind_dst];
  return RSMI_STATUS_SUCCESS;
}
#endif

// --- Telemetry ---------------------------------------------------------------

rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* total) {
  FAKE_DEVICE(dv_ind, total);
  if (mem_type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
  *total = At(dv_ind).vram_total;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type, uint64_t* used) {
  FAKE_DEVICE(dv_ind, used);
  if (mem_type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
  *used = At(dv_ind).vram_used;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t* busy_percent) {
  FAKE_DEVICE(dv_ind, busy_percent);
  *busy_percent = At(dv_ind).busy_percent;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv_ind, uint32_t* busy_percent) {
  FAKE_DEVICE(dv_ind, busy_percent);
  *busy_percent = At(dv_ind).memory_busy_percent;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv_ind, uint32_t sensor_type, rsmi_temperature_metric_t metric,
                                       int64_t* temperature) {
  FAKE_DEVICE(dv_ind, temperature);
  if (sensor_type > RSMI_TEMP_TYPE_JUNCTION) return RSMI_STATUS_NOT_SUPPORTED;
  const Device& d = At(dv_ind);
  if (d.temp_not_supported[sensor_type]) return RSMI_STATUS_NOT_SUPPORTED;
  if (metric == RSMI_TEMP_CURRENT) {
    *temperature = d.temp_current[sensor_type];
  } else if (metric == RSMI_TEMP_CRITICAL) {
    *temperature = d.temp_critical[sensor_type];
  } else {
    return RSMI_STATUS_NOT_SUPPORTED;
  }
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t, uint64_t* power) {
  FAKE_DEVICE(dv_ind, power);
  *power = At(dv_ind).power_ave_uw;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_power_cap_get(uint32_t dv_ind, uint32_t, uint64_t* cap) {
  FAKE_DEVICE(dv_ind, cap);
  *cap = At(dv_ind).power_cap_uw;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_gpu_clk_freq_get(uint32_t dv_ind, rsmi_clk_type_t clk_type, rsmi_frequencies_t* f) {
  FAKE_DEVICE(dv_ind, f);
  if (clk_type == RSMI_CLK_TYPE_SYS) {
    *f = At(dv_ind).sys_clock;
  } else if (clk_type == RSMI_CLK_TYPE_MEM) {
    *f = At(dv_ind).mem_clock;
  } else {
    return RSMI_STATUS_NOT_SUPPORTED;
  }
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_ecc_count_get(uint32_t dv_ind, rsmi_gpu_block_t block, rsmi_error_count_t* ec) {
  FAKE_DEVICE(dv_ind, ec);
  for (uint32_t bit = 0; bit < kEccBlocks; ++bit) {
    if (static_cast<uint64_t>(block) != (1ULL << bit)) continue;
    if ((At(dv_ind).ecc_blocks & (1ULL << bit)) == 0) return RSMI_STATUS_NOT_SUPPORTED;
    *ec = At(dv_ind).ecc[bit];
    return RSMI_STATUS_SUCCESS;
  }
  return RSMI_STATUS_INVALID_ARGS;
}

// --- Processes ---------------------------------------------------------------

rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t* procs, uint32_t* num_items) {
  if (num_items == nullptr) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  if (procs == nullptr) {
    *num_items = g_state.num_processes;
    return RSMI_STATUS_SUCCESS;
  }
  const uint32_t room = *num_items;
  uint32_t written = 0;
  for (; written < g_state.num_processes && written < room; ++written) {
    procs[written] = {};
    procs[written].process_id = g_state.processes[written].pid;
  }
  *num_items = written;
  return written < g_state.num_processes ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_info_by_pid_get(uint32_t pid, rsmi_process_info_t* proc) {
  if (proc == nullptr) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  for (uint32_t i = 0; i < g_state.num_processes; ++i) {
    if (g_state.processes[i].pid != pid) continue;
    *proc = {};
    proc->process_id = pid;
    proc->vram_usage = g_state.processes[i].vram_usage;
    return RSMI_STATUS_SUCCESS;
  }
  return RSMI_STATUS_NOT_FOUND;
}

#ifndef FAKE_RSMI_OMIT_OPTIONAL
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* dv_indices, uint32_t* num_devices) {
  if (num_devices == nullptr) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  for (uint32_t i = 0; i < g_state.num_processes; ++i) {
    const auto& process = g_state.processes[i];
    if (process.pid != pid) continue;
    if (dv_indices == nullptr) {
      *num_devices = process.num_gpus;
      return RSMI_STATUS_SUCCESS;
    }
    const uint32_t room = *num_devices;
    uint32_t written = 0;
    for (; written < process.num_gpus && written < room; ++written) {
      dv_indices[written] = process.gpus[written];
    }
    *num_devices = written;
    return written < process.num_gpus ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
  }
  return RSMI_STATUS_NOT_FOUND;
}
#endif

// --- Event notification ------------------------------------------------------

rsmi_status_t rsmi_event_notification_init(uint32_t dv_ind) {
  FAKE_INDEX(dv_ind);
  g_state.event_subscribed[dv_ind] = true;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_event_notification_mask_set(uint32_t dv_ind, uint64_t mask) {
  FAKE_INDEX(dv_ind);
  if (!g_state.event_subscribed[dv_ind]) return RSMI_STATUS_INIT_ERROR;
  g_state.event_mask[dv_ind] = mask;
  return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_event_notification_get(int, uint32_t* num_elem, rsmi_evt_notification_data_t* data) {
  if (num_elem == nullptr || data == nullptr || *num_elem == 0) return RSMI_STATUS_INVALID_ARGS;
  FAKE_INJECTED(-1);
  const uint32_t room = *num_elem;
  uint32_t written = 0;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < g_state.num_events; ++i) {
    const rsmi_evt_notification_data_t& event = g_state.events[i];
    const uint32_t dv = event.dv_ind;
    const bool wanted = dv < kMaxDevices && g_state.event_subscribed[dv] &&
                        (g_state.event_mask[dv] & RSMI_EVENT_MASK_FROM_INDEX(event.event)) != 0;
    if (wanted && written < room) {
      data[written++] = event;
    } else {
      g_state.events[kept++] = event;
    }
  }
  g_state.num_events = kept;
  *num_elem = written;
  return written == 0 ? RSMI_STATUS_NO_DATA : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_event_notification_stop(uint32_t dv_ind) {
  if (dv_ind >= kMaxDevices || !g_state.event_subscribed[dv_ind]) return RSMI_STATUS_INVALID_ARGS;
  g_state.event_subscribed[dv_ind] = false;
  ++g_state.event_stop_calls;
  return RSMI_STATUS_SUCCESS;
}

}  // extern "C"
