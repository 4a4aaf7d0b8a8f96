#include "drover/agent/devices/rocm_smi/rocm_smi_api.h"

#include <cstring>
#include <string>
#include <string_view>

namespace drover::agent::rocm_smi {

namespace {

// Longest status description taken from the library; a pointer to garbage
// must not make us read (or log) megabytes.
constexpr size_t kMaxStatusTextBytes = 256;

template <typename Fn>
Status Require(runtime::DynamicLibrary& library, const char* symbol, Fn*& slot) {
  Result<Fn*> address = library.template Symbol<Fn>(symbol);
  if (!address.ok()) {
    return Unavailable("rocm-smi: required symbol '" + std::string(symbol) + "' is missing from '" + library.name() +
                       "'; the rocm smi library is too old or not rocm smi");
  }
  slot = *address;
  return Status::Ok();
}

template <typename Fn>
void Optional(runtime::DynamicLibrary& library, const char* symbol, Fn*& slot) {
  Result<Fn*> address = library.template Symbol<Fn>(symbol);
  slot = address.ok() ? *address : nullptr;
}

// The library's description of `status`, or "" when it has none or returns
// something unusable. Drops its "RSMI_STATUS_...: " prefix, which repeats
// the name RsmiError already prints.
std::string LibraryText(const RocmSmiApi& api, rsmi_status_t status) {
  if (api.rsmi_status_string == nullptr) return "";
  const char* text = nullptr;
  if (api.rsmi_status_string(status, &text) != RSMI_STATUS_SUCCESS || text == nullptr) return "";
  std::string value(text, strnlen(text, kMaxStatusTextBytes));
  for (char& c : value) {
    if (c < 0x20 || c == 0x7f) c = ' ';
  }
  std::string_view name = RsmiStatusName(status);
  if (!name.empty() && value.compare(0, name.size(), name) == 0) {
    size_t start = name.size();
    while (start < value.size() && (value[start] == ':' || value[start] == ' ')) ++start;
    value.erase(0, start);
  }
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

}  // namespace

Result<RocmSmiApi> ResolveRocmSmiApi(runtime::DynamicLibrary& library) {
  RocmSmiApi api;
  DROVER_RETURN_IF_ERROR(Require(library, "rsmi_init", api.rsmi_init));
  DROVER_RETURN_IF_ERROR(Require(library, "rsmi_shut_down", api.rsmi_shut_down));
  DROVER_RETURN_IF_ERROR(Require(library, "rsmi_num_monitor_devices", api.rsmi_num_monitor_devices));
  DROVER_RETURN_IF_ERROR(Require(library, "rsmi_dev_memory_total_get", api.rsmi_dev_memory_total_get));

  Optional(library, "rsmi_status_string", api.rsmi_status_string);
  Optional(library, "rsmi_dev_name_get", api.rsmi_dev_name_get);
  Optional(library, "rsmi_dev_id_get", api.rsmi_dev_id_get);
  Optional(library, "rsmi_dev_unique_id_get", api.rsmi_dev_unique_id_get);
  Optional(library, "rsmi_dev_serial_number_get", api.rsmi_dev_serial_number_get);
  Optional(library, "rsmi_dev_pci_id_get", api.rsmi_dev_pci_id_get);
  Optional(library, "rsmi_topo_numa_affinity_get", api.rsmi_topo_numa_affinity_get);
  Optional(library, "rsmi_version_str_get", api.rsmi_version_str_get);
  Optional(library, "rsmi_topo_get_link_type", api.rsmi_topo_get_link_type);

  Optional(library, "rsmi_dev_busy_percent_get", api.rsmi_dev_busy_percent_get);
  Optional(library, "rsmi_dev_memory_usage_get", api.rsmi_dev_memory_usage_get);
  Optional(library, "rsmi_dev_memory_busy_percent_get", api.rsmi_dev_memory_busy_percent_get);
  Optional(library, "rsmi_dev_temp_metric_get", api.rsmi_dev_temp_metric_get);
  Optional(library, "rsmi_dev_power_ave_get", api.rsmi_dev_power_ave_get);
  Optional(library, "rsmi_dev_power_cap_get", api.rsmi_dev_power_cap_get);
  Optional(library, "rsmi_dev_gpu_clk_freq_get", api.rsmi_dev_gpu_clk_freq_get);
  Optional(library, "rsmi_dev_ecc_count_get", api.rsmi_dev_ecc_count_get);
  Optional(library, "rsmi_compute_process_info_get", api.rsmi_compute_process_info_get);
  Optional(library, "rsmi_compute_process_info_by_pid_get", api.rsmi_compute_process_info_by_pid_get);
  Optional(library, "rsmi_compute_process_gpus_get", api.rsmi_compute_process_gpus_get);

  Optional(library, "rsmi_event_notification_init", api.rsmi_event_notification_init);
  Optional(library, "rsmi_event_notification_mask_set", api.rsmi_event_notification_mask_set);
  Optional(library, "rsmi_event_notification_get", api.rsmi_event_notification_get);
  Optional(library, "rsmi_event_notification_stop", api.rsmi_event_notification_stop);
  return api;
}

std::string_view RsmiStatusName(rsmi_status_t status) {
  switch (status) {
    case RSMI_STATUS_SUCCESS: return "RSMI_STATUS_SUCCESS";
    case RSMI_STATUS_INVALID_ARGS: return "RSMI_STATUS_INVALID_ARGS";
    case RSMI_STATUS_NOT_SUPPORTED: return "RSMI_STATUS_NOT_SUPPORTED";
    case RSMI_STATUS_FILE_ERROR: return "RSMI_STATUS_FILE_ERROR";
    case RSMI_STATUS_PERMISSION: return "RSMI_STATUS_PERMISSION";
    case RSMI_STATUS_OUT_OF_RESOURCES: return "RSMI_STATUS_OUT_OF_RESOURCES";
    case RSMI_STATUS_INTERNAL_EXCEPTION: return "RSMI_STATUS_INTERNAL_EXCEPTION";
    case RSMI_STATUS_INPUT_OUT_OF_BOUNDS: return "RSMI_STATUS_INPUT_OUT_OF_BOUNDS";
    case RSMI_STATUS_INIT_ERROR: return "RSMI_STATUS_INIT_ERROR";
    case RSMI_STATUS_NOT_YET_IMPLEMENTED: return "RSMI_STATUS_NOT_YET_IMPLEMENTED";
    case RSMI_STATUS_NOT_FOUND: return "RSMI_STATUS_NOT_FOUND";
    case RSMI_STATUS_INSUFFICIENT_SIZE: return "RSMI_STATUS_INSUFFICIENT_SIZE";
    case RSMI_STATUS_INTERRUPT: return "RSMI_STATUS_INTERRUPT";
    case RSMI_STATUS_UNEXPECTED_SIZE: return "RSMI_STATUS_UNEXPECTED_SIZE";
    case RSMI_STATUS_NO_DATA: return "RSMI_STATUS_NO_DATA";
    case RSMI_STATUS_UNEXPECTED_DATA: return "RSMI_STATUS_UNEXPECTED_DATA";
    case RSMI_STATUS_BUSY: return "RSMI_STATUS_BUSY";
    case RSMI_STATUS_REFCOUNT_OVERFLOW: return "RSMI_STATUS_REFCOUNT_OVERFLOW";
    case RSMI_STATUS_UNKNOWN_ERROR: return "RSMI_STATUS_UNKNOWN_ERROR";
  }
  return "";
}

std::string RsmiError(const RocmSmiApi& api, std::string_view call, rsmi_status_t status, int device) {
  std::string message(call);
  if (device >= 0) message += " on device " + std::to_string(device);
  message += ": ";
  std::string_view name = RsmiStatusName(status);
  // The enum is unsigned (RSMI_STATUS_UNKNOWN_ERROR is 0xFFFFFFFF).
  const std::string code = std::to_string(static_cast<uint32_t>(status));
  if (name.empty()) {
    message += "unknown status (" + code + ")";
  } else {
    message += std::string(name) + " (" + code + ")";
  }
  std::string text = LibraryText(api, status);
  if (!text.empty()) message += ": " + text;
  return message;
}

}  // namespace drover::agent::rocm_smi
