#pragma once
// HealthTracker: decides when a GPU leaves service and when it returns.
//
// A GPU is taken out of service by a critical XID (not one of the
// application errors the NVIDIA device plugin also ignores: 13, 31, 43, 45,
// 68, 109), an uncorrected (double-bit) ECC error, a lost device (a failed
// sample or a lost-device event), a vendor thermal fault, or thermal
// throttling that lasts `thermal_throttle_ns`. It returns after
// `clean_checks` consecutive checks with none of those (a throttled check is
// not clean). Unlike the NVIDIA device plugin (its issue #234), a GPU that
// healed comes back without restarting anything.
//
// Worked example, clean_checks = 3, one check a second: XID 79 at t=10 s ->
// unhealthy ("xid 79 (GPU has fallen off the bus)"); checks at 11, 12, 13 s
// are clean -> healthy again at 13 s. Had the device still failed to answer
// at 12 s, the count would have restarted.
//
// Pure: time comes in as an argument. Not thread-safe: owned by the
// agent's telemetry thread.

#include <cstdint>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"

namespace drover::agent {

struct HealthOptions {
  int clean_checks = 3;
  int64_t thermal_throttle_ns = 30'000'000'000;
};

// What one health check saw for one GPU.
struct HealthCheckInput {
  bool answered = true;      // the latest sample worked
  std::string sample_error;  // why not, when it did not
  bool thermal_throttled = false;
  std::vector<HealthEvent> events;  // since the previous check
};

// Whether an XID means the GPU (not the application) is at fault.
bool IsCriticalXid(int64_t xid);
// "xid 79 (GPU has fallen off the bus)".
std::string DescribeXid(int64_t xid);

class HealthTracker {
 public:
  HealthTracker(int gpus, HealthOptions options);

  // Applies one check of `gpu`; returns true when its health or reason changed.
  bool Check(int gpu, const HealthCheckInput& input, int64_t now_ns);

  bool healthy(int gpu) const { return gpus_[static_cast<size_t>(gpu)].healthy; }
  // Why it is out of service, with the recovery progress; empty when healthy.
  std::string reason(int gpu) const;
  int64_t xid_errors(int gpu) const { return gpus_[static_cast<size_t>(gpu)].xid_errors; }
  int64_t last_xid(int gpu) const { return gpus_[static_cast<size_t>(gpu)].last_xid; }

 private:
  struct Gpu {
    bool healthy = true;
    std::string cause;
    int clean = 0;
    int64_t throttled_since_ns = -1;
    int64_t xid_errors = 0;
    int64_t last_xid = 0;
  };
  HealthOptions options_;
  std::vector<Gpu> gpus_;
};

}  // namespace drover::agent
