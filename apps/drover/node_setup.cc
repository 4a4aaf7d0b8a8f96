#include "node_setup.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "drover/common/config.h"
#include "drover/common/fault.h"
#include "drover/common/ids.h"
#include "drover/common/quantity.h"
#include "role_common.h"

namespace drover::app {

std::string Hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  std::string name;
  for (char c : std::string(buf)) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ValidateNodeName(name).ok()) return name;
  return "local";
}

Result<std::map<std::string, std::string>> ParseLabels(const std::vector<std::string>& labels) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : labels) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return InvalidArgument("--label '" + kv + "' is not NAME=VALUE");
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

void AddTelemetryFlags(CLI::App* cmd, TelemetryFlags* f) {
  cmd->add_option("--telemetry-period", f->period, "GPU sampling period, 10ms..1s")->capture_default_str();
  cmd->add_option("--health-interval", f->health_interval, "time between GPU health checks")->capture_default_str();
  cmd->add_option("--health-clean-checks", f->health_clean_checks,
                  "consecutive clean health checks before an unhealthy GPU returns to service")
      ->capture_default_str();
  cmd->add_option("--thermal-throttle", f->thermal_throttle,
                  "thermal throttling that lasts this long takes a GPU out of service")
      ->capture_default_str();
}

Result<agent::TelemetryOptions> TelemetryFrom(const TelemetryFlags& f) {
  agent::TelemetryOptions t;
  DROVER_ASSIGN_OR_RETURN(int64_t period, ParseDurationMs(f.period));
  DROVER_ASSIGN_OR_RETURN(int64_t interval, ParseDurationMs(f.health_interval));
  DROVER_ASSIGN_OR_RETURN(int64_t thermal, ParseDurationMs(f.thermal_throttle));
  t.period = std::chrono::milliseconds(period);
  t.health_interval = std::chrono::milliseconds(interval);
  t.health.clean_checks = f.health_clean_checks;
  t.health.thermal_throttle_ns = thermal * 1'000'000;
  DROVER_RETURN_IF_ERROR(agent::ValidateTelemetryOptions(t));
  return t;
}

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* f) {
  cmd->add_option("--sandbox", f->mode,
                  "run every job in its own mount and PID namespaces, as its tenant's user (on), or as the agent "
                  "runs (off: any job can read what the agent can)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--sandbox-uid-base", f->uid_base,
                  "the first uid of tenants' jobs: a tenant's jobs run as uid = gid = BASE + hash(tenant) % COUNT, "
                  "the same on every node")
      ->check(CLI::Range(int64_t{1000}, int64_t{4'000'000'000}))
      ->capture_default_str();
  cmd->add_option("--sandbox-uid-count", f->uid_count, "how many uids the tenants' jobs draw from")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))
      ->capture_default_str();
  cmd->add_option("--root-tenants", f->root_tenants,
                  "tenants whose jobs run as root (still in their namespaces); repeatable or comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sandbox-seccomp", f->seccomp,
                  "filter jobs' system calls: ptrace, mount, namespaces, raw sockets, kernel modules and the like end "
                  "the job (on), or allow every call the job's user may make (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--sandbox-hide", f->hide,
                  "a directory or file no job sees (the agent's data and state directories always are); repeatable");
}

Result<agent::SandboxPolicy> SandboxPolicyFrom(const SandboxFlags& f) {
  agent::SandboxPolicy p;
  p.enabled = f.mode != "off";
  p.seccomp = f.seccomp != "off";
  if (f.uid_base < 1000 || f.uid_count < 1 || f.uid_base + f.uid_count > int64_t{4'294'967'294}) {
    return InvalidArgument("--sandbox-uid-base and --sandbox-uid-count must name uids between 1000 and 4294967294");
  }
  p.uid_base = static_cast<uid_t>(f.uid_base);
  p.uid_count = static_cast<uint32_t>(f.uid_count);
  p.root_tenants = {f.root_tenants.begin(), f.root_tenants.end()};
  p.root_tenants.erase("");
  for (const std::string& h : f.hide) {
    if (h.empty() || h[0] != '/') return InvalidArgument("--sandbox-hide '" + h + "': not an absolute path");
    p.hide.push_back(h);
  }
  return p;
}

void AddContainerFlags(CLI::App* cmd, ContainerFlags* f) {
  cmd->add_option("--containers", f->mode, "run jobs that name an image in OCI containers (on), or fail them (off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--container-runtime", f->runtime,
                  "the OCI runtime the agent drives (runc; crun refuses cgroup v1 hybrid hosts)")
      ->capture_default_str();
  cmd->add_option("--image-store", f->store, "where the node keeps its images (default <data-dir>/images)");
  cmd->add_option("--image-store-limit", f->limit,
                  "the most the image store holds (e.g. 200g); above it, images no job uses are evicted, oldest "
                  "use first; 0: no limit")
      ->capture_default_str();
  cmd->add_option("--container-disk-limit", f->disk_limit,
                  "the most a container may write outside its mounts (its writable layer, e.g. 100g); over it "
                  "the job is stopped; a job's --disk asks for less; 0: no limit")
      ->capture_default_str();
  cmd->add_option("--insecure-registry", f->insecure,
                  "a registry (HOST:PORT) spoken to over plain HTTP or unverified TLS; repeatable");
  cmd->add_option("--registry-auth", f->auth_file,
                  "registry credentials in the containers-auth.json format (podman's and skopeo's), read by the "
                  "pulls; never sent to jobs");
}

Result<agent::ContainerOptions> ContainerOptionsFrom(const ContainerFlags& f) {
  agent::ContainerOptions o;
  o.enabled = f.mode != "off";
  o.runtime = f.runtime;
  if (o.runtime.empty()) return InvalidArgument("--container-runtime: empty");
  if (!f.store.empty()) {
    if (f.store[0] != '/') return InvalidArgument("--image-store '" + f.store + "': not an absolute path");
    o.store.root = f.store;
  }
  auto limit = ParseBytes(f.limit);
  if (!limit.ok() || *limit < 0) return InvalidArgument("--image-store-limit '" + f.limit + "': not a size");
  o.store.limit_bytes = *limit;
  auto disk = ParseBytes(f.disk_limit);
  if (!disk.ok() || *disk < 0) return InvalidArgument("--container-disk-limit '" + f.disk_limit + "': not a size");
  o.disk_limit_bytes = *disk;
  for (const std::string& r : f.insecure) {
    if (r.empty() || r.find('/') != std::string::npos) {
      return InvalidArgument("--insecure-registry '" + r + "': expected HOST[:PORT]");
    }
    o.store.insecure_registries.push_back(r);
  }
  o.store.auth_file = f.auth_file;
  return o;
}

Result<std::vector<FaultFlag>> ParseFaultFlags(const std::vector<std::string>& flags) {
  std::vector<FaultFlag> out;
  for (const std::string& text : flags) {
    auto bad = [&](const std::string& why) {
      return InvalidArgument("--fault '" + text + "': " + why +
                             " (expected NODE:GPU:FAULT[@DELAY], e.g. sim-1:0:xid:79@30s)");
    };
    size_t c1 = text.find(':');
    size_t c2 = c1 == std::string::npos ? c1 : text.find(':', c1 + 1);
    if (c2 == std::string::npos) return bad("missing a part");
    FaultFlag f;
    f.node = text.substr(0, c1);
    std::string gpu = text.substr(c1 + 1, c2 - c1 - 1);
    std::string rest = text.substr(c2 + 1);
    std::string delay = "0s";
    if (size_t at = rest.find('@'); at != std::string::npos) {
      delay = rest.substr(at + 1);
      rest = rest.substr(0, at);
    }
    char* end = nullptr;
    long g = std::strtol(gpu.c_str(), &end, 10);
    if (gpu.empty() || *end != '\0' || g < 0 || g > 63) return bad("gpu '" + gpu + "' is not 0..63");
    auto fault = ParseFault(rest);
    if (!fault.ok()) return bad(fault.status().message());
    auto ms = ParseDurationMs(delay);
    if (!ms.ok()) return bad(ms.status().message());
    f.fault = {static_cast<int>(g), *fault, std::chrono::milliseconds(*ms)};
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<agent::ScheduledFault> FaultsFor(const std::vector<FaultFlag>& all, const std::string& node) {
  std::vector<agent::ScheduledFault> out;
  for (const FaultFlag& f : all) {
    if (f.node == node) out.push_back(f.fault);
  }
  return out;
}

Result<std::vector<std::unique_ptr<agent::DeviceBackend>>> Backends(const std::vector<std::string>& names,
                                                                    const agent::SimulatedSpec& simulated) {
  std::vector<std::unique_ptr<agent::DeviceBackend>> out;
  for (const std::string& name : names) {
    if (name == "auto") {
      // Every vendor library that loads on this machine, then OpenCL.
      out.push_back(agent::MakeNvmlBackend());
      out.push_back(agent::MakeRocmSmiBackend());
      out.push_back(agent::MakeLevelZeroBackend());
      out.push_back(agent::MakeOpenClBackend());
    } else if (name == "nvml") {
      out.push_back(agent::MakeNvmlBackend());
    } else if (name == "rocm-smi") {
      out.push_back(agent::MakeRocmSmiBackend());
    } else if (name == "level-zero") {
      out.push_back(agent::MakeLevelZeroBackend());
    } else if (name == "opencl") {
      out.push_back(agent::MakeOpenClBackend());
    } else if (name == "simulated") {
      DROVER_ASSIGN_OR_RETURN(auto b, agent::MakeSimulatedBackend(simulated));
      out.push_back(std::move(b));
    } else if (name != "none") {
      return InvalidArgument("device backend '" + name +
                             "' is unknown (use auto, nvml, rocm-smi, level-zero, opencl, simulated or none)");
    }
  }
  return out;
}

Result<std::unique_ptr<agent::Agent>> StartAgent(agent::AgentOptions o, const std::string& node,
                                                 const std::string& server, const std::string& dir,
                                                 std::vector<std::unique_ptr<agent::DeviceBackend>> b,
                                                 std::map<std::string, std::string> labels) {
  o.labels = std::move(labels);
  o.node_name = node;
  o.server_address = server;
  o.data_dir = dir;
  // The small static supervisor beside this binary when there is one (an
  // exec of it costs a few ms, of drover tens); else drover's own verb.
  const std::string self = SelfExe();
  const std::string small = self.substr(0, self.rfind('/') + 1) + "drover-supervise";
  o.supervisor_exe = ::access(small.c_str(), X_OK) == 0 ? small : self;
  o.backends = std::move(b);
  return agent::StartAgent(std::move(o));
}

}  // namespace drover::app
