// The level-zero backend: initialization, discovery, fabric links and driver
// events. Sample() is in level_zero_sample.cc; see level_zero_backend.h.

#include "drover/agent/devices/level_zero/level_zero_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/quantity.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent {
namespace level_zero {

namespace {

// Sanity limits on what a (possibly broken) driver reports.
constexpr uint32_t kMaxDrivers = 32;
constexpr uint32_t kMaxDevices = 256;  // root devices, over all drivers
constexpr uint64_t kMaxDeviceMemoryBytes = 1024 * static_cast<uint64_t>(kTiB);

constexpr zes_event_type_flags_t kWatchedEvents =
    ZES_EVENT_TYPE_FLAG_DEVICE_DETACH | ZES_EVENT_TYPE_FLAG_DEVICE_RESET_REQUIRED |
    ZES_EVENT_TYPE_FLAG_RAS_UNCORRECTABLE_ERRORS | ZES_EVENT_TYPE_FLAG_TEMP_CRITICAL;

// The loader, opened once per list of names and never closed: it and the
// drivers it loads keep threads and global state (and the driver reads
// ZES_ENABLE_SYSMAN only in its first zeInit), which do not survive dlclose.
// A failure to load is not remembered, so IsAvailable() stays cheap to retry.
Result<runtime::DynamicLibrary*> OpenLibrary(const std::vector<std::string>& names) {
  static Mutex mu;
  static auto* const kOpened DROVER_PT_GUARDED_BY(mu) =
      new std::map<std::vector<std::string>, std::unique_ptr<runtime::DynamicLibrary>>();
  MutexLock lock(&mu);
  auto it = kOpened->find(names);
  if (it != kOpened->end()) return it->second.get();
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<runtime::DynamicLibrary> library, runtime::DynamicLibrary::Open(names));
  runtime::DynamicLibrary* raw = library.get();
  kOpened->emplace(names, std::move(library));
  return raw;
}

// A fixed-size string field: bounded by its array even without a NUL,
// trimmed, control bytes replaced, so no driver garbage reaches the server.
std::string CleanString(const char* text, size_t capacity) {
  std::string out(text, strnlen(text, capacity));
  for (char& c : out) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) c = ' ';
  }
  size_t begin = out.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  size_t end = out.find_last_not_of(' ');
  return out.substr(begin, end - begin + 1);
}

std::string VendorName(uint32_t vendor_id) {
  switch (vendor_id) {
    case 0x8086: return "intel";
    case 0x1002: return "amd";
    case 0x10de: return "nvidia";
    default: return "level-zero";
  }
}

std::string Hex(const uint8_t* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xf];
  }
  return out;
}

// "0000:3b:00.0", or empty when the address is out of the PCI ranges.
std::string PciBusId(const zes_pci_address_t& a) {
  if (a.bus > 0xff || a.device > 0x1f || a.function > 0x7) return "";
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function);
  return text;
}

// Keeps the candidates with the best (on sub-device, rank): the device-level
// components when the driver reports them, else every tile's. Rank < 0 drops.
template <typename Handle>
struct Candidate {
  Handle handle;
  bool on_subdevice;
  int rank;
};
template <typename Handle>
std::vector<Handle> Best(const std::vector<Candidate<Handle>>& candidates) {
  std::optional<std::pair<bool, int>> best;
  for (const auto& c : candidates) {
    if (c.rank < 0) continue;
    std::pair<bool, int> key{c.on_subdevice, c.rank};
    if (!best || key < *best) best = key;
  }
  std::vector<Handle> out;
  for (const auto& c : candidates) {
    if (best && c.rank >= 0 && std::make_pair(c.on_subdevice, c.rank) == *best) out.push_back(c.handle);
  }
  return out;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Enumerates one kind of a device's components (`enumerate`, null when the
// library lacks it) and keeps the best (see Best). `rank(&candidate)` reads
// the component's properties into the candidate and returns the result; a
// component whose properties fail is dropped, a lost device sets *lost.
template <typename Handle, typename EnumerateFn, typename RankFn>
std::vector<Handle> Choose(zes_device_handle_t device, EnumerateFn* enumerate, RankFn rank, bool* lost) {
  if (*lost || enumerate == nullptr) return {};
  auto found =
      Enumerate<Handle>(kMaxComponents, [&](uint32_t* count, Handle* out) { return enumerate(device, count, out); });
  if (IsLost(found.result)) *lost = true;
  if (!found.ok()) return {};
  std::vector<Candidate<Handle>> candidates;
  for (Handle handle : found.handles) {
    Candidate<Handle> candidate{handle, false, -1};
    ze_result_t result = rank(&candidate);
    if (IsLost(result)) {
      *lost = true;
      return {};
    }
    if (result == ZE_RESULT_SUCCESS) candidates.push_back(candidate);
  }
  return Best(candidates);
}

}  // namespace

bool LevelZeroBackend::IsAvailable() { return OpenLibrary(lib_.names).ok(); }

Status LevelZeroBackend::Initialize() {
  if (initialized_) return Status::Ok();
  DROVER_ASSIGN_OR_RETURN(runtime::DynamicLibrary * library, OpenLibrary(lib_.names));
  DROVER_ASSIGN_OR_RETURN(Api api, LoadApi(*library));
  ze_result_t result = ZE_RESULT_ERROR_UNINITIALIZED;
  std::string failure;
  if (api.HasZesInit()) {
    result = api.zesInit(0);
    if (result == ZE_RESULT_SUCCESS) {
      zes_path_ = true;
    } else {
      failure = CallError("zesInit", "", result);
    }
  }
  const bool has_ze = api.zeInit != nullptr && api.zeDriverGet != nullptr && api.zeDeviceGet != nullptr;
  if (!zes_path_ && has_ze) {
    // Before the first zeInit of the process; overwrite = 0 keeps the user's.
    setenv("ZES_ENABLE_SYSMAN", "1", 0);
    result = api.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (result != ZE_RESULT_SUCCESS) {
      if (!failure.empty()) failure += ", then ";
      failure += CallError("zeInit", "", result);
    }
  }
  if (result == ZE_RESULT_ERROR_UNINITIALIZED) {
    no_driver_ = true;  // the loader found no driver: 0 devices, not an error
  } else if (result != ZE_RESULT_SUCCESS) {
    return Unavailable("cannot initialize level zero sysman: " + failure);
  }
  api_ = api;
  initialized_ = true;
  return Status::Ok();
}

Result<std::vector<GpuDevice>> LevelZeroBackend::Discover() {
  DROVER_RETURN_IF_ERROR(Initialize());
  drivers_.clear();
  devices_.clear();
  links_.clear();
  events_.clear();
  auto found = DiscoverDevices();
  if (!found.ok()) {
    // Sample() must not reach half-described devices.
    drivers_.clear();
    devices_.clear();
    links_.clear();
  }
  return found;
}

Result<std::vector<GpuDevice>> LevelZeroBackend::DiscoverDevices() {
  std::vector<GpuDevice> found;
  if (no_driver_) return found;

  auto drivers = Enumerate<zes_driver_handle_t>(kMaxDrivers, [&](uint32_t* count, zes_driver_handle_t* out) {
    return zes_path_ ? api_.zesDriverGet(count, out) : api_.zeDriverGet(count, out);
  });
  const char* driver_get = zes_path_ ? "zesDriverGet" : "zeDriverGet";
  if (drivers.result == ZE_RESULT_ERROR_UNINITIALIZED) return found;  // no driver
  if (drivers.too_many) {
    return Internal("level zero reported " + std::to_string(drivers.count) + " drivers, more than " +
                    std::to_string(kMaxDrivers));
  }
  if (!drivers.ok()) return Unavailable(CallError(driver_get, "", drivers.result));

  const char* device_get = zes_path_ ? "zesDeviceGet" : "zeDeviceGet";
  for (size_t d = 0; d < drivers.handles.size(); ++d) {
    zes_driver_handle_t driver = drivers.handles[d];
    auto devices = Enumerate<zes_device_handle_t>(kMaxDevices, [&](uint32_t* count, zes_device_handle_t* out) {
      return zes_path_ ? api_.zesDeviceGet(driver, count, out) : api_.zeDeviceGet(driver, count, out);
    });
    const std::string where = "level zero driver " + std::to_string(d);
    if (devices.too_many) {
      return Internal(where + " reported " + std::to_string(devices.count) + " devices, more than " +
                      std::to_string(kMaxDevices));
    }
    if (!devices.ok()) return Unavailable(CallError(device_get, where, devices.result));
    drivers_.push_back({driver, {}, {}});
    for (zes_device_handle_t handle : devices.handles) {
      if (devices_.size() >= kMaxDevices) {
        return Internal("level zero drivers reported more than " + std::to_string(kMaxDevices) + " devices");
      }
      DeviceState state;
      state.handle = handle;
      state.driver = drivers_.size() - 1;
      devices_.push_back(std::move(state));
    }
  }

  std::set<std::string> uuids;
  for (size_t i = 0; i < devices_.size(); ++i) {
    DROVER_ASSIGN_OR_RETURN(GpuDevice device, Describe(&devices_[i], static_cast<int>(i)));
    if (!uuids.insert(device.uuid).second) {
      return Internal("level zero devices report the same uuid '" + device.uuid + "'");
    }
    found.push_back(std::move(device));
  }
  ComputeLinks();
  return found;
}

Result<GpuDevice> LevelZeroBackend::Describe(DeviceState* state, int index) {
  state->where = "level zero device " + std::to_string(index);
  zes_device_properties_t props{};
  props.stype = ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  props.core.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  ze_result_t result = api_.zesDeviceGetProperties(state->handle, &props);
  if (result != ZE_RESULT_SUCCESS) {
    return Unavailable(CallError("zesDeviceGetProperties", state->where, result));
  }
  GpuDevice device;
  device.index = index;
  device.backend = "level-zero";
  device.vendor = VendorName(props.core.vendorId);
  char id[16];
  std::snprintf(id, sizeof(id), "0x%04x", props.core.deviceId);
  device.architecture = id;
  device.model = CleanString(props.core.name, sizeof(props.core.name));
  if (device.model.empty()) device.model = "level zero device " + device.architecture;
  device.driver_version = CleanString(props.driverVersion, sizeof(props.driverVersion));
  // Sysman's placeholder for "cannot tell", misspelling included.
  if (device.driver_version == "unknown" || device.driver_version == "unkown") device.driver_version.clear();
  // numa_node stays 0: Sysman does not report it (the agent asks hwloc).

  bool lost = false;
  auto note = [&](ze_result_t r) {
    if (IsLost(r)) lost = true;
    return r == ZE_RESULT_SUCCESS;
  };
  if (api_.zesDevicePciGetProperties != nullptr) {
    zes_pci_properties_t pci{};
    pci.stype = ZES_STRUCTURE_TYPE_PCI_PROPERTIES;
    if (note(api_.zesDevicePciGetProperties(state->handle, &pci))) device.pci_bus_id = PciBusId(pci.address);
  }

  const uint8_t* uuid = props.core.uuid.id;
  bool all_zero = true;
  for (size_t i = 0; i < ZE_MAX_DEVICE_UUID_SIZE; ++i) all_zero = all_zero && uuid[i] == 0;
  if (!all_zero) {
    device.uuid = "ze-" + Hex(uuid, ZE_MAX_DEVICE_UUID_SIZE);
  } else if (!device.pci_bus_id.empty()) {
    device.uuid = "ze-pci-" + device.pci_bus_id;  // the slot is stable where the uuid is not
  } else {
    return Internal(state->where + " ('" + device.model + "') reports neither a uuid nor a pci address");
  }

  if (api_.zesDeviceGetState != nullptr) {
    zes_device_state_t device_state{};
    device_state.stype = ZES_STRUCTURE_TYPE_DEVICE_STATE;
    if (note(api_.zesDeviceGetState(state->handle, &device_state)) && device_state.reset != 0) {
      device.healthy = false;  // wedged or waiting for a repair reset
    }
  }
  if (!lost) lost = !ChooseComponents(state);
  if (state->memory_bytes > static_cast<int64_t>(kMaxDeviceMemoryBytes) || state->memory_bytes < 0) {
    return Internal(state->where + " ('" + device.model + "') reported more than " +
                    std::to_string(kMaxDeviceMemoryBytes) + " bytes of memory");
  }
  device.memory_bytes = state->memory_bytes;
  if (lost) device.healthy = false;

  if (!lost && api_.zesDeviceEventRegister != nullptr && api_.zesDriverEventListen != nullptr &&
      api_.zesDeviceEventRegister(state->handle, kWatchedEvents) == ZE_RESULT_SUCCESS) {
    drivers_[state->driver].devices.push_back(state->handle);
    drivers_[state->driver].indices.push_back(index);
  }
  return device;
}

bool LevelZeroBackend::ChooseComponents(DeviceState* state) {
  zes_device_handle_t h = state->handle;
  bool lost = false;
  auto is = [](ze_bool_t b) { return b != 0; };

  // Memory: the device-local modules; their physical size, else what is
  // allocatable, else (core handles only) what the runtime reports.
  std::map<zes_mem_handle_t, uint64_t> physical;
  state->memory = Choose<zes_mem_handle_t>(
      h, api_.zesMemoryGetProperties != nullptr ? api_.zesDeviceEnumMemoryModules : nullptr,
      [&](Candidate<zes_mem_handle_t>* c) {
        zes_mem_properties_t p{};
        p.stype = ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
        ze_result_t r = api_.zesMemoryGetProperties(c->handle, &p);
        c->on_subdevice = is(p.onSubdevice);
        c->rank = p.location == ZES_MEM_LOC_DEVICE ? 0 : -1;
        physical[c->handle] = p.physicalSize;
        return r;
      },
      &lost);
  uint64_t total = 0;
  for (zes_mem_handle_t m : state->memory) total = SaturatingAdd(total, physical[m]);
  if (total == 0 && !lost && api_.zesMemoryGetState != nullptr) {
    for (zes_mem_handle_t m : state->memory) {
      zes_mem_state_t s{};
      s.stype = ZES_STRUCTURE_TYPE_MEM_STATE;
      ze_result_t r = api_.zesMemoryGetState(m, &s);
      if (IsLost(r)) lost = true;
      if (r == ZE_RESULT_SUCCESS) total = SaturatingAdd(total, s.size);
    }
  }
  if (total == 0 && !lost && !zes_path_ && api_.zeDeviceGetMemoryProperties != nullptr) {
    uint32_t count = 0;
    ze_result_t r = api_.zeDeviceGetMemoryProperties(h, &count, nullptr);
    if (r == ZE_RESULT_SUCCESS && count > 0 && count <= kMaxComponents) {
      std::vector<ze_device_memory_properties_t> props(count);
      for (auto& p : props) {
        p = {};
        p.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
      }
      r = api_.zeDeviceGetMemoryProperties(h, &count, props.data());
      if (r == ZE_RESULT_SUCCESS) {
        for (uint32_t i = 0; i < count && i < props.size(); ++i) total = SaturatingAdd(total, props[i].totalSize);
      }
    }
    if (IsLost(r)) lost = true;
  }
  // Anything above the limit is rejected by Describe().
  state->memory_bytes = static_cast<int64_t>(std::min<uint64_t>(total, kMaxDeviceMemoryBytes + 1));

  state->engines = Choose<zes_engine_handle_t>(
      h, api_.zesEngineGetProperties != nullptr ? api_.zesDeviceEnumEngineGroups : nullptr,
      [&](Candidate<zes_engine_handle_t>* c) {
        zes_engine_properties_t p{};
        p.stype = ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES;
        ze_result_t r = api_.zesEngineGetProperties(c->handle, &p);
        c->on_subdevice = is(p.onSubdevice);
        c->rank = p.type == ZES_ENGINE_GROUP_ALL ? 0 : p.type == ZES_ENGINE_GROUP_COMPUTE_ALL ? 1 : -1;
        return r;
      },
      &lost);
  state->temperature = Choose<zes_temp_handle_t>(
      h, api_.zesTemperatureGetProperties != nullptr ? api_.zesDeviceEnumTemperatureSensors : nullptr,
      [&](Candidate<zes_temp_handle_t>* c) {
        zes_temp_properties_t p{};
        p.stype = ZES_STRUCTURE_TYPE_TEMP_PROPERTIES;
        ze_result_t r = api_.zesTemperatureGetProperties(c->handle, &p);
        c->on_subdevice = is(p.onSubdevice);
        c->rank = p.type == ZES_TEMP_SENSORS_GPU ? 0 : p.type == ZES_TEMP_SENSORS_GLOBAL ? 1 : -1;
        return r;
      },
      &lost);
  state->power = Choose<zes_pwr_handle_t>(
      h, api_.zesPowerGetProperties != nullptr ? api_.zesDeviceEnumPowerDomains : nullptr,
      [&](Candidate<zes_pwr_handle_t>* c) {
        zes_power_properties_t p{};
        p.stype = ZES_STRUCTURE_TYPE_POWER_PROPERTIES;
        ze_result_t r = api_.zesPowerGetProperties(c->handle, &p);
        c->on_subdevice = is(p.onSubdevice);
        c->rank = 0;
        return r;
      },
      &lost);
  auto clock = [&](zes_freq_domain_t domain) {
    return Choose<zes_freq_handle_t>(
        h, api_.zesFrequencyGetProperties != nullptr ? api_.zesDeviceEnumFrequencyDomains : nullptr,
        [&](Candidate<zes_freq_handle_t>* c) {
          zes_freq_properties_t p{};
          p.stype = ZES_STRUCTURE_TYPE_FREQ_PROPERTIES;
          ze_result_t r = api_.zesFrequencyGetProperties(c->handle, &p);
          c->on_subdevice = is(p.onSubdevice);
          c->rank = p.type == domain ? 0 : -1;
          return r;
        },
        &lost);
  };
  state->gpu_clock = clock(ZES_FREQ_DOMAIN_GPU);
  state->memory_clock = clock(ZES_FREQ_DOMAIN_MEMORY);

  // RAS: every error set, device-level and per tile (drivers report one or
  // the other), so the totals add up.
  std::map<zes_ras_handle_t, zes_ras_error_type_t> types;
  std::vector<zes_ras_handle_t> ras = Choose<zes_ras_handle_t>(
      h, api_.zesRasGetProperties != nullptr ? api_.zesDeviceEnumRasErrorSets : nullptr,
      [&](Candidate<zes_ras_handle_t>* c) {
        zes_ras_properties_t p{};
        p.stype = ZES_STRUCTURE_TYPE_RAS_PROPERTIES;
        ze_result_t r = api_.zesRasGetProperties(c->handle, &p);
        c->on_subdevice = false;
        c->rank = p.type == ZES_RAS_ERROR_TYPE_CORRECTABLE || p.type == ZES_RAS_ERROR_TYPE_UNCORRECTABLE ? 0 : -1;
        types[c->handle] = p.type;
        return r;
      },
      &lost);
  for (zes_ras_handle_t r : ras) state->ras.push_back({r, types[r]});

  state->last_activity.assign(state->engines.size(), std::nullopt);
  state->last_energy.assign(state->power.size(), std::nullopt);
  return !lost;
}

// Xe Link: device i and j are linked when each has a healthy port whose
// remote end is one of the other's ports (same fabric id). Only pairs the
// fabric joins are kFabric; the rest are left at the lowest value for the
// agent's hwloc pass to raise (MergeLinks). No fabric at all: {}.
void LevelZeroBackend::ComputeLinks() {
  links_.clear();
  if (api_.zesDeviceEnumFabricPorts == nullptr || api_.zesFabricPortGetProperties == nullptr ||
      api_.zesFabricPortGetState == nullptr || devices_.size() < 2) {
    return;
  }
  const size_t n = devices_.size();
  std::vector<std::set<uint32_t>> own(n);     // fabric ids of each device's ports
  std::vector<std::set<uint32_t>> remote(n);  // fabric ids its healthy ports reach
  for (size_t i = 0; i < n; ++i) {
    zes_device_handle_t h = devices_[i].handle;
    auto ports = Enumerate<zes_fabric_port_handle_t>(
        kMaxComponents,
        [&](uint32_t* count, zes_fabric_port_handle_t* out) { return api_.zesDeviceEnumFabricPorts(h, count, out); });
    if (!ports.ok()) continue;
    for (zes_fabric_port_handle_t port : ports.handles) {
      zes_fabric_port_properties_t props{};
      props.stype = ZES_STRUCTURE_TYPE_FABRIC_PORT_PROPERTIES;
      if (api_.zesFabricPortGetProperties(port, &props) != ZE_RESULT_SUCCESS) continue;
      own[i].insert(props.portId.fabricId);
      zes_fabric_port_state_t state{};
      state.stype = ZES_STRUCTURE_TYPE_FABRIC_PORT_STATE;
      if (api_.zesFabricPortGetState(port, &state) != ZE_RESULT_SUCCESS) continue;
      if (state.status == ZES_FABRIC_PORT_STATUS_HEALTHY) remote[i].insert(state.remotePortId.fabricId);
    }
  }
  auto reaches = [&](size_t a, size_t b) {
    for (uint32_t id : remote[a]) {
      if (own[b].count(id) != 0 && own[a].count(id) == 0) return true;
    }
    return false;
  };
  std::vector<DeviceLink> links(n * n, DeviceLink::kCrossSocket);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    links[i * n + i] = DeviceLink::kFabric;
    for (size_t j = i + 1; j < n; ++j) {
      if (reaches(i, j) && reaches(j, i)) {
        links[i * n + j] = links[j * n + i] = DeviceLink::kFabric;
        any = true;
      }
    }
  }
  if (any) links_ = std::move(links);
}

// Driver events (zesDriverEventListen with a zero timeout, so it never
// blocks) for the devices that registered in Discover().
std::vector<HealthEvent> LevelZeroBackend::TakeEvents() {
  for (Driver& driver : drivers_) {
    if (driver.devices.empty()) continue;
    std::vector<zes_event_type_flags_t> flags(driver.devices.size(), 0);
    uint32_t with_events = 0;
    ze_result_t r = api_.zesDriverEventListen(driver.handle, 0, static_cast<uint32_t>(driver.devices.size()),
                                              driver.devices.data(), &with_events, flags.data());
    if (r != ZE_RESULT_SUCCESS || with_events == 0) continue;
    for (size_t k = 0; k < driver.devices.size(); ++k) {
      const int index = driver.indices[k];
      const std::string& where = devices_[static_cast<size_t>(index)].where;
      auto raise = [&](zes_event_type_flags_t flag, HealthEvent::Kind kind, const std::string& what) {
        if ((flags[k] & flag) != 0) events_.push_back({index, kind, static_cast<int64_t>(flag), where + " " + what});
      };
      raise(ZES_EVENT_TYPE_FLAG_DEVICE_DETACH, HealthEvent::Kind::kDeviceLost, "was detached");
      raise(ZES_EVENT_TYPE_FLAG_DEVICE_RESET_REQUIRED, HealthEvent::Kind::kDeviceLost, "needs a reset");
      raise(ZES_EVENT_TYPE_FLAG_RAS_UNCORRECTABLE_ERRORS, HealthEvent::Kind::kEccUncorrected,
            "crossed its uncorrectable error threshold");
      raise(ZES_EVENT_TYPE_FLAG_TEMP_CRITICAL, HealthEvent::Kind::kThermal, "reached its critical temperature");
    }
  }
  return std::exchange(events_, {});
}

}  // namespace level_zero

std::unique_ptr<DeviceBackend> MakeLevelZeroBackend(VendorLibrary lib) {
  return std::make_unique<level_zero::LevelZeroBackend>(std::move(lib));
}

}  // namespace drover::agent
