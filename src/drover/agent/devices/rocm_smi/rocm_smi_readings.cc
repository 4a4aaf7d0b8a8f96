#include "drover/agent/devices/rocm_smi/rocm_smi_readings.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "drover/common/hash.h"

namespace drover::agent::rocm_smi {

namespace {

// Plausible ranges: outside them a reading is garbage (a sensor that reads
// -273 C or a power of 2^63 uW), not a fact about the device.
constexpr double kMinCelsius = -60;
constexpr double kMaxCelsius = 250;
constexpr double kMaxWatts = 10000;  // a whole MI300-class socket is ~1 kW
constexpr uint64_t kMaxClockMhz = 20000;
// One block's accumulated error count; past this it is a garbage value.
constexpr uint64_t kMaxEccCount = 1'000'000'000'000ULL;
constexpr size_t kMaxSerialBytes = 64;

std::string Hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

bool PlausibleCelsius(double c) { return c > kMinCelsius && c < kMaxCelsius; }

// The current level of a clock in MHz, or -1. rsmi_frequencies_t lists the
// supported levels (Hz) and the index of the current one; the library sets
// that index to -1 (as unsigned) when no level is marked current.
int CurrentClockMhz(const RocmSmiApi& api, uint32_t device, rsmi_clk_type_t type) {
  rsmi_frequencies_t levels{};
  if (api.rsmi_dev_gpu_clk_freq_get(device, type, &levels) != RSMI_STATUS_SUCCESS) return -1;
  if (levels.num_supported == 0 || levels.num_supported > RSMI_MAX_NUM_FREQUENCIES ||
      levels.current >= levels.num_supported) {
    return -1;
  }
  const uint64_t mhz = (levels.frequency[levels.current] + 500'000) / 1'000'000;
  if (mhz == 0 || mhz > kMaxClockMhz) return -1;
  return static_cast<int>(mhz);
}

// Watts from a microwatt reading; NaN when the call fails or the value is
// implausible. A cap of 0 means "no cap" to some drivers: unknown too.
double MicrowattsToWatts(rsmi_status_t status, uint64_t microwatts, bool allow_zero) {
  if (status != RSMI_STATUS_SUCCESS) return NAN;
  if (microwatts == 0 && !allow_zero) return NAN;
  const double watts = static_cast<double>(microwatts) / 1e6;
  return watts <= kMaxWatts ? watts : NAN;
}

}  // namespace

namespace internal {

std::string CleanString(const char* buffer, size_t capacity) {
  std::string text(buffer, strnlen(buffer, capacity));
  constexpr const char* kSpace = " \t\n\r\v\f";
  size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(kSpace);
  text = text.substr(begin, end - begin + 1);
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

}  // namespace internal

std::string FormatPciBusId(uint64_t bdfid) {
  const auto domain = static_cast<unsigned>(bdfid >> 32);
  const auto bus = static_cast<unsigned>((bdfid >> 8) & 0xff);
  const auto dev = static_cast<unsigned>((bdfid >> 3) & 0x1f);
  const auto function = static_cast<unsigned>(bdfid & 0x7);
  char text[32];
  std::snprintf(text, sizeof(text), "%04x:%02x:%02x.%x", domain, bus, dev, function);
  return text;
}

std::string DeviceUuid(const RocmSmiApi& api, uint32_t device, const std::string& pci_bus_id,
                       const std::string& fallback_key) {
  if (api.rsmi_dev_unique_id_get != nullptr) {
    uint64_t id = 0;
    // 0 and all-ones are what unprogrammed fuses and broken reads look like.
    if (api.rsmi_dev_unique_id_get(device, &id) == RSMI_STATUS_SUCCESS && id != 0 && id != ~uint64_t{0}) {
      return "amd-" + Hex16(id);
    }
  }
  if (api.rsmi_dev_serial_number_get != nullptr) {
    std::string serial = ReadString(
        [&](char* buffer, uint32_t length) { return api.rsmi_dev_serial_number_get(device, buffer, length); });
    std::string kept;
    for (char c : serial) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) kept += c;
    }
    // All zeros is a board without a programmed serial.
    if (!kept.empty() && kept.size() <= kMaxSerialBytes && kept.find_first_not_of('0') != std::string::npos) {
      return "amd-sn-" + kept;
    }
  }
  if (!pci_bus_id.empty()) return "amd-" + Hex16(Fnv1a64("pci:" + pci_bus_id));
  return "amd-" + Hex16(Fnv1a64("key:" + fallback_key));
}

int NumaNode(const RocmSmiApi& api, uint32_t device) {
  if (api.rsmi_topo_numa_affinity_get == nullptr) return 0;
  uint32_t node = 0;
  if (api.rsmi_topo_numa_affinity_get(device, &node) != RSMI_STATUS_SUCCESS) return 0;
  return node <= kMaxNumaNode ? static_cast<int>(node) : 0;
}

void ReadTemperature(const RocmSmiApi& api, uint32_t device, GpuSample& sample) {
  if (api.rsmi_dev_temp_metric_get == nullptr) return;
  // MI200 and later have no edge sensor; the junction (hotspot) one is there.
  for (rsmi_temperature_type_t sensor : {RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_TYPE_JUNCTION}) {
    int64_t millidegrees = 0;
    if (api.rsmi_dev_temp_metric_get(device, sensor, RSMI_TEMP_CURRENT, &millidegrees) != RSMI_STATUS_SUCCESS) {
      continue;
    }
    const double celsius = static_cast<double>(millidegrees) / 1000.0;
    if (!PlausibleCelsius(celsius)) continue;
    sample.temperature_c = celsius;
    // amdgpu's tempN_crit is the limit the power-management firmware holds
    // the sensor under by lowering the clocks (tempN_emergency is the
    // shutdown); a reading at or above it means the clocks are being cut.
    int64_t critical = 0;
    if (api.rsmi_dev_temp_metric_get(device, sensor, RSMI_TEMP_CRITICAL, &critical) == RSMI_STATUS_SUCCESS) {
      const double limit = static_cast<double>(critical) / 1000.0;
      if (PlausibleCelsius(limit) && limit > 0 && celsius >= limit) {
        sample.throttle |= kThrottleThermal;
      }
    }
    return;
  }
}

void ReadPower(const RocmSmiApi& api, uint32_t device, GpuSample& sample) {
  if (api.rsmi_dev_power_ave_get != nullptr) {
    uint64_t microwatts = 0;
    rsmi_status_t status = api.rsmi_dev_power_ave_get(device, 0, &microwatts);
    sample.power_w = MicrowattsToWatts(status, microwatts, /*allow_zero=*/true);
  }
  if (api.rsmi_dev_power_cap_get != nullptr) {
    uint64_t microwatts = 0;
    rsmi_status_t status = api.rsmi_dev_power_cap_get(device, 0, &microwatts);
    sample.power_limit_w = MicrowattsToWatts(status, microwatts, /*allow_zero=*/false);
  }
}

void ReadClocks(const RocmSmiApi& api, uint32_t device, GpuSample& sample) {
  if (api.rsmi_dev_gpu_clk_freq_get == nullptr) return;
  sample.sm_clock_mhz = CurrentClockMhz(api, device, RSMI_CLK_TYPE_SYS);
  sample.memory_clock_mhz = CurrentClockMhz(api, device, RSMI_CLK_TYPE_MEM);
}

void ReadEcc(const RocmSmiApi& api, uint32_t device, GpuSample& sample) {
  if (api.rsmi_dev_ecc_count_get == nullptr) return;
  bool any = false;
  uint64_t corrected = 0;
  uint64_t uncorrected = 0;
  // One bit per block, RSMI_GPU_BLOCK_UMC (1) up to RSMI_GPU_BLOCK_LAST.
  for (uint64_t bit = RSMI_GPU_BLOCK_FIRST; bit <= RSMI_GPU_BLOCK_LAST; bit <<= 1) {
    rsmi_error_count_t counts{};
    if (api.rsmi_dev_ecc_count_get(device, static_cast<rsmi_gpu_block_t>(bit), &counts) != RSMI_STATUS_SUCCESS) {
      continue;  // RSMI_STATUS_NOT_SUPPORTED: this block keeps no count
    }
    if (counts.correctable_err > kMaxEccCount || counts.uncorrectable_err > kMaxEccCount) {
      continue;
    }
    any = true;
    corrected += counts.correctable_err;
    uncorrected += counts.uncorrectable_err;
  }
  if (!any) return;
  // At most 14 blocks of at most 10^12: the sums fit an int64_t.
  sample.ecc_corrected = static_cast<int64_t>(corrected);
  sample.ecc_uncorrected = static_cast<int64_t>(uncorrected);
}

void ReadProcesses(const RocmSmiApi& api, uint32_t device, uint32_t device_count, GpuSample& sample) {
  if (api.rsmi_compute_process_info_get == nullptr || api.rsmi_compute_process_info_by_pid_get == nullptr) {
    return;
  }
  const bool placeable = api.rsmi_compute_process_gpus_get != nullptr || device_count == 1;
  if (!placeable) return;

  uint32_t count = 0;
  if (api.rsmi_compute_process_info_get(nullptr, &count) != RSMI_STATUS_SUCCESS) return;
  if (count > kMaxProcesses) return;
  // Processes start between the two calls: leave room for a few more. When
  // even that is short the call says RSMI_STATUS_INSUFFICIENT_SIZE and this
  // sample does without processes.
  const uint32_t capacity = count + 16;
  std::vector<rsmi_process_info_t> processes(capacity);
  uint32_t returned = capacity;
  if (api.rsmi_compute_process_info_get(processes.data(), &returned) != RSMI_STATUS_SUCCESS) {
    return;
  }
  processes.resize(std::min(returned, capacity));

  std::vector<ProcessUsage> found;
  std::vector<uint32_t> gpus(kMaxDevices);
  for (const rsmi_process_info_t& process : processes) {
    const uint32_t pid = process.process_id;
    if (pid == 0) continue;
    if (api.rsmi_compute_process_gpus_get != nullptr) {
      uint32_t used = kMaxDevices;
      rsmi_status_t status = api.rsmi_compute_process_gpus_get(pid, gpus.data(), &used);
      if (status == RSMI_STATUS_NOT_FOUND) continue;  // it exited meanwhile
      if (status != RSMI_STATUS_SUCCESS) return;
      used = std::min(used, kMaxDevices);
      if (std::find(gpus.begin(), gpus.begin() + used, device) == gpus.begin() + used) continue;
    }
    rsmi_process_info_t info{};
    rsmi_status_t status = api.rsmi_compute_process_info_by_pid_get(pid, &info);
    if (status == RSMI_STATUS_NOT_FOUND) continue;
    if (status != RSMI_STATUS_SUCCESS) return;
    // ROCm SMI 5.2 sums a process's VRAM over every GPU it uses; it has no
    // per-device figure. Garbage (newer ROCm's UINT64_MAX for "cannot
    // tell") reads -1, the unknown of GpuSample's integers.
    ProcessUsage usage;
    usage.pid = pid;
    usage.memory_bytes =
        info.vram_usage <= static_cast<uint64_t>(kMaxDeviceMemoryBytes) ? static_cast<int64_t>(info.vram_usage) : -1;
    found.push_back(usage);
  }
  sample.processes = std::move(found);
  sample.processes_known = true;
}

}  // namespace drover::agent::rocm_smi
