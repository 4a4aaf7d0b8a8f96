// The nvml backend: NVIDIA GPUs through NVML (libnvidia-ml.so.1), opened at
// run time. No NVIDIA header is included and nothing links NVML, so the
// agent runs where it is absent; nvml_abi.h declares the subset used.
//
// Discovery: nvmlDeviceGetCount / GetHandleByIndex, then per device name,
// UUID, PCI bus id, memory, compute capability, NUMA node and MIG instances.
// NUMA node: nvmlDeviceGetMemoryAffinity (the CPU-side node nearest the GPU,
// what CPU pinning wants), else nvmlDeviceGetNumaNodeId (which on coherent
// platforms such as Grace Hopper names the GPU's own memory node), else 0 --
// the agent's hwloc topology, keyed by PCI bus id, is the better source then.
//
// Telemetry fields a GPU does not support stay unknown. A call that answers
// NVML_ERROR_GPU_IS_LOST or NVML_ERROR_RESET_REQUIRED makes Sample() fail
// with kUnavailable and queues one kDeviceLost health event for the device.
// XID and double-bit ECC events come from an NVML event set, drained without
// waiting by TakeEvents(); where a device cannot deliver ECC events, a rise
// of its volatile double-bit count between samples is reported instead.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/nvml/nvml_abi.h"
#include "drover/agent/devices/nvml/nvml_api.h"
#include "drover/agent/devices/nvml/nvml_util.h"
#include "drover/common/quantity.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent {

namespace {

using namespace nvml;  // NOLINT(google-build-using-namespace): the ABI names are spelled as in nvml.h

// Sanity limits on what a (possibly broken) library reports: far above any
// real machine, low enough that garbage cannot make us allocate gigabytes or
// hand the scheduler nonsense.
constexpr unsigned int kMaxDevices = 64;
constexpr unsigned int kMaxMigDevices = 64;
constexpr unsigned int kMaxProcesses = 4096;
constexpr unsigned long long kMaxDeviceMemoryBytes = 1024ull * static_cast<unsigned long long>(kTiB);
constexpr unsigned int kMaxTemperatureC = 200;
constexpr unsigned int kMaxPowerMilliwatts = 10'000'000;  // 10 kW
constexpr unsigned int kMaxClockMhz = 100'000;
constexpr unsigned int kMaxNumaNode = 4096;
constexpr int kMaxEventsPerTake = 1024;
constexpr unsigned long long kHealthEvents = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;

std::string InitHint(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_ERROR_DRIVER_NOT_LOADED: return " (the NVIDIA kernel driver is not loaded)";
    case NVML_ERROR_NO_PERMISSION: return " (no permission to open the NVIDIA device files)";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return " (libnvidia-ml and the kernel driver are of different versions; reload the driver or reboot)";
    default: return "";
  }
}

int64_t CheckedMemory(unsigned long long bytes) {
  return bytes == NVML_VALUE_NOT_AVAILABLE_ULL || bytes > kMaxDeviceMemoryBytes ? -1 : static_cast<int64_t>(bytes);
}

// Not thread-safe: owned by the agent that created it, called from its
// telemetry thread. Holds NVML initialized (ref-counted by NVML itself) from
// Initialize() until destruction; changes nothing on the devices.
class NvmlBackend final : public DeviceBackend {
 public:
  explicit NvmlBackend(VendorLibrary lib) : lib_(std::move(lib)) {}

  ~NvmlBackend() override {
    if (event_set_ != nullptr) api_.event_set_free(event_set_);
    if (initialized_) api_.shutdown();
  }

  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  std::string_view Name() const override { return "nvml"; }

  bool IsAvailable() override { return OpenLibrary().ok(); }

  Status Initialize() override {
    if (initialized_) return Status::Ok();
    DROVER_RETURN_IF_ERROR(OpenLibrary());
    DROVER_ASSIGN_OR_RETURN(api_, ResolveNvmlApi(*library_));
    nvmlReturn_t rc = api_.init();
    if (rc != NVML_SUCCESS) return Unavailable("nvml: " + NvmlError(api_.init_name, -1, rc) + InitHint(rc));
    initialized_ = true;
    return Status::Ok();
  }

  Result<std::vector<GpuDevice>> Discover() override {
    DROVER_RETURN_IF_ERROR(Initialize());
    devices_.clear();
    links_.clear();

    unsigned int count = 0;
    nvmlReturn_t rc = api_.device_get_count(&count);
    if (rc != NVML_SUCCESS) return Unavailable("nvml: " + NvmlError(api_.device_get_count_name, -1, rc));
    if (count > kMaxDevices) {
      return Internal("nvml reported " + std::to_string(count) + " devices, more than " + std::to_string(kMaxDevices));
    }
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    rc = api_.system_get_driver_version(version, sizeof(version));
    if (rc != NVML_SUCCESS) return Unavailable("nvml: " + NvmlError("nvmlSystemGetDriverVersion", -1, rc));
    Result<std::string> driver = BufferString(version, sizeof(version));
    if (!driver.ok()) return Internal("nvml driver version: " + driver.status().message());
    ChooseProcessCall(driver.value());

    std::vector<Device> found;
    std::vector<GpuDevice> devices;
    for (unsigned int i = 0; i < count; ++i) {
      const int index = static_cast<int>(i);
      nvmlDevice_t handle = nullptr;
      DROVER_RETURN_IF_ERROR(
          Check(api_.device_get_handle_by_index(i, &handle), api_.device_get_handle_by_index_name, index));
      if (handle == nullptr) return Internal("nvml returned a null handle for device " + std::to_string(i));
      Device record;
      record.handle = handle;
      DROVER_ASSIGN_OR_RETURN(GpuDevice device, Describe(index, handle, &record.numa_node));
      device.driver_version = driver.value();
      record.pci_bus_id = device.pci_bus_id;
      found.push_back(std::move(record));
      devices.push_back(std::move(device));
    }
    devices_ = std::move(found);
    RegisterEvents();
    links_ = BuildLinks(GatherLinkFacts());
    return devices;
  }

  std::vector<DeviceLink> Links() const override { return links_; }

  Result<GpuSample> Sample(int device) override {
    if (device < 0 || static_cast<size_t>(device) >= devices_.size()) {
      return NotFound("nvml device " + std::to_string(device) + " was not discovered (" +
                      std::to_string(devices_.size()) + " devices)");
    }
    Device& dev = devices_[static_cast<size_t>(device)];
    nvmlDevice_t h = dev.handle;
    GpuSample sample;
    Status lost;
    nvmlReturn_t lost_code = NVML_SUCCESS;
    // True on success; false leaves the field unknown, and remembers the
    // first call that found the device lost.
    auto ok = [&](nvmlReturn_t rc, const char* call) {
      if (rc == NVML_SUCCESS) return true;
      if (IsDeviceLost(rc) && lost.ok()) {
        lost = Unavailable("nvml: " + NvmlError(call, device, rc));
        lost_code = rc;
      }
      return false;
    };

    nvmlUtilization_t utilization{};
    if (ok(api_.device_get_utilization_rates(h, &utilization), "nvmlDeviceGetUtilizationRates") &&
        utilization.gpu <= 100 && utilization.memory <= 100) {
      sample.utilization_pct = utilization.gpu;
      sample.memory_utilization_pct = utilization.memory;
    }
    nvmlMemory_t memory{};
    if (ok(api_.device_get_memory_info(h, &memory), "nvmlDeviceGetMemoryInfo") && memory.total > 0 &&
        memory.total <= kMaxDeviceMemoryBytes && memory.used <= memory.total) {
      sample.memory_total_bytes = static_cast<int64_t>(memory.total);
      sample.memory_used_bytes = static_cast<int64_t>(memory.used);
    }
    unsigned int value = 0;
    if (ok(api_.device_get_temperature(h, NVML_TEMPERATURE_GPU, &value), "nvmlDeviceGetTemperature") &&
        value <= kMaxTemperatureC) {
      sample.temperature_c = value;
    }
    if (ok(api_.device_get_power_usage(h, &value), "nvmlDeviceGetPowerUsage") && value <= kMaxPowerMilliwatts) {
      sample.power_w = value / 1000.0;
    }
    if (api_.device_get_enforced_power_limit != nullptr &&
        ok(api_.device_get_enforced_power_limit(h, &value), "nvmlDeviceGetEnforcedPowerLimit") &&
        value <= kMaxPowerMilliwatts) {
      sample.power_limit_w = value / 1000.0;
    }
    if (ok(api_.device_get_clock_info(h, NVML_CLOCK_SM, &value), "nvmlDeviceGetClockInfo") && value <= kMaxClockMhz) {
      sample.sm_clock_mhz = static_cast<int>(value);
    }
    if (ok(api_.device_get_clock_info(h, NVML_CLOCK_MEM, &value), "nvmlDeviceGetClockInfo") && value <= kMaxClockMhz) {
      sample.memory_clock_mhz = static_cast<int>(value);
    }
    unsigned long long reasons = 0;
    if (api_.device_get_throttle_reasons != nullptr &&
        ok(api_.device_get_throttle_reasons(h, &reasons), "nvmlDeviceGetCurrentClocksThrottleReasons")) {
      sample.throttle = ThrottleBits(reasons);
    }
    if (api_.device_get_total_ecc_errors != nullptr) {
      unsigned long long errors = 0;
      constexpr auto kMax = static_cast<unsigned long long>(std::numeric_limits<int64_t>::max());
      if (ok(api_.device_get_total_ecc_errors(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &errors),
             "nvmlDeviceGetTotalEccErrors") &&
          errors <= kMax) {
        sample.ecc_corrected = static_cast<int64_t>(errors);
      }
      if (ok(api_.device_get_total_ecc_errors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors),
             "nvmlDeviceGetTotalEccErrors") &&
          errors <= kMax) {
        sample.ecc_uncorrected = static_cast<int64_t>(errors);
      }
    }
    if (api_.device_get_remapped_rows != nullptr) {
      unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      if (ok(api_.device_get_remapped_rows(h, &corrected, &uncorrected, &pending, &failed),
             "nvmlDeviceGetRemappedRows")) {
        sample.row_remap_failure = failed != 0 ? 1 : 0;
      }
    }
    ReadNvLinkErrors(h, &sample);
    if (process_call_ != nullptr) {
      nvmlReturn_t rc = process_layout_ == 1 ? ReadProcesses<nvmlProcessInfo_v1_t>(h, &sample)
                                             : ReadProcesses<nvmlProcessInfo_v2_t>(h, &sample);
      ok(rc, api_.device_get_compute_running_processes_name);
    }

    if (!lost.ok()) {
      if (!dev.lost) {
        dev.lost = true;
        pending_.push_back(HealthEvent{device, HealthEvent::Kind::kDeviceLost, lost_code, lost.message()});
      }
      return lost;
    }
    dev.lost = false;
    NoteUncorrectedCount(device, sample.ecc_uncorrected);
    return sample;
  }

  std::vector<HealthEvent> TakeEvents() override {
    std::vector<HealthEvent> events = std::move(pending_);
    pending_.clear();
    DrainEventSet(&events);
    return events;
  }

 private:
  struct Device {
    nvmlDevice_t handle = nullptr;
    std::string pci_bus_id;
    int numa_node = -1;             // -1: unknown
    bool lost = false;              // a kDeviceLost event was queued and no sample has worked since
    bool ecc_events = false;        // double-bit ECC errors arrive as events
    int64_t last_uncorrected = -1;  // volatile double-bit count of the last sample
  };

  Status OpenLibrary() {
    if (library_ != nullptr) return Status::Ok();
    DROVER_ASSIGN_OR_RETURN(library_, runtime::DynamicLibrary::Open(lib_.names));
    return Status::Ok();
  }

  // Ok for NVML_SUCCESS; otherwise kUnavailable naming the call and the
  // device, after queueing kDeviceLost when the device is gone.
  Status Check(nvmlReturn_t rc, std::string_view call, int device) {
    if (rc == NVML_SUCCESS) return Status::Ok();
    std::string message = "nvml: " + NvmlError(call, device, rc);
    if (IsDeviceLost(rc)) pending_.push_back(HealthEvent{device, HealthEvent::Kind::kDeviceLost, rc, message});
    return Unavailable(std::move(message));
  }

  // Sets *numa_node to the device's NUMA node, -1 when unknown.
  Result<GpuDevice> Describe(int index, nvmlDevice_t h, int* numa_node) {
    const std::string where = "nvml device " + std::to_string(index);
    GpuDevice device;
    device.index = index;
    device.vendor = "nvidia";
    device.backend = "nvml";

    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    DROVER_RETURN_IF_ERROR(Check(api_.device_get_name(h, name, sizeof(name)), "nvmlDeviceGetName", index));
    Result<std::string> model = BufferString(name, sizeof(name));
    if (!model.ok()) return Internal(where + " name: " + model.status().message());
    device.model = std::move(model).value();

    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    DROVER_RETURN_IF_ERROR(Check(api_.device_get_uuid(h, uuid, sizeof(uuid)), "nvmlDeviceGetUUID", index));
    Result<std::string> id = BufferString(uuid, sizeof(uuid));
    if (!id.ok()) return Internal(where + " ('" + device.model + "') uuid: " + id.status().message());
    device.uuid = std::move(id).value();

    nvmlMemory_t memory{};
    DROVER_RETURN_IF_ERROR(Check(api_.device_get_memory_info(h, &memory), "nvmlDeviceGetMemoryInfo", index));
    if (memory.total == 0 || memory.total > kMaxDeviceMemoryBytes) {
      return Internal(where + " ('" + device.model + "') reported " + std::to_string(memory.total) +
                      " bytes of memory");
    }
    device.memory_bytes = static_cast<int64_t>(memory.total);

    DROVER_ASSIGN_OR_RETURN(device.pci_bus_id, PciBusId(index, h));

    if (api_.device_get_cuda_compute_capability != nullptr) {
      int major = 0;
      int minor = 0;
      if (api_.device_get_cuda_compute_capability(h, &major, &minor) == NVML_SUCCESS) {
        device.architecture = ArchitectureFor(major, minor);
      }
    }
    *numa_node = NumaNode(h);
    device.numa_node = std::max(*numa_node, 0);
    DROVER_RETURN_IF_ERROR(DescribeMig(index, h, &device));
    return device;
  }

  // "" when the library does not support PCI info for the device.
  Result<std::string> PciBusId(int index, nvmlDevice_t h) {
    std::string raw;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (api_.device_get_pci_info_v3 != nullptr) {
      nvmlPciInfo_t pci{};
      rc = api_.device_get_pci_info_v3(h, &pci);
      Result<std::string> text = BufferString(pci.busId, sizeof(pci.busId));
      if (!text.ok()) text = BufferString(pci.busIdLegacy, sizeof(pci.busIdLegacy));
      if (text.ok()) raw = std::move(text).value();
    } else {
      nvmlPciInfoLegacy_t pci{};
      rc = api_.device_get_pci_info_legacy(h, &pci);
      Result<std::string> text = BufferString(pci.busId, sizeof(pci.busId));
      if (text.ok()) raw = std::move(text).value();
    }
    if (rc == NVML_ERROR_NOT_SUPPORTED) return std::string();
    DROVER_RETURN_IF_ERROR(Check(rc, api_.device_get_pci_info_name, index));
    Result<std::string> normal = NormalizePciBusId(raw);
    if (!normal.ok()) return Internal("nvml device " + std::to_string(index) + ": " + normal.status().message());
    return normal;
  }

  // -1 when unknown.
  int NumaNode(nvmlDevice_t h) {
    if (api_.device_get_memory_affinity != nullptr) {
      unsigned long node_set[4] = {};  // 256 nodes on LP64
      if (api_.device_get_memory_affinity(h, 4, node_set, NVML_AFFINITY_SCOPE_NODE) == NVML_SUCCESS) {
        for (int word = 0; word < 4; ++word) {
          if (node_set[word] != 0) {
            return word * static_cast<int>(sizeof(unsigned long) * 8) + std::countr_zero(node_set[word]);
          }
        }
      }
    }
    unsigned int node = 0;
    if (api_.device_get_numa_node_id != nullptr && api_.device_get_numa_node_id(h, &node) == NVML_SUCCESS &&
        node <= kMaxNumaNode) {
      return static_cast<int>(node);
    }
    return -1;
  }

  Status DescribeMig(int index, nvmlDevice_t h, GpuDevice* device) {
    if (api_.device_get_mig_mode == nullptr) return Status::Ok();
    unsigned int current = 0;
    unsigned int pending = 0;
    nvmlReturn_t rc = api_.device_get_mig_mode(h, &current, &pending);
    if (IsDeviceLost(rc)) return Check(rc, "nvmlDeviceGetMigMode", index);
    if (rc != NVML_SUCCESS || current != NVML_DEVICE_MIG_ENABLE) return Status::Ok();
    device->mig_enabled = true;
    if (api_.device_get_max_mig_device_count == nullptr || api_.device_get_mig_device_handle_by_index == nullptr) {
      return Status::Ok();
    }
    unsigned int max = 0;
    rc = api_.device_get_max_mig_device_count(h, &max);
    if (rc != NVML_SUCCESS) return IsDeviceLost(rc) ? Check(rc, "nvmlDeviceGetMaxMigDeviceCount", index) : Status::Ok();
    if (max > kMaxMigDevices) {
      return Internal("nvml device " + std::to_string(index) + " reported " + std::to_string(max) +
                      " MIG devices, more than " + std::to_string(kMaxMigDevices));
    }
    for (unsigned int m = 0; m < max; ++m) {
      nvmlDevice_t mig = nullptr;
      // NVML_ERROR_NOT_FOUND: no MIG device in this slot.
      if (api_.device_get_mig_device_handle_by_index(h, m, &mig) != NVML_SUCCESS || mig == nullptr) continue;
      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      if (api_.device_get_uuid(mig, uuid, sizeof(uuid)) != NVML_SUCCESS) continue;
      Result<std::string> id = BufferString(uuid, sizeof(uuid));
      if (!id.ok()) continue;
      MigInstance instance;
      instance.uuid = std::move(id).value();
      nvmlMemory_t memory{};
      if (api_.device_get_memory_info(mig, &memory) == NVML_SUCCESS && memory.total <= kMaxDeviceMemoryBytes) {
        instance.memory_bytes = static_cast<int64_t>(memory.total);
      }
      unsigned int value = 0;
      if (api_.device_get_gpu_instance_id != nullptr && api_.device_get_gpu_instance_id(mig, &value) == NVML_SUCCESS &&
          value < kMaxMigDevices) {
        instance.gpu_instance_id = static_cast<int>(value);
      }
      if (api_.device_get_compute_instance_id != nullptr &&
          api_.device_get_compute_instance_id(mig, &value) == NVML_SUCCESS && value < kMaxMigDevices) {
        instance.compute_instance_id = static_cast<int>(value);
      }
      device->mig_instances.push_back(std::move(instance));
    }
    return Status::Ok();
  }

  void ChooseProcessCall(const std::string& driver_version) {
    process_call_ = api_.device_get_compute_running_processes;
    process_layout_ = api_.processes_version == 1 ? 1 : 2;
    if (api_.processes_version == 3 && ProcessesV3LayoutIsBroken(driver_version)) {
      process_call_ = api_.device_get_compute_running_processes_v2;  // null: processes stay unknown
      process_layout_ = 2;
    }
  }

  // Fills sample->processes from the compute-process call whose array
  // holds `Info`s; returns the call's last answer.
  template <typename Info>
  nvmlReturn_t ReadProcesses(nvmlDevice_t h, GpuSample* sample) {
    unsigned int capacity = 16;
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::vector<Info> infos(capacity);
      unsigned int count = capacity;
      nvmlReturn_t rc = process_call_(h, &count, infos.data());
      if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        if (count > kMaxProcesses) return rc;
        capacity = std::max(count + 8, capacity * 2);  // processes may start between calls
        continue;
      }
      if (rc != NVML_SUCCESS || count > capacity) return rc;
      for (unsigned int i = 0; i < count; ++i) {
        if (infos[i].pid == 0) continue;
        sample->processes.push_back(ProcessUsage{infos[i].pid, CheckedMemory(infos[i].usedGpuMemory)});
      }
      sample->processes_known = true;
      return rc;
    }
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }

  void NoteUncorrectedCount(int device, int64_t count) {
    Device& dev = devices_[static_cast<size_t>(device)];
    if (count < 0) return;
    // The volatile count resets with the driver: a fall is no error.
    if (!dev.ecc_events && dev.last_uncorrected >= 0 && count > dev.last_uncorrected) {
      std::string message = "nvml device " + std::to_string(device) + " volatile double-bit ECC count rose from " +
                            std::to_string(dev.last_uncorrected) + " to " + std::to_string(count);
      pending_.push_back(
          HealthEvent{device, HealthEvent::Kind::kEccUncorrected, count - dev.last_uncorrected, std::move(message)});
    }
    dev.last_uncorrected = count;
  }

  // (Re)creates the event set and registers XID and double-bit ECC events
  // for every device that supports them; quietly does without otherwise.
  void RegisterEvents() {
    if (!api_.HasEvents()) return;
    if (event_set_ != nullptr) {
      DrainEventSet(&pending_);
      api_.event_set_free(event_set_);
      event_set_ = nullptr;
    }
    if (api_.event_set_create(&event_set_) != NVML_SUCCESS || event_set_ == nullptr) {
      event_set_ = nullptr;
      return;
    }
    for (size_t i = 0; i < devices_.size(); ++i) {
      nvmlDevice_t h = devices_[i].handle;
      unsigned long long wanted = kHealthEvents;
      unsigned long long supported = 0;
      if (api_.device_get_supported_event_types != nullptr &&
          api_.device_get_supported_event_types(h, &supported) == NVML_SUCCESS) {
        wanted &= supported;
      }
      unsigned long long registered = 0;
      if (wanted != 0 && api_.device_register_events(h, wanted, event_set_) == NVML_SUCCESS) {
        registered = wanted;
      } else {
        // One type the device lacks (no ECC on GeForce) fails both: try each alone.
        for (unsigned long long type : {nvmlEventTypeXidCriticalError, nvmlEventTypeDoubleBitEccError}) {
          if ((wanted & type) != 0 && api_.device_register_events(h, type, event_set_) == NVML_SUCCESS) {
            registered |= type;
          }
        }
      }
      devices_[i].ecc_events = (registered & nvmlEventTypeDoubleBitEccError) != 0;
    }
  }

  void DrainEventSet(std::vector<HealthEvent>* events) {
    if (event_set_ == nullptr) return;
    for (int n = 0; n < kMaxEventsPerTake; ++n) {
      nvmlEventData_t data{};
      // NVML_ERROR_TIMEOUT: nothing pending. Anything else: stop for now.
      if (api_.event_set_wait(event_set_, &data, 0) != NVML_SUCCESS) return;
      int device = -1;
      for (size_t i = 0; i < devices_.size(); ++i) {
        if (devices_[i].handle == data.device) device = static_cast<int>(i);
      }
      if (device < 0) continue;  // not a device of ours (a MIG handle, another Discover)
      const std::string where = "nvml device " + std::to_string(device);
      if ((data.eventType & nvmlEventTypeXidCriticalError) != 0) {
        // eventData 999: NVML saw an XID it does not know.
        events->push_back(HealthEvent{device, HealthEvent::Kind::kXid, static_cast<int64_t>(data.eventData),
                                      where + " reported xid " + std::to_string(data.eventData)});
      }
      if ((data.eventType & nvmlEventTypeDoubleBitEccError) != 0) {
        events->push_back(
            HealthEvent{device, HealthEvent::Kind::kEccUncorrected, 1, where + " reported a double-bit ECC error"});
      }
    }
  }

  LinkFacts GatherLinkFacts() {
    LinkFacts facts;
    const int n = static_cast<int>(devices_.size());
    facts.count = n;
    facts.on_nvswitch.assign(devices_.size(), false);
    for (const Device& dev : devices_) facts.numa_node.push_back(dev.numa_node);
    if (api_.device_get_nvlink_state != nullptr) {
      for (int i = 0; i < n; ++i) GatherNvLinks(i, &facts);
    }
    if (api_.device_get_topology_common_ancestor != nullptr) {
      facts.topology.assign(static_cast<size_t>(n) * static_cast<size_t>(n), -1);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) {
          int level = -1;
          if (i != j && api_.device_get_topology_common_ancestor(devices_[static_cast<size_t>(i)].handle,
                                                                 devices_[static_cast<size_t>(j)].handle,
                                                                 &level) == NVML_SUCCESS) {
            facts.topology[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)] = level;
          }
        }
      }
    }
    return facts;
  }

  // NVLink errors summed over the active links, into `sample`; left
  // unknown when no link is active or the driver counts none.
  void ReadNvLinkErrors(nvmlDevice_t h, GpuSample* sample) {
    if (api_.device_get_nvlink_error_counter == nullptr || api_.device_get_nvlink_state == nullptr) return;
    int64_t replay = 0, recovery = 0, crc = 0;
    bool any = false;
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      int active = NVML_FEATURE_DISABLED;
      if (api_.device_get_nvlink_state(h, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
      auto read = [&](int counter, int64_t* sum) {
        unsigned long long v = 0;
        // A count past 2^48 per link is a driver's garbage, not errors.
        if (api_.device_get_nvlink_error_counter(h, link, counter, &v) != NVML_SUCCESS || v > (1ull << 48)) return;
        *sum += static_cast<int64_t>(v);
        any = true;
      };
      read(NVML_NVLINK_ERROR_DL_REPLAY, &replay);
      read(NVML_NVLINK_ERROR_DL_RECOVERY, &recovery);
      read(NVML_NVLINK_ERROR_DL_CRC_FLIT, &crc);
      read(NVML_NVLINK_ERROR_DL_CRC_DATA, &crc);
    }
    if (!any) return;
    sample->nvlink_replay_errors = replay;
    sample->nvlink_recovery_errors = recovery;
    sample->nvlink_crc_errors = crc;
  }

  void GatherNvLinks(int i, LinkFacts* facts) {
    nvmlDevice_t h = devices_[static_cast<size_t>(i)].handle;
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      int active = NVML_FEATURE_DISABLED;
      // Links past the device's own count answer INVALID_ARGUMENT or NOT_SUPPORTED.
      if (api_.device_get_nvlink_state(h, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
      int type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
      if (api_.device_get_nvlink_remote_device_type != nullptr &&
          api_.device_get_nvlink_remote_device_type(h, link, &type) == NVML_SUCCESS &&
          type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
        facts->on_nvswitch[static_cast<size_t>(i)] = true;
        continue;
      }
      std::string raw;
      if (api_.device_get_nvlink_remote_pci_info_v2 != nullptr) {
        nvmlPciInfo_t pci{};
        if (api_.device_get_nvlink_remote_pci_info_v2(h, link, &pci) != NVML_SUCCESS) continue;
        Result<std::string> text = BufferString(pci.busId, sizeof(pci.busId));
        if (!text.ok()) text = BufferString(pci.busIdLegacy, sizeof(pci.busIdLegacy));
        if (text.ok()) raw = std::move(text).value();
      } else if (api_.device_get_nvlink_remote_pci_info_legacy != nullptr) {
        nvmlPciInfoLegacy_t pci{};
        if (api_.device_get_nvlink_remote_pci_info_legacy(h, link, &pci) != NVML_SUCCESS) continue;
        Result<std::string> text = BufferString(pci.busId, sizeof(pci.busId));
        if (text.ok()) raw = std::move(text).value();
      }
      Result<std::string> remote = NormalizePciBusId(raw);
      if (!remote.ok()) continue;
      for (size_t j = 0; j < devices_.size(); ++j) {
        if (static_cast<int>(j) != i && devices_[j].pci_bus_id == remote.value()) {
          facts->nvlink_pairs.emplace_back(i, static_cast<int>(j));
        }
      }
    }
  }

  VendorLibrary lib_;
  std::unique_ptr<runtime::DynamicLibrary> library_;
  NvmlApi api_;
  bool initialized_ = false;
  std::vector<Device> devices_;  // of the last Discover(), by index
  std::vector<DeviceLink> links_;
  nvmlEventSet_t event_set_ = nullptr;
  std::vector<HealthEvent> pending_;  // queued by Discover() and Sample() for TakeEvents()
  DeviceGetComputeRunningProcessesFn* process_call_ = nullptr;
  int process_layout_ = 2;  // 1: nvmlProcessInfo_v1_t, 2: nvmlProcessInfo_v2_t
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeNvmlBackend(VendorLibrary lib) {
  return std::make_unique<NvmlBackend>(std::move(lib));
}

}  // namespace drover::agent
