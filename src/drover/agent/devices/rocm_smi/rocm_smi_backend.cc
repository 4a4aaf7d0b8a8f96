// The ROCm SMI backend: AMD GPUs through librocm_smi64, opened at run time
// (see rocm_smi_api.h for how the entry points are resolved).
//
// What it reads, per device:
//   identity   rsmi_dev_name_get, rsmi_dev_unique_id_get / serial number
//              (uuid), rsmi_dev_pci_id_get, rsmi_dev_memory_total_get (VRAM),
//              rsmi_topo_numa_affinity_get, rsmi_dev_id_get (architecture:
//              the PCI device id, "0x740f"; ROCm SMI 5.2 has no call that
//              names the gfx target), rsmi_version_str_get (driver).
//   telemetry  see rocm_smi_readings.h.
//   links      rsmi_topo_get_link_type between every pair (see Links()).
//   events     a lost device, a rise of the uncorrectable ECC count, and
//              the driver's thermal-throttle and GPU-reset notifications.

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/rocm_smi/rocm_smi_api.h"
#include "drover/agent/devices/rocm_smi/rocm_smi_readings.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent {

namespace {

using rocm_smi::RocmSmiApi;
using rocm_smi::RsmiError;

// Driver notifications are read in batches of this many, at most this many
// batches per TakeEvents(), so that a flood cannot hold the caller.
constexpr uint32_t kEventBatch = 64;
constexpr int kMaxEventBatches = 16;

// Statuses that mean the device no longer answers, whichever call returned
// them: the library lost its handle on it (NOT_FOUND, INIT_ERROR), its sysfs
// files cannot be opened (FILE_ERROR) or read (UNEXPECTED_SIZE, which ROCm
// SMI returns for EIO).
bool MeansLost(rsmi_status_t status) {
  return status == RSMI_STATUS_NOT_FOUND || status == RSMI_STATUS_INIT_ERROR || status == RSMI_STATUS_FILE_ERROR ||
         status == RSMI_STATUS_UNEXPECTED_SIZE;
}

// The liveness probe, rsmi_dev_memory_total_get, answered at Discover().
// ROCm SMI maps ENOENT to RSMI_STATUS_NOT_SUPPORTED and a bad index to
// RSMI_STATUS_INVALID_ARGS, so on the probe those mean the device's sysfs
// node is gone, not that the feature is missing.
bool ProbeMeansLost(rsmi_status_t status) {
  return MeansLost(status) || status == RSMI_STATUS_NOT_SUPPORTED || status == RSMI_STATUS_INVALID_ARGS;
}

// Not thread-safe: owned by the agent that created it and called from its
// telemetry thread. Holds the library from IsAvailable() until destruction;
// calls rsmi_init once (Initialize) and rsmi_shut_down once (destructor).
// Does not change any device setting.
class RocmSmiBackend final : public DeviceBackend {
 public:
  explicit RocmSmiBackend(VendorLibrary lib) : lib_(std::move(lib)) {}

  ~RocmSmiBackend() override {
    StopNotifications();
    if (initialized_) (void)api_.rsmi_shut_down();
    // library_ is closed after this body, once nothing can call into it.
  }

  RocmSmiBackend(const RocmSmiBackend&) = delete;
  RocmSmiBackend& operator=(const RocmSmiBackend&) = delete;

  std::string_view Name() const override { return "rocm-smi"; }

  bool IsAvailable() override { return Load().ok(); }

  Status Initialize() override {
    if (initialized_) return Status::Ok();
    DROVER_RETURN_IF_ERROR(Load());
    DROVER_ASSIGN_OR_RETURN(RocmSmiApi api, rocm_smi::ResolveRocmSmiApi(*library_));
    rsmi_status_t status = api.rsmi_init(0);  // 0: AMD GPUs only
    if (status != RSMI_STATUS_SUCCESS) {
      return Unavailable("rocm-smi: " + RsmiError(api, "rsmi_init", status) +
                         " (no amdgpu driver or no permission to read /sys/class/kfd?)");
    }
    api_ = api;
    initialized_ = true;
    return Status::Ok();
  }

  Result<std::vector<GpuDevice>> Discover() override {
    DROVER_RETURN_IF_ERROR(Initialize());
    StopNotifications();
    devices_.clear();
    links_.clear();
    // Queued events name indices of the previous Discover(), which need
    // not mean the same devices any more.
    events_.clear();

    uint32_t count = 0;
    rsmi_status_t status = api_.rsmi_num_monitor_devices(&count);
    if (status != RSMI_STATUS_SUCCESS) {
      return Unavailable("rocm-smi: " + RsmiError(api_, "rsmi_num_monitor_devices", status));
    }
    if (count > rocm_smi::kMaxDevices) {
      return Internal("rocm-smi reported " + std::to_string(count) + " devices, more than " +
                      std::to_string(rocm_smi::kMaxDevices));
    }
    const std::string driver = DriverVersion();
    std::vector<GpuDevice> found;
    std::vector<Tracked> tracked;
    for (uint32_t i = 0; i < count; ++i) {
      DROVER_ASSIGN_OR_RETURN(GpuDevice device, Describe(i, found));
      device.driver_version = driver;
      tracked.push_back({device.uuid, device.numa_node});
      found.push_back(std::move(device));
    }
    devices_ = std::move(tracked);
    links_ = ComputeLinks();
    StartNotifications();
    return found;
  }

  // Row-major n x n, from rsmi_topo_get_link_type (hops, type) per pair.
  // ROCm SMI 5.2 reports a direct xGMI link as (1, XGMI); every other pair
  // is routed through the CPU: hops 2 when both GPUs hang off the same CPU
  // node, 3 or more across CPU nodes, with the type of the GPU-CPU link
  // (PCIe, or xGMI on boards whose CPU speaks it). So:
  //   XGMI with hops <= 1         kFabric
  //   anything with hops >= 3     kCrossSocket
  //   otherwise                   kSameNuma when the NUMA nodes agree,
  //                               else kCrossSocket.
  // It never says kPcieSwitch: ROCm SMI does not see PCIe switches. Empty
  // when the call is missing or fails for any pair, so that the agent falls
  // back to hwloc's PCIe tree instead of half a picture.
  std::vector<DeviceLink> Links() const override { return links_; }

  Result<GpuSample> Sample(int device) override {
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      return NotFound("rocm-smi device " + std::to_string(device) + " was not discovered");
    }
    const auto index = static_cast<uint32_t>(device);
    GpuSample sample;

    // The basic calls: if these fail the device is gone, not the feature.
    uint64_t total = 0;
    rsmi_status_t status = api_.rsmi_dev_memory_total_get(index, RSMI_MEM_TYPE_VRAM, &total);
    if (status != RSMI_STATUS_SUCCESS) {
      return NotAnswering(device, "rsmi_dev_memory_total_get", status, ProbeMeansLost(status));
    }
    if (total > 0 && total <= static_cast<uint64_t>(rocm_smi::kMaxDeviceMemoryBytes)) {
      sample.memory_total_bytes = static_cast<int64_t>(total);
    }
    if (api_.rsmi_dev_busy_percent_get != nullptr) {
      uint32_t busy = 0;
      status = api_.rsmi_dev_busy_percent_get(index, &busy);
      if (MeansLost(status)) return NotAnswering(device, "rsmi_dev_busy_percent_get", status, true);
      if (status == RSMI_STATUS_SUCCESS && busy <= 100) sample.utilization_pct = busy;
    }
    if (api_.rsmi_dev_memory_usage_get != nullptr) {
      uint64_t used = 0;
      status = api_.rsmi_dev_memory_usage_get(index, RSMI_MEM_TYPE_VRAM, &used);
      if (MeansLost(status)) return NotAnswering(device, "rsmi_dev_memory_usage_get", status, true);
      if (status == RSMI_STATUS_SUCCESS && sample.memory_total_bytes > 0 &&
          used <= static_cast<uint64_t>(sample.memory_total_bytes)) {
        sample.memory_used_bytes = static_cast<int64_t>(used);
      }
    }
    Tracked& tracked = devices_[index];
    tracked.lost = false;  // it answered (again)

    if (api_.rsmi_dev_memory_busy_percent_get != nullptr) {
      uint32_t busy = 0;
      if (api_.rsmi_dev_memory_busy_percent_get(index, &busy) == RSMI_STATUS_SUCCESS && busy <= 100) {
        sample.memory_utilization_pct = busy;
      }
    }
    rocm_smi::ReadTemperature(api_, index, sample);
    rocm_smi::ReadPower(api_, index, sample);
    rocm_smi::ReadClocks(api_, index, sample);
    rocm_smi::ReadEcc(api_, index, sample);
    rocm_smi::ReadProcesses(api_, index, static_cast<uint32_t>(devices_.size()), sample);

    // Counts only grow while the driver runs; a drop (driver reload)
    // re-bases without an event.
    if (sample.ecc_uncorrected >= 0) {
      if (tracked.uncorrected >= 0 && sample.ecc_uncorrected > tracked.uncorrected) {
        const int64_t added = sample.ecc_uncorrected - tracked.uncorrected;
        events_.push_back({device, HealthEvent::Kind::kEccUncorrected, added,
                           Label(device) + ": " + std::to_string(added) + " new uncorrectable ecc error(s), " +
                               std::to_string(sample.ecc_uncorrected) + " in all"});
      }
      tracked.uncorrected = sample.ecc_uncorrected;
    }
    return sample;
  }

  std::vector<HealthEvent> TakeEvents() override {
    PollNotifications();
    std::vector<HealthEvent> taken;
    taken.swap(events_);
    return taken;
  }

 private:
  // What Sample() and TakeEvents() remember of a discovered device.
  struct Tracked {
    std::string uuid;
    int numa_node = 0;
    bool lost = false;         // a kDeviceLost was queued and it has not answered since
    int64_t uncorrected = -1;  // the last known uncorrectable ECC count
  };

  Status Load() {
    if (library_ != nullptr) return Status::Ok();
    auto library = runtime::DynamicLibrary::Open(lib_.names);
    if (!library.ok()) return Unavailable("rocm-smi: " + library.status().message());
    library_ = std::move(library).value();
    return Status::Ok();
  }

  std::string Label(int device) const {
    return "rocm-smi device " + std::to_string(device) + " (" + devices_[static_cast<size_t>(device)].uuid + ")";
  }

  // Fails a Sample(); queues one kDeviceLost per outage when `lost`.
  Status NotAnswering(int device, const char* call, rsmi_status_t status, bool lost) {
    const std::string message = Label(device) + " does not answer: " + RsmiError(api_, call, status, device);
    Tracked& tracked = devices_[static_cast<size_t>(device)];
    if (lost && !tracked.lost) {
      tracked.lost = true;
      events_.push_back(
          {device, HealthEvent::Kind::kDeviceLost, static_cast<int64_t>(static_cast<uint32_t>(status)), message});
    }
    return Unavailable(message);
  }

  std::string DriverVersion() const {
    if (api_.rsmi_version_str_get == nullptr) return "";
    return rocm_smi::ReadString(
        [&](char* buffer, uint32_t length) { return api_.rsmi_version_str_get(RSMI_SW_COMP_DRIVER, buffer, length); });
  }

  // `earlier` are the devices already described, to keep uuids unique.
  Result<GpuDevice> Describe(uint32_t index, const std::vector<GpuDevice>& earlier) {
    const std::string where = "device " + std::to_string(index);
    GpuDevice device;
    device.index = static_cast<int>(index);
    device.vendor = "amd";
    device.backend = "rocm-smi";

    uint16_t id = 0;
    const bool has_id = api_.rsmi_dev_id_get != nullptr && api_.rsmi_dev_id_get(index, &id) == RSMI_STATUS_SUCCESS;
    if (has_id) {
      char text[8];
      std::snprintf(text, sizeof(text), "0x%04x", static_cast<unsigned>(id));
      device.architecture = text;
    }
    if (api_.rsmi_dev_name_get != nullptr) {
      device.model = rocm_smi::ReadString(
          [&](char* buffer, uint32_t length) { return api_.rsmi_dev_name_get(index, buffer, length); });
    }
    if (device.model.empty()) device.model = has_id ? "AMD GPU " + device.architecture : "AMD GPU";

    uint64_t memory = 0;
    rsmi_status_t status = api_.rsmi_dev_memory_total_get(index, RSMI_MEM_TYPE_VRAM, &memory);
    if (status != RSMI_STATUS_SUCCESS) {
      return Unavailable("rocm-smi: " + RsmiError(api_, "rsmi_dev_memory_total_get", status, static_cast<int>(index)));
    }
    if (memory == 0 || memory > static_cast<uint64_t>(rocm_smi::kMaxDeviceMemoryBytes)) {
      return Internal("rocm-smi " + where + " ('" + device.model + "') reported " + std::to_string(memory) +
                      " bytes of vram");
    }
    device.memory_bytes = static_cast<int64_t>(memory);

    uint64_t bdfid = 0;
    if (api_.rsmi_dev_pci_id_get != nullptr && api_.rsmi_dev_pci_id_get(index, &bdfid) == RSMI_STATUS_SUCCESS) {
      device.pci_bus_id = rocm_smi::FormatPciBusId(bdfid);
    }
    device.numa_node = rocm_smi::NumaNode(api_, index);
    device.uuid = rocm_smi::DeviceUuid(api_, index, device.pci_bus_id, std::to_string(index) + ":" + device.model);
    // Partitions of one GPU (MI300X in CPX mode) can share its unique id:
    // the later ones get "-1", "-2", ... in enumeration order, which ROCm
    // SMI keeps sorted by PCI address.
    int copies = 0;
    for (const GpuDevice& other : earlier) {
      if (other.uuid == device.uuid || other.uuid.compare(0, device.uuid.size() + 1, device.uuid + "-") == 0) {
        ++copies;
      }
    }
    if (copies > 0) device.uuid += "-" + std::to_string(copies);
    return device;
  }

  std::vector<DeviceLink> ComputeLinks() const {
    const size_t n = devices_.size();
    if (api_.rsmi_topo_get_link_type == nullptr || n == 0) return {};
    std::vector<DeviceLink> links(n * n, DeviceLink::kCrossSocket);
    for (size_t i = 0; i < n; ++i) {
      links[i * n + i] = DeviceLink::kFabric;
      for (size_t j = i + 1; j < n; ++j) {
        uint64_t hops = 0;
        RSMI_IO_LINK_TYPE type = RSMI_IOLINK_TYPE_UNDEFINED;
        if (api_.rsmi_topo_get_link_type(static_cast<uint32_t>(i), static_cast<uint32_t>(j), &hops, &type) !=
            RSMI_STATUS_SUCCESS) {
          return {};
        }
        DeviceLink link;
        if (type == RSMI_IOLINK_TYPE_XGMI && hops <= 1) {
          link = DeviceLink::kFabric;
        } else if (hops >= 3 || devices_[i].numa_node != devices_[j].numa_node) {
          link = DeviceLink::kCrossSocket;
        } else {
          link = DeviceLink::kSameNuma;
        }
        links[i * n + j] = link;
        links[j * n + i] = link;
      }
    }
    return links;
  }

  // Subscribes every device to the driver's thermal-throttle and pre-reset
  // notifications. Best effort: a device whose subscription fails (old
  // kernel, no /dev/kfd access) simply raises none.
  void StartNotifications() {
    if (!api_.HasEventNotification()) return;
    const uint64_t mask = RSMI_EVENT_MASK_FROM_INDEX(RSMI_EVT_NOTIF_THERMAL_THROTTLE) |
                          RSMI_EVENT_MASK_FROM_INDEX(RSMI_EVT_NOTIF_GPU_PRE_RESET);
    for (size_t i = 0; i < devices_.size(); ++i) {
      const auto index = static_cast<uint32_t>(i);
      if (api_.rsmi_event_notification_init(index) != RSMI_STATUS_SUCCESS) continue;
      if (api_.rsmi_event_notification_mask_set(index, mask) != RSMI_STATUS_SUCCESS) {
        (void)api_.rsmi_event_notification_stop(index);
        continue;
      }
      notifying_.push_back(index);
    }
  }

  void StopNotifications() {
    for (uint32_t index : notifying_) (void)api_.rsmi_event_notification_stop(index);
    notifying_.clear();
  }

  // Never blocks: rsmi_event_notification_get polls with a 0 ms timeout.
  void PollNotifications() {
    if (notifying_.empty()) return;
    std::vector<rsmi_evt_notification_data_t> batch(kEventBatch);
    for (int round = 0; round < kMaxEventBatches; ++round) {
      uint32_t count = kEventBatch;
      // RSMI_STATUS_NO_DATA: nothing pending. Any other failure: try again
      // on the next call rather than fail the caller.
      if (api_.rsmi_event_notification_get(0, &count, batch.data()) != RSMI_STATUS_SUCCESS) {
        return;
      }
      count = std::min(count, kEventBatch);
      for (uint32_t k = 0; k < count; ++k) Notify(batch[k]);
      if (count < kEventBatch) return;
    }
  }

  void Notify(const rsmi_evt_notification_data_t& data) {
    if (data.dv_ind >= devices_.size()) return;
    const int device = static_cast<int>(data.dv_ind);
    std::string detail = rocm_smi::internal::CleanString(data.message, sizeof(data.message));
    if (!detail.empty()) detail = " (" + detail + ")";
    switch (data.event) {
      case RSMI_EVT_NOTIF_THERMAL_THROTTLE:
        events_.push_back({device, HealthEvent::Kind::kThermal, static_cast<int64_t>(data.event),
                           Label(device) + ": the driver reports thermal throttling" + detail});
        break;
      case RSMI_EVT_NOTIF_GPU_PRE_RESET:
        // A reset kills every context on the device: the work placed there
        // is lost even if the device comes back.
        events_.push_back({device, HealthEvent::Kind::kDeviceLost, static_cast<int64_t>(data.event),
                           Label(device) + ": the driver is resetting the gpu" + detail});
        break;
      default: break;  // not subscribed (VM faults belong to a process, not the device)
    }
  }

  VendorLibrary lib_;
  std::unique_ptr<runtime::DynamicLibrary> library_;  // from the first IsAvailable / Initialize
  RocmSmiApi api_;                                    // resolved, valid once initialized_
  bool initialized_ = false;                          // rsmi_init succeeded: rsmi_shut_down is owed
  std::vector<Tracked> devices_;                      // of the last Discover(), by device index
  std::vector<DeviceLink> links_;
  std::vector<uint32_t> notifying_;  // devices subscribed to driver notifications
  std::vector<HealthEvent> events_;  // queued for TakeEvents()
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeRocmSmiBackend(VendorLibrary lib) {
  return std::make_unique<RocmSmiBackend>(std::move(lib));
}

}  // namespace drover::agent
