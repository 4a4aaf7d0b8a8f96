// A stand-in for libnvidia-ml.so.1 whose answers nvml_test scripts through
// fake_nvml.h. Its NVML types are written out here from nvml.h on purpose,
// not taken from nvml_abi.h, so that a layout mistake there shows up as a
// test failure instead of being mirrored.
//
// Compile definitions pick the variant:
//   (none)              the current ABI: versioned and unversioned symbols;
//   FAKE_NVML_LEGACY    an old driver: only unversioned symbols (old PCI and
//                       process structs), no NVLink, MIG, NUMA, compute
//                       capability, throttle reasons, ECC or events;
//   FAKE_NVML_NO_UUID   the current ABI without nvmlDeviceGetUUID.

#include "drover/agent/devices/nvml/fake_nvml.h"

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

// --- nvml.h, as much as the stand-in needs --------------------------------
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr unsigned int kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

struct FakeMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct FakeUtilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
struct FakePciV3 {  // nvmlPciInfo_t (v3)
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct FakePciLegacy {  // nvmlPciInfo_t before v3
  char busId[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  unsigned int reserved0, reserved1, reserved2, reserved3;
};
struct FakeProcessV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct FakeProcessV2 {  // nvmlProcessInfo_v2_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct FakeProcessV3R535 {  // what R535.43-535.86 filled from _v3
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};

struct Process {
  unsigned int pid;
  unsigned long long memory;
};
struct Event {
  int device;
  unsigned long long type, data;
};

}  // namespace

// The handle type: nvmlDevice_t is `struct nvmlDevice_st*`.
struct nvmlDevice_st {
  bool mig = false;
  int index = 0;
  std::string name = "NVIDIA H100 80GB HBM3";
  std::string uuid;
  std::string pci;
  unsigned long long memory_total = 80ull << 30;
  unsigned long long memory_used = 0;
  long long values[32] = {};        // by kFields position
  int link_remote[kMaxLinks] = {};  // -2 inactive, -1 NVSwitch, else a GPU index
  std::vector<Process> processes;
  std::vector<nvmlDevice_st*> migs;
  unsigned int gpu_instance = 0;
  unsigned int compute_instance = 0;
  unsigned long long registered_events = 0;
};
struct nvmlEventSet_st {
  int id = 0;
};
using nvmlDevice_t = nvmlDevice_st*;
using nvmlEventSet_t = nvmlEventSet_st*;

struct FakeEventData {  // nvmlEventData_t (with the _v2 MIG fields)
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
};

static_assert(sizeof(FakePciV3) == 68 && sizeof(FakePciLegacy) == 52);
static_assert(sizeof(FakeProcessV1) == 16 && sizeof(FakeProcessV2) == 24 && sizeof(FakeProcessV3R535) == 32);
static_assert(sizeof(FakeEventData) == 32 && sizeof(FakeMemory) == 24);

namespace {

const char* const kFields[] = {"util_gpu",       "util_memory",     "temperature",      "power_mw",
                               "power_limit_mw", "sm_clock",        "memory_clock",     "throttle",
                               "ecc_corrected",  "ecc_uncorrected", "cc_major",         "cc_minor",
                               "numa",           "mig_mode",        "supported_events", "row_remap_failure",
                               "nvlink_replay",  "nvlink_recovery", "nvlink_crc"};

int FieldIndex(const char* field) {
  for (size_t i = 0; i < sizeof(kFields) / sizeof(kFields[0]); ++i) {
    if (std::strcmp(kFields[i], field) == 0) return static_cast<int>(i);
  }
  return -1;
}

struct State {
  int init_count = 0;
  unsigned int reported_count = 0;
  std::vector<std::unique_ptr<nvmlDevice_st>> devices;
  std::vector<std::unique_ptr<nvmlDevice_st>> migs;
  std::string driver = "550.54.15";
  std::map<std::string, std::map<int, int>> failures;  // function -> device (-1: all) -> rc
  std::map<std::string, int> calls;
  std::map<std::pair<int, int>, int> topology;
  std::deque<Event> events;
  int event_sets = 0;
  long long last_wait_timeout = -1;
  nvmlEventSet_st event_set;
};

State& S() {
  static State state;
  return state;
}

long long& Value(nvmlDevice_t d, const char* field) { return d->values[FieldIndex(field)]; }

// The scripted failure of `function` for `d`, else NVML_SUCCESS; counts the call.
nvmlReturn_t Enter(const char* function, nvmlDevice_t d = nullptr, bool needs_init = true) {
  ++S().calls[function];
  if (needs_init && S().init_count <= 0) return NVML_ERROR_UNINITIALIZED;
  auto it = S().failures.find(function);
  if (it != S().failures.end()) {
    int index = d == nullptr ? -1 : d->index;
    auto one = it->second.find(index);
    if (one != it->second.end()) return one->second;
    auto all = it->second.find(-1);
    if (all != it->second.end()) return all->second;
  }
  if (d != nullptr) {
    bool known = false;
    for (auto& device : S().devices) known = known || device.get() == d;
    for (auto& mig : S().migs) known = known || mig.get() == d;
    if (!known) return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

#define ENTER(...)                         \
  do {                                     \
    nvmlReturn_t rc_ = Enter(__VA_ARGS__); \
    if (rc_ != NVML_SUCCESS) return rc_;   \
  } while (0)

nvmlReturn_t CopyString(const std::string& text, char* buffer, unsigned int length) {
  if (buffer == nullptr || length <= text.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

nvmlDevice_t Device(int index) {
  if (index < 0 || static_cast<size_t>(index) >= S().devices.size()) return nullptr;
  return S().devices[static_cast<size_t>(index)].get();
}

[[maybe_unused]] void FillPciV3(const std::string& id, FakePciV3* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", id.c_str());
  // busIdLegacy: the same with a 4-digit domain ("0000:3B:00.0").
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%s", id.size() > 4 ? id.c_str() + 4 : "");
}

void FillPciLegacy(const std::string& id, FakePciLegacy* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", id.size() > 4 ? id.c_str() + 4 : "");
}

// The far end of an NVLink: another GPU's id or an NVSwitch's.
[[maybe_unused]] std::string RemotePci(nvmlDevice_t d, unsigned int link) {
  int remote = d->link_remote[link];
  if (remote == -1) return "00000000:C5:00.0";  // an NVSwitch
  nvmlDevice_t other = Device(remote);
  return other != nullptr ? other->pci : "";
}

template <typename Info>
nvmlReturn_t Processes(nvmlDevice_t d, unsigned int* count, Info* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const auto n = static_cast<unsigned int>(d->processes.size());
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n; ++i) {
    std::memset(&infos[i], 0xAB, sizeof(Info));  // junk in fields the caller should not read
    infos[i].pid = d->processes[i].pid;
    infos[i].usedGpuMemory = d->processes[i].memory;
  }
  *count = n;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

// --- script interface --------------------------------------------------------

void fake_nvml_reset(void) { S() = State(); }

void fake_nvml_set_device_count(unsigned int count) {
  S().reported_count = count;
  S().devices.clear();
  for (unsigned int i = 0; i < count && i < 128; ++i) {
    auto d = std::make_unique<nvmlDevice_st>();
    d->index = static_cast<int>(i);
    char text[64];
    std::snprintf(text, sizeof(text), "GPU-00000000-0000-0000-0000-%012u", i);
    d->uuid = text;
    std::snprintf(text, sizeof(text), "00000000:%02X:00.0", i + 0x10);
    d->pci = text;
    Value(d.get(), "temperature") = 35;
    Value(d.get(), "power_mw") = 70000;
    Value(d.get(), "power_limit_mw") = 700000;
    Value(d.get(), "sm_clock") = 1980;
    Value(d.get(), "memory_clock") = 2619;
    Value(d.get(), "cc_major") = 9;
    Value(d.get(), "numa") = i / 4;
    Value(d.get(), "supported_events") = 0x1 | 0x2 | 0x4 | 0x8;
    for (int& remote : d->link_remote) remote = -2;
    S().devices.push_back(std::move(d));
  }
}

void fake_nvml_set_string(int device, const char* field, const char* value) {
  if (std::strcmp(field, "driver") == 0) S().driver = value;
  nvmlDevice_t d = Device(device);
  if (d == nullptr) return;
  if (std::strcmp(field, "name") == 0) d->name = value;
  if (std::strcmp(field, "uuid") == 0) d->uuid = value;
  if (std::strcmp(field, "pci") == 0) d->pci = value;
}

void fake_nvml_set_value(int device, const char* field, long long value) {
  nvmlDevice_t d = Device(device);
  if (d == nullptr) return;
  if (std::strcmp(field, "memory_total") == 0) {
    d->memory_total = static_cast<unsigned long long>(value);
  } else if (std::strcmp(field, "memory_used") == 0) {
    d->memory_used = static_cast<unsigned long long>(value);
  } else if (FieldIndex(field) >= 0) {
    Value(d, field) = value;
  }
}

void fake_nvml_fail(const char* function, int device, int rc) { S().failures[function][device < 0 ? -1 : device] = rc; }

void fake_nvml_set_nvlink(int device, unsigned int link, int remote) {
  nvmlDevice_t d = Device(device);
  if (d != nullptr && link < kMaxLinks) d->link_remote[link] = remote < 0 ? -1 : remote;
}

void fake_nvml_set_topology(int a, int b, int level) {
  S().topology[{a, b}] = level;
  S().topology[{b, a}] = level;
}

void fake_nvml_add_process(int device, unsigned int pid, unsigned long long used_memory) {
  if (nvmlDevice_t d = Device(device)) d->processes.push_back(Process{pid, used_memory});
}

void fake_nvml_add_mig(int device, const char* uuid, unsigned long long memory, unsigned int gpu_instance,
                       unsigned int compute_instance) {
  nvmlDevice_t d = Device(device);
  if (d == nullptr) return;
  auto mig = std::make_unique<nvmlDevice_st>();
  mig->mig = true;
  mig->index = 1000 + static_cast<int>(S().migs.size());
  mig->uuid = uuid;
  mig->memory_total = memory;
  mig->gpu_instance = gpu_instance;
  mig->compute_instance = compute_instance;
  d->migs.push_back(mig.get());
  S().migs.push_back(std::move(mig));
}

void fake_nvml_push_event(int device, unsigned long long type, unsigned long long data) {
  S().events.push_back(Event{device, type, data});
}

int fake_nvml_init_count(void) { return S().init_count; }
int fake_nvml_calls(const char* function) { return S().calls[function]; }
int fake_nvml_event_sets(void) { return S().event_sets; }
unsigned long long fake_nvml_registered_events(int device) {
  nvmlDevice_t d = Device(device);
  return d == nullptr ? 0 : d->registered_events;
}
long long fake_nvml_last_wait_timeout(void) { return S().last_wait_timeout; }

// --- NVML ----------------------------------------------------------------------

#define FAKE_INIT(fn)           \
  nvmlReturn_t fn(void) {       \
    ENTER(#fn, nullptr, false); \
    ++S().init_count;           \
    return NVML_SUCCESS;        \
  }
FAKE_INIT(nvmlInit)
#ifndef FAKE_NVML_LEGACY
FAKE_INIT(nvmlInit_v2)
#endif

nvmlReturn_t nvmlShutdown(void) {
  ENTER("nvmlShutdown");
  --S().init_count;
  return NVML_SUCCESS;
}

#define FAKE_COUNT(fn)                   \
  nvmlReturn_t fn(unsigned int* count) { \
    ENTER(#fn);                          \
    *count = S().reported_count;         \
    return NVML_SUCCESS;                 \
  }
FAKE_COUNT(nvmlDeviceGetCount)
#ifndef FAKE_NVML_LEGACY
FAKE_COUNT(nvmlDeviceGetCount_v2)
#endif

#define FAKE_HANDLE(fn)                                       \
  nvmlReturn_t fn(unsigned int index, nvmlDevice_t* device) { \
    nvmlDevice_t d = Device(static_cast<int>(index));         \
    ENTER(#fn, d);                                            \
    if (d == nullptr) return NVML_ERROR_INVALID_ARGUMENT;     \
    *device = d;                                              \
    return NVML_SUCCESS;                                      \
  }
FAKE_HANDLE(nvmlDeviceGetHandleByIndex)
#ifndef FAKE_NVML_LEGACY
FAKE_HANDLE(nvmlDeviceGetHandleByIndex_v2)
#endif

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  ENTER("nvmlDeviceGetName", d);
  return CopyString(d->name, name, length);
}

#ifndef FAKE_NVML_NO_UUID
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  ENTER("nvmlDeviceGetUUID", d);
  return CopyString(d->uuid, uuid, length);
}
#endif

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  ENTER("nvmlSystemGetDriverVersion");
  return CopyString(S().driver, version, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, FakeMemory* memory) {
  ENTER("nvmlDeviceGetMemoryInfo", d);
  memory->total = d->memory_total;
  memory->used = d->memory_used;
  memory->free = d->memory_total > d->memory_used ? d->memory_total - d->memory_used : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, FakePciLegacy* pci) {
  ENTER("nvmlDeviceGetPciInfo", d);
  FillPciLegacy(d->pci, pci);
  return NVML_SUCCESS;
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, FakePciLegacy* pci) {
  ENTER("nvmlDeviceGetPciInfo_v2", d);
  FillPciLegacy(d->pci, pci);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, FakePciV3* pci) {
  ENTER("nvmlDeviceGetPciInfo_v3", d);
  FillPciV3(d->pci, pci);
  return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, FakeUtilization* utilization) {
  ENTER("nvmlDeviceGetUtilizationRates", d);
  utilization->gpu = static_cast<unsigned int>(Value(d, "util_gpu"));
  utilization->memory = static_cast<unsigned int>(Value(d, "util_memory"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int* temp) {
  ENTER("nvmlDeviceGetTemperature", d);
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;  // NVML_TEMPERATURE_GPU
  *temp = static_cast<unsigned int>(Value(d, "temperature"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* power) {
  ENTER("nvmlDeviceGetPowerUsage", d);
  *power = static_cast<unsigned int>(Value(d, "power_mw"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int* limit) {
  ENTER("nvmlDeviceGetEnforcedPowerLimit", d);
  *limit = static_cast<unsigned int>(Value(d, "power_limit_mw"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int* clock) {
  ENTER("nvmlDeviceGetClockInfo", d);
  if (type == 1) {  // NVML_CLOCK_SM
    *clock = static_cast<unsigned int>(Value(d, "sm_clock"));
  } else if (type == 2) {  // NVML_CLOCK_MEM
    *clock = static_cast<unsigned int>(Value(d, "memory_clock"));
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int* level) {
  ENTER("nvmlDeviceGetTopologyCommonAncestor", a);
  auto it = S().topology.find({a->index, b->index});
  if (it == S().topology.end()) return NVML_ERROR_NOT_SUPPORTED;
  *level = it->second;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* count, FakeProcessV1* infos) {
  ENTER("nvmlDeviceGetComputeRunningProcesses", d);
  return Processes(d, count, infos);
}

#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* count, FakeProcessV2* infos) {
  ENTER("nvmlDeviceGetComputeRunningProcesses_v2", d);
  return Processes(d, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count, FakeProcessV2* infos) {
  ENTER("nvmlDeviceGetComputeRunningProcesses_v3", d);
  if (S().driver.rfind("535.", 0) == 0) {  // the R535 quirk: a 32-byte struct
    return Processes(d, count, reinterpret_cast<FakeProcessV3R535*>(infos));
  }
  return Processes(d, count, infos);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  ENTER("nvmlDeviceGetCudaComputeCapability", d);
  *major = static_cast<int>(Value(d, "cc_major"));
  *minor = static_cast<int>(Value(d, "cc_minor"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t d, unsigned int size, unsigned long* node_set,
                                         unsigned int scope) {
  ENTER("nvmlDeviceGetMemoryAffinity", d);
  long long node = Value(d, "numa");
  if (scope != 0 || size == 0) return NVML_ERROR_INVALID_ARGUMENT;  // NVML_AFFINITY_SCOPE_NODE
  if (node < 0) return NVML_ERROR_NOT_SUPPORTED;
  std::memset(node_set, 0, size * sizeof(unsigned long));
  const auto bits = static_cast<long long>(8 * sizeof(unsigned long));
  if (node / bits < static_cast<long long>(size)) node_set[node / bits] = 1ul << (node % bits);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long* reasons) {
  ENTER("nvmlDeviceGetCurrentClocksThrottleReasons", d);
  *reasons = static_cast<unsigned long long>(Value(d, "throttle"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type, unsigned long long* count) {
  ENTER("nvmlDeviceGetTotalEccErrors", d);
  if (counter_type != 0) return NVML_ERROR_INVALID_ARGUMENT;  // only NVML_VOLATILE_ECC is scripted
  *count = static_cast<unsigned long long>(Value(d, error_type == 0 ? "ecc_corrected" : "ecc_uncorrected"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int* corrected, unsigned int* uncorrected,
                                       unsigned int* pending, unsigned int* failed) {
  ENTER("nvmlDeviceGetRemappedRows", d);
  if (Value(d, "row_remap_failure") < 0) return NVML_ERROR_NOT_SUPPORTED;
  *corrected = *uncorrected = *pending = 0;
  *failed = Value(d, "row_remap_failure") != 0 ? 1 : 0;
  return NVML_SUCCESS;
}

// Every active link counts the device's scripted value of each counter.
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link, int counter,
                                             unsigned long long* value) {
  ENTER("nvmlDeviceGetNvLinkErrorCounter", d);
  if (link >= kMaxLinks || d->link_remote[link] == -2 || counter < 0 || counter > 3) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const char* field = counter == 0 ? "nvlink_replay" : counter == 1 ? "nvlink_recovery" : "nvlink_crc";
  *value = counter == 3 ? 0 : static_cast<unsigned long long>(Value(d, field));  // CRC: flits only
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  ENTER("nvmlDeviceGetMigMode", d);
  *current = *pending = static_cast<unsigned int>(Value(d, "mig_mode"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* count) {
  ENTER("nvmlDeviceGetMaxMigDeviceCount", d);
  *count = 7;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t* mig) {
  ENTER("nvmlDeviceGetMigDeviceHandleByIndex", d);
  if (index >= d->migs.size()) return NVML_ERROR_NOT_FOUND;
  *mig = d->migs[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int* id) {
  ENTER("nvmlDeviceGetGpuInstanceId", d);
  if (!d->mig) return NVML_ERROR_INVALID_ARGUMENT;
  *id = d->gpu_instance;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int* id) {
  ENTER("nvmlDeviceGetComputeInstanceId", d);
  if (!d->mig) return NVML_ERROR_INVALID_ARGUMENT;
  *id = d->compute_instance;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int* active) {
  ENTER("nvmlDeviceGetNvLinkState", d);
  if (link >= kMaxLinks) return NVML_ERROR_INVALID_ARGUMENT;
  *active = d->link_remote[link] != -2 ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int* type) {
  ENTER("nvmlDeviceGetNvLinkRemoteDeviceType", d);
  if (link >= kMaxLinks || d->link_remote[link] == -2) return NVML_ERROR_INVALID_ARGUMENT;
  *type = d->link_remote[link] == -1 ? 0x02 : 0x00;  // NVML_NVLINK_DEVICE_TYPE_SWITCH : _GPU
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, FakePciV3* pci) {
  ENTER("nvmlDeviceGetNvLinkRemotePciInfo_v2", d);
  if (link >= kMaxLinks || d->link_remote[link] == -2) return NVML_ERROR_INVALID_ARGUMENT;
  FillPciV3(RemotePci(d, link), pci);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  ENTER("nvmlEventSetCreate");
  ++S().event_sets;
  *set = &S().event_set;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  ENTER("nvmlEventSetFree");
  if (set != &S().event_set) return NVML_ERROR_INVALID_ARGUMENT;
  --S().event_sets;
  for (auto& d : S().devices) d->registered_events = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long* types) {
  ENTER("nvmlDeviceGetSupportedEventTypes", d);
  *types = static_cast<unsigned long long>(Value(d, "supported_events"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  ENTER("nvmlDeviceRegisterEvents", d);
  if (set != &S().event_set) return NVML_ERROR_INVALID_ARGUMENT;
  // Like NVML: one unsupported type fails the whole registration.
  if ((types & ~static_cast<unsigned long long>(Value(d, "supported_events"))) != 0) return NVML_ERROR_NOT_SUPPORTED;
  d->registered_events |= types;
  return NVML_SUCCESS;
}

#define FAKE_WAIT(fn)                                                                 \
  nvmlReturn_t fn(nvmlEventSet_t set, FakeEventData* data, unsigned int timeout_ms) { \
    ENTER(#fn);                                                                       \
    if (set != &S().event_set) return NVML_ERROR_INVALID_ARGUMENT;                    \
    S().last_wait_timeout = timeout_ms;                                               \
    while (!S().events.empty()) {                                                     \
      Event event = S().events.front();                                               \
      S().events.pop_front();                                                         \
      nvmlDevice_t d = Device(event.device);                                          \
      if (d == nullptr || (d->registered_events & event.type) == 0) continue;         \
      data->device = d;                                                               \
      data->eventType = event.type;                                                   \
      data->eventData = event.data;                                                   \
      return NVML_SUCCESS;                                                            \
    }                                                                                 \
    return NVML_ERROR_TIMEOUT;                                                        \
  }
FAKE_WAIT(nvmlEventSetWait)
FAKE_WAIT(nvmlEventSetWait_v2)
#endif  // FAKE_NVML_LEGACY

}  // extern "C"
