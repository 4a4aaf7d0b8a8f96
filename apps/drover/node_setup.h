#pragma once
// What the roles that run agents (`drover agent`, `drover up`) share: this
// machine's node name, node labels, the telemetry and --fault flags, device
// backends by name, and starting an agent. Free functions, no state.

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent/agent.h"
#include "drover/agent/devices/device_backend.h"
#include "drover/common/status.h"

namespace drover::app {

// The host name in lower case when it is a valid node name, else "local".
std::string Hostname();

// "rack=r1" -> {rack: r1}; the agent checks names and values.
Result<std::map<std::string, std::string>> ParseLabels(const std::vector<std::string>& labels);

// GPU sampling and health checks (docs/devices.md), shared by `up` and `agent`.
struct TelemetryFlags {
  std::string period = "1s";
  std::string health_interval = "1s";
  int health_clean_checks = 3;
  std::string thermal_throttle = "30s";
};
void AddTelemetryFlags(CLI::App* cmd, TelemetryFlags* f);
Result<agent::TelemetryOptions> TelemetryFrom(const TelemetryFlags& f);

// The job sandbox (docs/security.md, "The job sandbox"), shared by `up`
// and `agent`.
struct SandboxFlags {
  std::string mode = "on";  // on, off
  int64_t uid_base = 2'000'000'000;
  int64_t uid_count = 1'000'000;
  std::vector<std::string> root_tenants = {"default"};
  std::vector<std::string> hide;
  std::string seccomp = "on";  // on, off
};
void AddSandboxFlags(CLI::App* cmd, SandboxFlags* f);
Result<agent::SandboxPolicy> SandboxPolicyFrom(const SandboxFlags& f);

// Containers (docs/containers.md): --containers, --container-runtime,
// --image-store, --image-store-limit, --insecure-registry, --registry-auth,
// --container-disk-limit.
struct ContainerFlags {
  std::string mode = "on";  // on, off
  std::string runtime = "runc";
  std::string store;
  std::string limit = "0";
  std::string disk_limit = "0";
  std::vector<std::string> insecure;
  std::string auth_file;
};
void AddContainerFlags(CLI::App* cmd, ContainerFlags* f);
Result<agent::ContainerOptions> ContainerOptionsFrom(const ContainerFlags& f);

// "sim-2:3:xid:79@30s" -> node sim-2, gpu 3, fault xid:79, 30 s after start.
struct FaultFlag {
  std::string node;
  agent::ScheduledFault fault;
};
Result<std::vector<FaultFlag>> ParseFaultFlags(const std::vector<std::string>& flags);
// The faults of `all` meant for `node`.
std::vector<agent::ScheduledFault> FaultsFor(const std::vector<FaultFlag>& all, const std::string& node);

// The backends --devices names (auto, nvml, rocm-smi, level-zero, opencl,
// simulated, none); `simulated` describes the simulated one.
Result<std::vector<std::unique_ptr<agent::DeviceBackend>>> Backends(const std::vector<std::string>& names,
                                                                    const agent::SimulatedSpec& simulated);

// Starts an agent for `node` on `server`, its jobs under `dir`, with the
// supervisor beside this binary; `o` carries the telemetry, metrics and
// topology settings.
Result<std::unique_ptr<agent::Agent>> StartAgent(agent::AgentOptions o, const std::string& node,
                                                 const std::string& server, const std::string& dir,
                                                 std::vector<std::unique_ptr<agent::DeviceBackend>> b,
                                                 std::map<std::string, std::string> labels = {});

}  // namespace drover::app
