#pragma once
// RocmSmiApi: the ROCm SMI entry points the rocm-smi backend calls, each
// resolved with dlsym from a librocm_smi64 opened at run time. Nothing links
// librocm_smi64: the header (Debian's librocm-smi-dev, ROCm SMI 5.2) only
// supplies the types, the constants and, through decltype, the exact
// signature of every pointer, so a mismatch with the ABI fails to compile.
//
// Internal to the rocm_smi backend folder (the backend and its tests).

#include <rocm_smi/rocm_smi.h>

#include <string>
#include <string_view>

#include "drover/common/status.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent::rocm_smi {

// Each member is named after the symbol it holds. Required members are
// non-null once ResolveRocmSmiApi() succeeded; an optional one is null when
// the library lacks it, and the backend then leaves its feature unknown.
struct RocmSmiApi {
  // Required: without them there is nothing to find or size.
  decltype(&::rsmi_init) rsmi_init = nullptr;
  decltype(&::rsmi_shut_down) rsmi_shut_down = nullptr;
  decltype(&::rsmi_num_monitor_devices) rsmi_num_monitor_devices = nullptr;
  decltype(&::rsmi_dev_memory_total_get) rsmi_dev_memory_total_get = nullptr;

  // Optional: errors and identity.
  decltype(&::rsmi_status_string) rsmi_status_string = nullptr;
  decltype(&::rsmi_dev_name_get) rsmi_dev_name_get = nullptr;
  decltype(&::rsmi_dev_id_get) rsmi_dev_id_get = nullptr;
  decltype(&::rsmi_dev_unique_id_get) rsmi_dev_unique_id_get = nullptr;
  decltype(&::rsmi_dev_serial_number_get) rsmi_dev_serial_number_get = nullptr;
  decltype(&::rsmi_dev_pci_id_get) rsmi_dev_pci_id_get = nullptr;
  decltype(&::rsmi_topo_numa_affinity_get) rsmi_topo_numa_affinity_get = nullptr;
  decltype(&::rsmi_version_str_get) rsmi_version_str_get = nullptr;
  decltype(&::rsmi_topo_get_link_type) rsmi_topo_get_link_type = nullptr;

  // Optional: telemetry.
  decltype(&::rsmi_dev_busy_percent_get) rsmi_dev_busy_percent_get = nullptr;
  decltype(&::rsmi_dev_memory_usage_get) rsmi_dev_memory_usage_get = nullptr;
  decltype(&::rsmi_dev_memory_busy_percent_get) rsmi_dev_memory_busy_percent_get = nullptr;
  decltype(&::rsmi_dev_temp_metric_get) rsmi_dev_temp_metric_get = nullptr;
  decltype(&::rsmi_dev_power_ave_get) rsmi_dev_power_ave_get = nullptr;
  decltype(&::rsmi_dev_power_cap_get) rsmi_dev_power_cap_get = nullptr;
  decltype(&::rsmi_dev_gpu_clk_freq_get) rsmi_dev_gpu_clk_freq_get = nullptr;
  decltype(&::rsmi_dev_ecc_count_get) rsmi_dev_ecc_count_get = nullptr;
  decltype(&::rsmi_compute_process_info_get) rsmi_compute_process_info_get = nullptr;
  decltype(&::rsmi_compute_process_info_by_pid_get) rsmi_compute_process_info_by_pid_get = nullptr;
  decltype(&::rsmi_compute_process_gpus_get) rsmi_compute_process_gpus_get = nullptr;

  // Optional, used only when all four are present: driver event notification.
  decltype(&::rsmi_event_notification_init) rsmi_event_notification_init = nullptr;
  decltype(&::rsmi_event_notification_mask_set) rsmi_event_notification_mask_set = nullptr;
  decltype(&::rsmi_event_notification_get) rsmi_event_notification_get = nullptr;
  decltype(&::rsmi_event_notification_stop) rsmi_event_notification_stop = nullptr;

  bool HasEventNotification() const {
    return rsmi_event_notification_init != nullptr && rsmi_event_notification_mask_set != nullptr &&
           rsmi_event_notification_get != nullptr && rsmi_event_notification_stop != nullptr;
  }
};

// Resolves every member from `library`. Fails with kUnavailable naming the
// first required symbol that is missing.
Result<RocmSmiApi> ResolveRocmSmiApi(runtime::DynamicLibrary& library);

// "RSMI_STATUS_NOT_FOUND" for the codes of ROCm SMI 5.2; "" for others.
std::string_view RsmiStatusName(rsmi_status_t status);

// A clear message for a failed call, e.g.
// "rsmi_dev_power_ave_get on device 3: RSMI_STATUS_NOT_FOUND (10): An item
// was searched for but not found". The text after the code comes from
// rsmi_status_string when the library has it; unknown codes read
// "unknown status (4242)". `device` < 0 leaves out the "on device" part.
std::string RsmiError(const RocmSmiApi& api, std::string_view call, rsmi_status_t status, int device = -1);

}  // namespace drover::agent::rocm_smi
