#include "drover/rpc/gpu_metrics.h"

#include <cstdint>
#include <map>

namespace drover::rpc {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bits (nvmlClocksThrottleReasons).
constexpr uint32_t kDcgmSwPowerCap = 0x4;
constexpr uint32_t kDcgmHwSlowdown = 0x8;
constexpr uint32_t kDcgmSwThermal = 0x20;

}  // namespace

void WriteGpuMetrics(const std::string& hostname, const v1::Gpu& gpu, metrics::Exposition& out) {
  const v1::GpuTelemetry& t = gpu.telemetry();
  metrics::Labels labels = {
      {"gpu", std::to_string(gpu.index())},
      {"UUID", gpu.uuid()},
      {"pci_bus_id", gpu.pci_bus_id()},
      {"device", gpu.vendor() + std::to_string(gpu.index())},
      {"modelName", gpu.model()},
      {"Hostname", hostname},
      {"DCGM_FI_DRIVER_VERSION", gpu.driver_version()},
      {"job_id", gpu.job_id()},
      {"tenant", gpu.tenant()},
  };
  // Prometheus treats an empty label as an absent one; leave them out.
  std::erase_if(labels, [](const auto& kv) { return kv.second.empty(); });

  out.Gauge("drover_gpu_healthy", "Whether the GPU is in service (1) or taken out by a health check (0).")
      .Add(labels, gpu.health() == v1::GPU_HEALTH_UNHEALTHY ? 0 : 1);
  if (t.time_unix_nanos() == 0) return;  // no telemetry yet
  if (t.has_utilization_pct())
    out.Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).").Add(labels, t.utilization_pct());
  if (t.has_memory_utilization_pct()) {
    out.Gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).").Add(labels, t.memory_utilization_pct());
  }
  if (t.has_temperature_c())
    out.Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).").Add(labels, t.temperature_c());
  if (t.has_power_w()) out.Gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).").Add(labels, t.power_w());
  if (t.has_power_limit_w()) {
    out.Gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).").Add(labels, t.power_limit_w());
  }
  if (t.has_sm_clock_mhz())
    out.Gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).").Add(labels, t.sm_clock_mhz());
  if (t.has_memory_clock_mhz()) {
    out.Gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).").Add(labels, t.memory_clock_mhz());
  }
  if (t.has_memory_used_bytes()) {
    out.Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
        .Add(labels, static_cast<double>(t.memory_used_bytes()) / kMiB);
    if (t.has_memory_total_bytes()) {
      out.Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
          .Add(labels, static_cast<double>(t.memory_total_bytes() - t.memory_used_bytes()) / kMiB);
    }
  }
  if (t.has_memory_total_bytes()) {
    out.Gauge("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).")
        .Add(labels, static_cast<double>(t.memory_total_bytes()) / kMiB);
  }
  out.Gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
      .Add(labels, static_cast<double>(t.last_xid()));
  // DCGM's gauge holds the last code only; a second XID of the same code,
  // or one soon followed by another, shows here.
  out.Counter("drover_gpu_xid_errors_total", "XID (or vendor equivalent) events seen since the agent started.")
      .Add(labels, static_cast<double>(t.xid_errors()));
  if (t.has_ecc_corrected()) {
    out.Counter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.")
        .Add(labels, static_cast<double>(t.ecc_corrected()));
  }
  if (t.has_ecc_uncorrected()) {
    out.Counter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.")
        .Add(labels, static_cast<double>(t.ecc_uncorrected()));
  }
  if (t.has_row_remap_failure()) {
    out.Gauge("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.")
        .Add(labels, t.row_remap_failure() ? 1 : 0);
  }
  if (t.has_nvlink_crc_errors()) {
    out.Counter("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                "Total number of NVLink flow-control CRC errors (flit and data, every link).")
        .Add(labels, static_cast<double>(t.nvlink_crc_errors()));
  }
  if (t.has_nvlink_replay_errors()) {
    out.Counter("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries (every link).")
        .Add(labels, static_cast<double>(t.nvlink_replay_errors()));
  }
  if (t.has_nvlink_recovery_errors()) {
    out.Counter("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors (every link).")
        .Add(labels, static_cast<double>(t.nvlink_recovery_errors()));
  }
  uint32_t reasons = 0;
  for (const std::string& r : t.throttle_reasons()) {
    if (r == "thermal") reasons |= kDcgmSwThermal;
    if (r == "power") reasons |= kDcgmSwPowerCap;
    if (r == "other") reasons |= kDcgmHwSlowdown;
  }
  out.Gauge("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
            "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).")
      .Add(labels, reasons);
  // Per-job GPU memory where the vendor reports processes.
  // Per-job GPU memory where the vendor reports processes: one series per
  // job on the GPU, job_id naming that job alone.
  if (t.processes_known()) {
    std::map<std::string, double> by_job;
    for (const v1::GpuProcess& p : t.processes()) {
      if (!p.job_id().empty()) by_job[p.job_id()] += static_cast<double>(p.memory_bytes());
    }
    for (const auto& [job, bytes] : by_job) {
      metrics::Labels l = labels;
      std::erase_if(l, [](const auto& kv) { return kv.first == "job_id" || kv.first == "tenant"; });
      l.emplace_back("job_id", job);
      out.Gauge("drover_gpu_job_memory_used_bytes", "GPU memory held by the processes of one Drover job.")
          .Add(l, bytes);
    }
  }
}

}  // namespace drover::rpc
