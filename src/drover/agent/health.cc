#include "drover/agent/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace drover::agent {
namespace {

// NVIDIA's XID catalog, the entries an operator meets most.
constexpr std::array<std::pair<int64_t, const char*>, 18> kXids = {{
    {13, "graphics engine exception"},
    {31, "GPU memory page fault"},
    {43, "GPU stopped processing"},
    {45, "preemptive cleanup"},
    {48, "double-bit ECC error"},
    {61, "internal micro-controller breakpoint"},
    {62, "internal micro-controller halt"},
    {63, "ECC page retirement or row remapping event"},
    {64, "ECC page retirement or row remapping failure"},
    {68, "video processor exception"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {109, "context switch timeout"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
}};

}  // namespace

bool IsCriticalXid(int64_t xid) {
  // Errors of the application, not the device (the same list as the NVIDIA
  // device plugin's default skip list).
  constexpr std::array<int64_t, 6> kApplication = {13, 31, 43, 45, 68, 109};
  return std::find(kApplication.begin(), kApplication.end(), xid) == kApplication.end();
}

std::string DescribeXid(int64_t xid) {
  for (const auto& [code, text] : kXids) {
    if (code == xid) return fmt::format("xid {} ({})", xid, text);
  }
  return fmt::format("xid {}", xid);
}

HealthTracker::HealthTracker(int gpus, HealthOptions options)
    : options_(options), gpus_(static_cast<size_t>(std::max(gpus, 0))) {
  options_.clean_checks = std::max(options_.clean_checks, 1);
}

std::string HealthTracker::reason(int gpu) const {
  const Gpu& g = gpus_[static_cast<size_t>(gpu)];
  if (g.healthy) return "";
  return fmt::format("{} ({} of {} clean checks)", g.cause, g.clean, options_.clean_checks);
}

bool HealthTracker::Check(int gpu, const HealthCheckInput& in, int64_t now_ns) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return false;
  Gpu& g = gpus_[static_cast<size_t>(gpu)];
  std::string before = reason(gpu);
  bool was_healthy = g.healthy;
  std::string problem;
  for (const HealthEvent& e : in.events) {
    std::string p;
    switch (e.kind) {
      case HealthEvent::Kind::kXid:
        ++g.xid_errors;
        g.last_xid = e.code;
        if (IsCriticalXid(e.code)) p = DescribeXid(e.code);
        break;
      case HealthEvent::Kind::kEccUncorrected: p = "uncorrected (double-bit) ECC error"; break;
      case HealthEvent::Kind::kDeviceLost: p = e.message.empty() ? "device lost" : "device lost: " + e.message; break;
      case HealthEvent::Kind::kThermal: p = e.message.empty() ? "thermal fault" : "thermal fault: " + e.message; break;
    }
    if (problem.empty()) problem = std::move(p);
  }
  if (!in.answered && problem.empty()) {
    problem = "cannot be queried: " + (in.sample_error.empty() ? std::string("no answer") : in.sample_error);
  }
  bool clean = problem.empty() && in.answered && !in.thermal_throttled;
  if (in.thermal_throttled) {
    if (g.throttled_since_ns < 0) g.throttled_since_ns = now_ns;
    int64_t lasted = now_ns - g.throttled_since_ns;
    if (problem.empty() && lasted >= options_.thermal_throttle_ns) {
      problem = fmt::format("thermal throttling for {}s", lasted / 1'000'000'000);
    }
  } else {
    g.throttled_since_ns = -1;
  }
  if (!problem.empty()) {
    // A GPU already out keeps its first cause: it says what took it out.
    if (g.healthy) g.cause = std::move(problem);
    g.healthy = false;
    g.clean = 0;
  } else if (!g.healthy) {
    g.clean = clean ? g.clean + 1 : 0;
    if (g.clean >= options_.clean_checks) {
      g.healthy = true;
      g.cause.clear();
      g.clean = 0;
    }
  }
  return was_healthy != g.healthy || before != reason(gpu);
}

}  // namespace drover::agent
