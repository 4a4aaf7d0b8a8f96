#include "drover/agent/gpu_report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <string_view>

namespace drover::agent {

v1::Gpu GpuView(const GpuDevice& d, const GpuReading& reading) {
  v1::Gpu g;
  g.set_index(d.index);
  g.set_uuid(d.uuid);
  g.set_vendor(d.vendor);
  g.set_model(d.model);
  g.set_memory_bytes(d.memory_bytes);
  bool healthy = d.healthy && reading.healthy;
  g.set_health(healthy ? v1::GPU_HEALTH_HEALTHY : v1::GPU_HEALTH_UNHEALTHY);
  if (!d.healthy) g.set_health_reason("the driver reports the device unavailable");
  if (!reading.healthy) g.set_health_reason(reading.reason);
  g.set_backend(d.backend);
  g.set_numa_node(d.numa_node);
  g.set_pci_bus_id(d.pci_bus_id);
  g.set_architecture(d.architecture);
  g.set_driver_version(d.driver_version);
  g.set_mig_enabled(d.mig_enabled);
  for (const MigInstance& m : d.mig_instances) {
    v1::MigInstance* mi = g.add_mig_instances();
    mi->set_uuid(m.uuid);
    mi->set_gpu_instance_id(m.gpu_instance_id);
    mi->set_compute_instance_id(m.compute_instance_id);
    mi->set_memory_bytes(m.memory_bytes);
  }
  return g;
}

void FillTelemetry(const GpuReading& r, const std::map<int64_t, std::string>& jobs, v1::GpuTelemetry* t) {
  t->set_xid_errors(r.xid_errors);
  t->set_last_xid(r.last_xid);
  t->set_samples(r.samples);
  if (Known(r.utilization_avg)) t->set_utilization_avg_pct(r.utilization_avg);
  if (Known(r.utilization_max)) t->set_utilization_max_pct(r.utilization_max);
  if (Known(r.temperature_max)) t->set_temperature_max_c(r.temperature_max);
  if (Known(r.power_avg)) t->set_power_avg_w(r.power_avg);
  if (!r.have_sample) return;
  const GpuSample& s = r.latest;
  t->set_time_unix_nanos(r.latest_wall_ns);
  if (Known(s.utilization_pct)) t->set_utilization_pct(s.utilization_pct);
  if (Known(s.memory_utilization_pct)) t->set_memory_utilization_pct(s.memory_utilization_pct);
  if (s.memory_used_bytes >= 0) t->set_memory_used_bytes(s.memory_used_bytes);
  if (s.memory_total_bytes >= 0) t->set_memory_total_bytes(s.memory_total_bytes);
  if (Known(s.temperature_c)) t->set_temperature_c(s.temperature_c);
  if (Known(s.power_w)) t->set_power_w(s.power_w);
  if (Known(s.power_limit_w)) t->set_power_limit_w(s.power_limit_w);
  if (s.sm_clock_mhz >= 0) t->set_sm_clock_mhz(s.sm_clock_mhz);
  if (s.memory_clock_mhz >= 0) t->set_memory_clock_mhz(s.memory_clock_mhz);
  if (s.throttle & kThrottleThermal) t->add_throttle_reasons("thermal");
  if (s.throttle & kThrottlePower) t->add_throttle_reasons("power");
  if (s.throttle & kThrottleOther) t->add_throttle_reasons("other");
  if (s.ecc_corrected >= 0) t->set_ecc_corrected(s.ecc_corrected);
  if (s.ecc_uncorrected >= 0) t->set_ecc_uncorrected(s.ecc_uncorrected);
  if (s.row_remap_failure >= 0) t->set_row_remap_failure(s.row_remap_failure == 1);
  if (s.nvlink_crc_errors >= 0) t->set_nvlink_crc_errors(s.nvlink_crc_errors);
  if (s.nvlink_replay_errors >= 0) t->set_nvlink_replay_errors(s.nvlink_replay_errors);
  if (s.nvlink_recovery_errors >= 0) t->set_nvlink_recovery_errors(s.nvlink_recovery_errors);
  t->set_processes_known(s.processes_known);
  for (const ProcessUsage& p : s.processes) {
    v1::GpuProcess* out = t->add_processes();
    out->set_pid(p.pid);
    out->set_memory_bytes(p.memory_bytes);
    pid_t pgid = ::getpgid(static_cast<pid_t>(p.pid));
    if (auto it = jobs.find(pgid); pgid > 0 && it != jobs.end()) out->set_job_id(it->second);
  }
}

// GET /api/v1/gpus/{index}/samples?max=N: the GPU's ring buffer, oldest
// first (at most one minute of samples at the sampling period).
http::Response SamplesResponse(const Telemetry& telemetry, size_t gpus, const http::Request& req) {
  std::string_view path = req.path;
  constexpr std::string_view kPrefix = "/api/v1/gpus/";
  constexpr std::string_view kSuffix = "/samples";
  if (!path.starts_with(kPrefix) || !path.ends_with(kSuffix) || path.size() <= kPrefix.size() + kSuffix.size()) {
    return http::ErrorResponse(NotFound("no such resource: " + req.path));
  }
  if (req.method != "GET") return http::ErrorResponse(InvalidArgument("only GET is allowed on " + req.path));
  std::string_view digits = path.substr(kPrefix.size(), path.size() - kPrefix.size() - kSuffix.size());
  int gpu = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), gpu);
  if (ec != std::errc() || end != digits.data() + digits.size() || gpu < 0 || static_cast<size_t>(gpu) >= gpus) {
    return http::ErrorResponse(NotFound(fmt::format("gpu '{}' does not exist (the node has {})", digits, gpus)));
  }
  size_t max = 6000;
  if (auto it = req.query.find("max"); it != req.query.end()) {
    auto [e, c] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), max);
    if (c != std::errc() || e != it->second.data() + it->second.size() || max == 0) {
      return http::ErrorResponse(InvalidArgument(fmt::format("max '{}' is not a positive integer", it->second)));
    }
  }
  nlohmann::json out = nlohmann::json::array();
  auto known = [](double v) { return Known(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  auto count = [](int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  for (const GpuSample& s : telemetry.History(gpu, max)) {
    out.push_back({{"time_ns", s.time_ns},
                   {"utilization_pct", known(s.utilization_pct)},
                   {"memory_used_bytes", count(s.memory_used_bytes)},
                   {"temperature_c", known(s.temperature_c)},
                   {"power_w", known(s.power_w)},
                   {"sm_clock_mhz", count(s.sm_clock_mhz)},
                   {"throttle", s.throttle}});
  }
  return http::Response{200, "application/json", out.dump(), {}, {}};
}

}  // namespace drover::agent
