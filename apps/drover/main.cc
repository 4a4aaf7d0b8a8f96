// drover: one binary, four roles (up, server, agent, gateway later) and the CLI.
// Thin: parses the verb and hands off.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>
#include <algorithm>
#include <thread>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent/agent.h"
#include "drover/agent/devices/device_backend.h"
#include "drover/agent/exit_watcher.h"
#include "drover/agent/service.h"
#include "drover/agent/supervisor.h"
#include "drover/auth/cluster_ca.h"
#include "drover/auth/token.h"
#include "gateway_role.h"
#include "ha.h"
#include "live_workload.h"
#include "drover/cli/commands.h"
#include "drover/common/address.h"
#include "drover/common/config.h"
#include "drover/common/fault.h"
#include "drover/common/files.h"
#include "drover/common/ids.h"
#include "drover/common/version.h"
#include "drover/membership/udp_hub.h"
#include "drover/rpc/channel.h"
#include "drover/runtime/event_loop.h"
#include "drover/runtime/logging.h"
#include "drover/server/deployments.h"
#include "drover/server/scheduler_options.h"
#include "drover/server/server.h"
#include "drover/sim/engine.h"
#include "drover/sim/loaders.h"
#include "drover/sim/report.h"

namespace {

using drover::Result;
using drover::Status;

struct RoleFlags {
  std::string data_dir = ".drover";
  std::string grpc_listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:8080";
  std::string server_addr = "127.0.0.1:7070";
  std::string node_name;
  std::vector<std::string> devices = {"auto"};
  // Telemetry and health (docs/devices.md).
  std::string telemetry_period = "1s";
  std::string heartbeat_interval = "250ms";
  std::string gossip_listen;
  std::string checkpoint_root;
  std::string state_dir;
  std::string checkpoint_retention = "1h";
  std::string lease_ttl = "1500ms";
  std::string archive_after = "5m";
  std::string archive_retention = "0";
  std::string health_interval = "1s";
  int health_clean_checks = 3;
  std::string thermal_throttle = "30s";
  std::string agent_metrics_listen;
  std::vector<std::string> faults;  // NODE:GPU:FAULT[@DELAY]
  // `up --workload mixed`: a live synthetic workload on the simulated nodes.
  std::string workload = "none";
  double workload_time_scale = 60;
  uint64_t workload_seed = 1;
  double workload_load = 1.3;
  std::string sim_model = "H100 80GB";
  int sim_gpus = 8;
  int simulate = 0;
  std::string log_level = "info";
  std::string supervise_dir;
  drover::SchedulerFlags sched;
  std::vector<std::string> labels;  // k=v
  // Security (docs/security.md).
  bool insecure = false;
  bool metrics_public = false;
  std::vector<std::string> http_host_names;
  std::string rate_limit_writes = "500:2000";  // per token, per second:burst
  std::string rate_limit_reads = "5000:20000";
  std::string join_token;
  std::string token_file;
  int service_priority = 100;  // server: deployments' replicas
  bool services_preempt = true;
  std::string service_ports;   // agent: "20000-29999" (empty: any free port)
  std::string advertise_host;  // agent: the host its services are reached at
  // TLS (docs/security.md, "Across machines").
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string tls_ca_key;
  std::string ca_file;             // agent: the cluster CA to verify the server with
  std::string metrics_token_file;  // agent: scrape token for /metrics
  bool insecure_metrics = false;
  drover::app::HaFlags ha;  // --store, etcd, leader lease (docs/ha.md)
  int up_ha = 0;            // up --ha N
  std::vector<std::string> up_ha_server_flags;  // the server flags given to `up --ha`, for its servers
  int up_ha_etcd_port = 2379;
};

constexpr std::string_view kRoles[] = {"up", "server", "agent"};

// "rack=r1" -> {rack: r1}; the agent checks names and values.
Result<std::map<std::string, std::string>> ParseLabels(const std::vector<std::string>& labels) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : labels) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return drover::InvalidArgument("--label '" + kv + "' is not NAME=VALUE");
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

// Simulated node i (1-based) of `drover up --simulate N`: two nodes per leaf
// switch, four per rack, so gang placement by switch and rack has something
// to choose between.
std::map<std::string, std::string> SimulatedLabels(int i) {
  return {{"rack", "rack-" + std::to_string((i - 1) / 4 + 1)}, {"switch", "switch-" + std::to_string((i - 1) / 2 + 1)}};
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "drover";
}

std::string Hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  std::string name;
  for (char c : std::string(buf)) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (drover::ValidateNodeName(name).ok()) return name;
  return "local";
}

// Blocks until SIGINT or SIGTERM.
int WaitForSignal() {
  drover::app::SignalWaiter signals;
  signals.Wait();
  return 0;
}

Result<drover::agent::TelemetryOptions> TelemetryFrom(const RoleFlags& f) {
  drover::agent::TelemetryOptions t;
  DROVER_ASSIGN_OR_RETURN(int64_t period, drover::ParseDurationMs(f.telemetry_period));
  DROVER_ASSIGN_OR_RETURN(int64_t interval, drover::ParseDurationMs(f.health_interval));
  DROVER_ASSIGN_OR_RETURN(int64_t thermal, drover::ParseDurationMs(f.thermal_throttle));
  t.period = std::chrono::milliseconds(period);
  t.health_interval = std::chrono::milliseconds(interval);
  t.health.clean_checks = f.health_clean_checks;
  t.health.thermal_throttle_ns = thermal * 1'000'000;
  DROVER_RETURN_IF_ERROR(drover::agent::ValidateTelemetryOptions(t));
  return t;
}

// "sim-2:3:xid:79@30s" -> node sim-2, gpu 3, fault xid:79, 30 s after start.
struct FaultFlag {
  std::string node;
  drover::agent::ScheduledFault fault;
};
Result<std::vector<FaultFlag>> ParseFaultFlags(const std::vector<std::string>& flags) {
  std::vector<FaultFlag> out;
  for (const std::string& text : flags) {
    auto bad = [&](const std::string& why) {
      return drover::InvalidArgument("--fault '" + text + "': " + why + " (expected NODE:GPU:FAULT[@DELAY], e.g. sim-1:0:xid:79@30s)");
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
    auto fault = drover::ParseFault(rest);
    if (!fault.ok()) return bad(fault.status().message());
    auto ms = drover::ParseDurationMs(delay);
    if (!ms.ok()) return bad(ms.status().message());
    f.fault = {static_cast<int>(g), *fault, std::chrono::milliseconds(*ms)};
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<drover::agent::ScheduledFault> FaultsFor(const std::vector<FaultFlag>& all, const std::string& node) {
  std::vector<drover::agent::ScheduledFault> out;
  for (const FaultFlag& f : all) {
    if (f.node == node) out.push_back(f.fault);
  }
  return out;
}

Result<std::vector<std::unique_ptr<drover::agent::DeviceBackend>>> Backends(const RoleFlags& f) {
  std::vector<std::unique_ptr<drover::agent::DeviceBackend>> out;
  for (const std::string& name : f.devices) {
    if (name == "auto") {
      // Every vendor library that loads on this machine, then OpenCL.
      out.push_back(drover::agent::MakeNvmlBackend());
      out.push_back(drover::agent::MakeRocmSmiBackend());
      out.push_back(drover::agent::MakeLevelZeroBackend());
      out.push_back(drover::agent::MakeOpenClBackend());
    } else if (name == "nvml") {
      out.push_back(drover::agent::MakeNvmlBackend());
    } else if (name == "rocm-smi") {
      out.push_back(drover::agent::MakeRocmSmiBackend());
    } else if (name == "level-zero") {
      out.push_back(drover::agent::MakeLevelZeroBackend());
    } else if (name == "opencl") {
      out.push_back(drover::agent::MakeOpenClBackend());
    } else if (name == "simulated") {
      DROVER_ASSIGN_OR_RETURN(auto b, drover::agent::MakeSimulatedBackend({f.sim_gpus, f.sim_model, f.node_name}));
      out.push_back(std::move(b));
    } else if (name != "none") {
      return drover::InvalidArgument("device backend '" + name +
                                     "' is unknown (use auto, nvml, rocm-smi, level-zero, opencl, simulated or none)");
    }
  }
  return out;
}

// `o` carries the telemetry, metrics and topology settings.
Result<std::unique_ptr<drover::agent::Agent>> StartAgent(drover::agent::AgentOptions o, const std::string& node,
                                                         const std::string& server, const std::string& dir,
                                                         std::vector<std::unique_ptr<drover::agent::DeviceBackend>> b,
                                                         std::map<std::string, std::string> labels = {}) {
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
  return drover::agent::StartAgent(std::move(o));
}

// A simulated node holds a gossip socket and job files: a thousand of them
// need more descriptors than the usual soft limit (1,024). Raised to the
// hard limit, which the operator sets; said when that is still too low.
void RaiseOpenFileLimit(int nodes) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  rlim_t want = static_cast<rlim_t>(nodes) * 4 + 1024;
  if (r.rlim_cur < want && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = std::min(r.rlim_max, std::max(want, r.rlim_cur));
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
  if (r.rlim_cur < want) {
    spdlog::warn("{} simulated nodes want about {} open files; the limit is {} (raise it with ulimit -n)", nodes,
                 want, r.rlim_cur);
  }
}

int Fatal(const Status& s) {
  spdlog::critical("{}", s.ToString());
  return 1;
}

// A bad setting is a usage error (exit 2), reported before anything starts.
int BadConfig(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return drover::cli::kExitUsage;
}

// `up --ha N`: etcd members and servers as child processes, an admin token
// for the CLI in <data-dir>/admin.token, and where to find the leader.
Result<std::unique_ptr<drover::app::HaGroup>> StartHaGroup(const RoleFlags& f) {
  auto port_of = [](const std::string& listen) { return std::atoi(listen.substr(listen.rfind(':') + 1).c_str()); };
  drover::app::HaGroupOptions ho;
  ho.members = f.up_ha;
  ho.data_dir = f.data_dir;
  ho.etcd_port = f.up_ha_etcd_port;
  ho.grpc_port = port_of(f.grpc_listen);
  ho.http_port = port_of(f.http_listen);
  ho.log_level = f.log_level;
  ho.self_exe = SelfExe();
  ho.server_flags = f.up_ha_server_flags;
  DROVER_ASSIGN_OR_RETURN(auto group, drover::app::HaGroup::Start(ho));
  DROVER_ASSIGN_OR_RETURN(std::string leader, group->WaitForLeader(std::chrono::seconds(60)));
  DROVER_RETURN_IF_ERROR(group->authority()->EnsureBootstrapAdmin(f.data_dir + "/admin.token").status());
  // The CLI run from here finds every server (and the token) in the data dir.
  DROVER_RETURN_IF_ERROR(drover::WriteFileAtomic(f.data_dir + "/endpoints.json",
                                                 fmt::format("{{\"grpc\": \"{}\", \"http\": \"{}\"}}\n", group->servers(),
                                                             group->http_servers()),
                                                 0644));
  spdlog::info("the leader is {}; elsewhere: export DROVER_ADDR={}", leader, group->servers());
  return group;
}

int RunServer(const RoleFlags& f, const drover::app::GatewayFlags& gw, bool all_in_one) {
  if (Status s = drover::runtime::InitLogging(f.log_level); !s.ok()) return Fatal(s);
  drover::app::LiveWorkloadOptions live;
  live.kind = f.workload;
  live.nodes = f.simulate;
  live.gpus_per_node = f.sim_gpus;
  live.gpu_model = f.sim_model;
  live.time_scale = f.workload_time_scale;
  live.seed = f.workload_seed;
  live.target_load = f.workload_load;
  drover::SchedulerFlags sched = f.sched;
  if (all_in_one && f.workload != "none") {
    if (Status s = drover::app::ValidateLiveWorkload(live); !s.ok()) return BadConfig(s);
    drover::app::ApplyLiveSchedulerDefaults(live, &sched);
  }
  auto control = drover::server::MakeControlLoopOptions(sched);
  if (!control.ok()) return BadConfig(control.status());
  auto local_labels = ParseLabels(f.labels);
  if (!local_labels.ok()) return BadConfig(local_labels.status());
  drover::server::ServerOptions so{f.data_dir, f.grpc_listen, f.http_listen, std::move(*control)};
  auto heartbeat = drover::ParseDurationMs(f.heartbeat_interval);
  auto ttl = drover::ParseDurationMs(f.lease_ttl);
  if (!heartbeat.ok()) return BadConfig(heartbeat.status());
  if (!ttl.ok()) return BadConfig(ttl.status());
  so.control.lease.heartbeat_interval = std::chrono::milliseconds(*heartbeat);
  so.control.lease.ttl = std::chrono::milliseconds(*ttl);
  so.control.lease = so.control.lease.Derive();
  if (Status s = so.control.lease.Validate(); !s.ok()) return BadConfig(s);
  auto archive_after = drover::ParseDurationMs(f.archive_after);
  auto archive_retention = drover::ParseDurationMs(f.archive_retention);
  if (!archive_after.ok()) return BadConfig(archive_after.status());
  if (!archive_retention.ok()) return BadConfig(archive_retention.status());
  so.control.archive_after = std::chrono::milliseconds(*archive_after);
  so.control.archive_retention = std::chrono::milliseconds(*archive_retention);
  so.control.deployments.service_priority = f.service_priority;
  so.control.deployments.services_preempt = f.services_preempt;
  if (Status s = drover::server::ValidateDeploymentOptions(so.control.deployments); !s.ok()) return BadConfig(s);
  so.insecure = f.insecure;
  so.tls_cert = f.tls_cert;
  so.tls_key = f.tls_key;
  so.tls_ca = f.tls_ca;
  so.tls_ca_key = f.tls_ca_key;
  if (Status s = drover::app::ApplyHaFlags(f.ha, &so); !s.ok()) return BadConfig(s);
  // From here on a signal ends the process's wait, a standby's included.
  drover::app::SignalWaiter signals;
  so.stop = signals.stopped();
  so.on_leadership_lost = [](const Status& why) { drover::app::StartOver(why); };
  so.security.metrics_public = f.metrics_public;
  so.security.http_host_names = f.http_host_names;
  // "RATE:BURST" per token; a tenant's buckets are four times a token's.
  auto parse_limit = [](const std::string& text, const char* flag) -> Result<drover::auth::RateLimit> {
    size_t colon = text.find(':');
    char* end = nullptr;
    double rate = std::strtod(text.c_str(), &end);
    double burst = colon == std::string::npos ? rate : std::strtod(text.c_str() + colon + 1, nullptr);
    if (text.empty() || end == text.c_str() || !(rate > 0) || !(burst >= 1) || rate > 1e9 || burst > 1e9) {
      return drover::InvalidArgument(std::string(flag) + " '" + text + "' is not RATE:BURST (requests per second, > 0)");
    }
    return drover::auth::RateLimit{rate, burst};
  };
  auto writes = parse_limit(f.rate_limit_writes, "--rate-limit-writes");
  if (!writes.ok()) return BadConfig(writes.status());
  auto reads = parse_limit(f.rate_limit_reads, "--rate-limit-reads");
  if (!reads.ok()) return BadConfig(reads.status());
  so.security.per_token = *writes;
  so.security.per_tenant = {writes->per_second * 4, writes->burst * 4};
  so.security.reads_per_token = *reads;
  so.security.reads_per_tenant = {reads->per_second * 4, reads->burst * 4};
  // The local agent's metrics beyond loopback: --insecure covers them too.
  if (all_in_one) {
    drover::agent::AgentOptions check;
    check.metrics_listen = f.agent_metrics_listen;
    check.metrics_insecure = f.insecure;
    if (Status s = drover::agent::CheckMetricsExposure(check); !s.ok()) return BadConfig(s);
  }
  // One server in this process, or (`up --ha N`) a whole HA control plane
  // of child processes (apps/drover/ha.h).
  std::unique_ptr<drover::server::Server> server;
  std::unique_ptr<drover::app::HaGroup> ha_group;
  drover::auth::Authority* authority = nullptr;
  std::string server_addr;
  if (all_in_one && f.up_ha > 0) {
    auto group = StartHaGroup(f);
    if (!group.ok()) return Fatal(group.status());
    ha_group = std::move(*group);
    authority = ha_group->authority();
    server_addr = ha_group->servers();
  } else {
    auto started = drover::server::StartServer(so);
    if (!started.ok() && started.status().code() == drover::Code::kCancelled) return 0;  // stopped while standing by
    if (!started.ok()) return Fatal(started.status());
    server = std::move(*started);
    authority = server->authority();
    server_addr = server->grpc_address();
  }
  // The OpenAI-compatible gateway (docs/gateway.md), fed over the server's
  // own channel (or, for `up --ha`, over gRPC to the group) with a token of
  // its own.
  std::unique_ptr<drover::app::GatewayRole> gateway;
  // A server that serves TLS serves the gateway with the same certificate
  // (the --tls-* files, else those of `drover certs init`).
  drover::app::GatewayFlags gw_tls = gw;
  if (server && !server->ca_file().empty()) {
    drover::auth::TlsPaths paths = drover::auth::TlsPathsIn(f.data_dir + "/tls");
    gw_tls.tls_cert = f.tls_cert.empty() ? paths.server_cert : f.tls_cert;
    gw_tls.tls_key = f.tls_cert.empty() ? paths.server_key : f.tls_key;
  }
  if (!drover::app::GatewayOff(gw)) {
    auto options = drover::app::GatewayOptionsFrom(gw_tls, f.insecure);
    if (!options.ok()) return BadConfig(options.status());
    auto token = authority->MintInternal({"gateway", "default", drover::auth::Role::kGateway, "", drover::Duration(0)});
    if (!token.ok()) return Fatal(token.status());
    drover::app::GatewayRoleOptions ro;
    ro.gateway = *options;
    ro.gateway.metrics_public = f.metrics_public;
    if (server) {
      ro.channel = [srv = server.get(), t = *token] { return srv->InProcessChannel(t); };
    } else {
      ro.channel = [addr = server_addr, t = *token] { return drover::rpc::MakeChannel(addr, t); };
    }
    auto started = drover::app::GatewayRole::Start(std::move(ro));
    if (!started.ok() && !gw.listen_given) {
      // The default port is taken (another cluster on this machine): the
      // control plane runs without a gateway rather than not at all.
      spdlog::warn("no gateway: {} (choose another address with --gateway-listen)", started.status().message());
    } else if (!started.ok()) {
      return Fatal(started.status());
    } else {
      gateway = std::move(*started);
    }
  }
  if (gateway) {
    const std::string gateway_addr = fmt::format("{}:{}", drover::HostOf(gw.listen), gateway->port());
    if (Status s = drover::app::AddGatewayToEndpoints(f.data_dir, gateway_addr, !gw_tls.tls_cert.empty()); !s.ok()) return Fatal(s);
    spdlog::info("OpenAI-compatible gateway on {}://{}/v1 (docs/gateway.md)", gw_tls.tls_cert.empty() ? "http" : "https",
                 gateway_addr);
  }
  // In-process agents and the live workload verify a TLS server like any client.
  const std::string ca_file = server ? server->ca_file() : "";
  std::string ca_pem;
  if (!ca_file.empty()) {
    auto pem = drover::ReadTextFile(ca_file);
    if (!pem.ok()) return Fatal(pem.status());
    ca_pem = *pem;
  }
  // In-process agents and the live workload get credentials of their own:
  // a node token per node (bound to its name) and an admin token.
  auto internal_token = [&](const std::string& name, drover::auth::Role role, const std::string& node) {
    return authority->MintInternal({name, "default", role, node, drover::Duration(0)});
  };
  // Simulated nodes share a few loops, one per core (at most 4): a node is
  // a set of tasks and timers on one of them, not threads of its own.
  std::vector<std::unique_ptr<drover::runtime::EventLoop>> sim_loops;
  std::unique_ptr<drover::membership::UdpHub> sim_gossip;
  std::unique_ptr<drover::agent::ExitWatcher> sim_exits;
  std::vector<std::unique_ptr<drover::agent::Agent>> agents;  // stopped before the loops go
  auto telemetry = TelemetryFrom(f);
  if (!telemetry.ok()) return BadConfig(telemetry.status());
  auto faults = ParseFaultFlags(f.faults);
  if (!faults.ok()) return BadConfig(faults.status());
  if (all_in_one) {
    const std::string& addr = server_addr;
    RoleFlags local = f;
    local.node_name = f.node_name.empty() ? Hostname() : f.node_name;
    auto backends = Backends(local);
    if (!backends.ok()) return Fatal(backends.status());
    drover::agent::AgentOptions lo;
    lo.fencing = ha_group != nullptr;  // in the server's process it cannot lose the server and live
    lo.telemetry = *telemetry;
    lo.metrics_listen = f.agent_metrics_listen;
    lo.metrics_insecure = f.insecure;
    lo.ca_file = ca_file;
    lo.faults = FaultsFor(*faults, local.node_name);
    auto local_token = internal_token(local.node_name, drover::auth::Role::kNode, local.node_name);
    if (!local_token.ok()) return Fatal(local_token.status());
    lo.token = *local_token;
    // In the server's process: its channel needs no socket (the agents
    // stop before the server does).
    if (server) lo.channel = [srv = server.get()](const std::string& token) { return srv->InProcessChannel(token); };
    auto a = StartAgent(std::move(lo), local.node_name, addr, f.data_dir + "/agents/" + local.node_name,
                        std::move(*backends), *local_labels);
    if (!a.ok()) return Fatal(a.status());
    agents.push_back(std::move(*a));
    const int loops = f.simulate == 0 ? 0 : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
    for (int i = 0; i < loops; ++i) {
      sim_loops.push_back(std::make_unique<drover::runtime::EventLoop>("sim-nodes-" + std::to_string(i)));
      sim_loops.back()->Start();
    }
    // Their gossip (loopback UDP, a socket each) is served by one thread.
    if (f.simulate > 0) {
      RaiseOpenFileLimit(f.simulate);
      auto hub = drover::membership::UdpHub::Start({});
      if (!hub.ok()) return Fatal(hub.status());
      sim_gossip = std::move(*hub);
      // And the ends of their jobs' supervisors by one more.
      auto watcher = drover::agent::ExitWatcher::Start();
      if (!watcher.ok()) return Fatal(watcher.status());
      sim_exits = std::move(*watcher);
    }
    for (int i = 1; i <= f.simulate; ++i) {
      std::string name = "sim-" + std::to_string(i);
      auto b = drover::agent::MakeSimulatedBackend({f.sim_gpus, f.sim_model, name});
      if (!b.ok()) return Fatal(b.status());
      std::vector<std::unique_ptr<drover::agent::DeviceBackend>> bs;
      bs.push_back(std::move(*b));
      drover::agent::AgentOptions sim_opts;
      sim_opts.fencing = false;
      sim_opts.telemetry = *telemetry;
      sim_opts.discover_host_topology = false;
      sim_opts.host_topology = drover::agent::SimulatedHostTopology();
      sim_opts.loop = sim_loops[static_cast<size_t>(i - 1) % sim_loops.size()].get();
      sim_opts.gossip_listen = "127.0.0.1:0";
      sim_opts.gossip_hub = sim_gossip.get();
      sim_opts.exit_watcher = sim_exits.get();
      sim_opts.spare_supervisor = false;
      // One hub thread carries every simulated node's gossip: the period
      // grows with their number (1 ms per node, at least the default
      // 200 ms), which keeps it near 2 packets per millisecond in all
      // (docs/performance.md).
      sim_opts.gossip_period = std::max(std::chrono::milliseconds(200), std::chrono::milliseconds(f.simulate));
      sim_opts.faults = FaultsFor(*faults, name);
      sim_opts.ca_file = ca_file;
      auto sim_token = internal_token(name, drover::auth::Role::kNode, name);
      if (!sim_token.ok()) return Fatal(sim_token.status());
      sim_opts.token = *sim_token;
      auto sim = StartAgent(std::move(sim_opts), name, addr, f.data_dir + "/agents/" + name, std::move(bs),
                            SimulatedLabels(i));
      if (!sim.ok()) return Fatal(sim.status());
      agents.push_back(std::move(*sim));
      // Starting a node is quicker than its first minutes on a loop (it
      // registers, reports, hears its peers): every 25 nodes, wait until the
      // loops caught up, so that their heartbeats never queue behind a
      // thousand start-ups (that cost nodes their leases at start).
      if (i % 25 == 0) {
        for (auto& loop : sim_loops) {
          std::promise<void> caught_up;
          if (loop->Post([&] { caught_up.set_value(); })) caught_up.get_future().wait();
        }
      }
    }
    spdlog::info("drover up: 1 local node and {} simulated nodes; try: DROVER_ADDR={} drover nodes", f.simulate, addr);
  }
  std::unique_ptr<drover::app::LiveWorkload> workload;
  if (all_in_one && f.workload != "none") {
    live.grpc_address = server_addr;
    auto live_token = internal_token("live-workload", drover::auth::Role::kAdmin, "");
    if (!live_token.ok()) return Fatal(live_token.status());
    live.token = *live_token;
    live.ca_pem = ca_pem;
    auto w = drover::app::LiveWorkload::Start(live);
    if (!w.ok()) return Fatal(w.status());
    workload = std::move(*w);
  }
  signals.Wait();
  if (workload) workload->Stop();
  if (gateway) gateway->Stop();
  for (auto& a : agents) a->Stop();
  if (server) server->Stop();
  if (ha_group) ha_group->Stop();
  return 0;
}

int RunAgentRole(const RoleFlags& f) {
  if (Status s = drover::runtime::InitLogging(f.log_level); !s.ok()) return Fatal(s);
  RoleFlags a = f;
  if (a.node_name.empty()) a.node_name = Hostname();
  auto labels = ParseLabels(f.labels);
  if (!labels.ok()) return BadConfig(labels.status());
  auto backends = Backends(a);
  if (!backends.ok()) return Fatal(backends.status());
  auto telemetry = TelemetryFrom(f);
  if (!telemetry.ok()) return BadConfig(telemetry.status());
  auto faults = ParseFaultFlags(f.faults);
  if (!faults.ok()) return BadConfig(faults.status());
  drover::agent::AgentOptions o;
  o.telemetry = *telemetry;
  o.metrics_listen = f.agent_metrics_listen.empty() ? "127.0.0.1:9400" : f.agent_metrics_listen;
  o.metrics_insecure = f.insecure_metrics;
  if (!f.metrics_token_file.empty()) {
    std::ifstream in(f.metrics_token_file);
    if (!in || !std::getline(in, o.metrics_token) || o.metrics_token.size() < 16) {
      return BadConfig(drover::InvalidArgument("--metrics-token-file '" + f.metrics_token_file +
                                               "' holds no token of at least 16 characters on its first line"));
    }
  }
  if (Status s = drover::agent::CheckMetricsExposure(o); !s.ok()) return BadConfig(s);
  o.ca_file = f.ca_file;
  o.faults = FaultsFor(*faults, a.node_name);
  o.join_token = f.join_token;
  o.gossip_listen = f.gossip_listen;
  o.checkpoint_root = f.checkpoint_root;
  o.state_dir = f.state_dir;
  if (!f.service_ports.empty()) {
    auto range = drover::agent::ParsePortRange(f.service_ports);
    if (!range.ok()) return BadConfig(range.status());
    o.service_port_first = range->first;
    o.service_port_last = range->second;
  }
  o.advertise_host = f.advertise_host;
  auto retention = drover::ParseDurationMs(f.checkpoint_retention);
  if (!retention.ok()) return BadConfig(retention.status());
  o.checkpoint_retention = std::chrono::seconds(*retention / 1000);
  if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!in || !std::getline(in, o.token) || o.token.empty()) {
      return BadConfig(drover::InvalidArgument("--token-file '" + f.token_file + "' holds no token"));
    }
  }
  auto agent = StartAgent(std::move(o), a.node_name, a.server_addr, a.data_dir, std::move(*backends),
                          std::move(*labels));
  if (!agent.ok()) return Fatal(agent.status());
  WaitForSignal();
  (*agent)->Stop();
  return 0;
}

std::string Date(int64_t unix_seconds) {
  char buf[32] = {};
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

// `drover certs init`: the cluster CA and the server certificate, then what to do next.
int RunCertsInit(const std::string& data_dir, const std::vector<std::string>& sans) {
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = drover::auth::InitClusterTls(data_dir + "/tls", sans, now);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    return r.status().code() == drover::Code::kInvalidArgument || r.status().code() == drover::Code::kFailedPrecondition
               ? drover::cli::kExitUsage
               : drover::cli::kExitFailure;
  }
  std::vector<std::string> names = r->server.dns_names;
  names.insert(names.end(), r->server.ip_addresses.begin(), r->server.ip_addresses.end());
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  std::cout << (r->created_ca ? "created" : "kept") << " the cluster CA   " << r->paths.ca_cert << " ("
            << r->ca.fingerprint << ", until " << Date(r->ca.not_after_unix) << ")\n"
            << "                          " << r->paths.ca_key << " (private: keep it on the server)\n"
            << (r->issued_server ? "issued" : "kept") << " the server certificate " << r->paths.server_cert
            << " (until " << Date(r->server.not_after_unix) << ") for " << joined << "\n\n"
            << "A server started with --data-dir " << data_dir << " now serves TLS on gRPC and HTTP and issues node\n"
            << "certificates at join. Copy " << r->paths.ca_cert << " to each machine, then:\n"
            << "  drover join-token --node gpu-07\n"
            << "  drover agent --server <host>:7070 --ca-file ca.crt --node-name gpu-07 --join-token <token>\n"
            << "The CLI finds the CA in <data-dir>/tls/ca.crt, or takes --ca-file / DROVER_CA_FILE.\n";
  return 0;
}

struct SimFlags {
  std::string cluster;
  std::string workload;
  std::string mode = "time";
  std::string policy;
  uint64_t seed = 1;
  bool seed_given = false;
  double inflate = 0;
  std::string stop_delay = "0";
  std::string tick = "0";
  std::string out;
  std::string gnuplot = "gnuplot";
  bool check = false;
  bool resume = false;
  bool all_preemptible = false;
};

// `drover sim`: loads the inputs, runs the engine, prints a summary and
// (with --out) writes the report. Single-threaded; starts no server.
int RunSim(const SimFlags& f, const std::vector<std::string>& args) {
  namespace sim = drover::sim;
  sim::EngineOptions o;
  o.seed = f.seed;
  o.inflate = f.inflate;
  o.check = f.check;
  o.resume = f.resume;
  o.all_preemptible = f.all_preemptible;
  auto mode = sim::ParseMode(f.mode);
  if (!mode.ok()) return BadConfig(mode.status());
  o.mode = *mode;
  auto policy = sim::ParsePolicy(f.policy);
  if (!policy.ok()) return BadConfig(policy.status());
  o.config = *policy;
  auto stop = drover::ParseDurationMs(f.stop_delay);
  if (!stop.ok()) return BadConfig(drover::InvalidArgument("--stop-delay: " + stop.status().message()));
  o.stop_delay_ms = *stop;
  auto tick = drover::ParseDurationMs(f.tick);
  if (!tick.ok()) return BadConfig(drover::InvalidArgument("--tick: " + tick.status().message()));
  o.tick_ms = *tick;
  auto cluster = sim::LoadCluster(f.cluster);
  if (!cluster.ok()) return BadConfig(cluster.status());
  // --seed also replaces a synthetic workload's own seed, but only when given.
  auto workload = f.seed_given ? sim::LoadWorkload(f.workload, f.seed) : sim::LoadWorkload(f.workload);
  if (!workload.ok()) return BadConfig(workload.status());
  // Without --seed a synthetic workload keeps its file's seed: report that
  // one, and let --inflate and the scheduler draw from it too.
  if (!f.seed_given && workload->seed) o.seed = *workload->seed;
  auto run = sim::Simulate(*cluster, *workload, o);
  if (!run.ok()) {
    std::cerr << "error: " << run.status().message() << "\n";
    return drover::cli::kExitFailure;
  }
  sim::RunInfo info;
  for (size_t i = 0; i < args.size(); ++i) info.command += (i ? " " : "") + args[i];
  info.cluster = cluster->name;
  info.workload = workload->name;
  info.cluster_spec = f.cluster;
  info.workload_spec = f.workload;
  info.nodes = static_cast<int64_t>(cluster->nodes.size());
  info.gpus = cluster->gpus();
  info.options = o;
  std::cout << sim::HumanSummary(info, *run);
  if (!f.out.empty()) {
    if (Status s = sim::WriteReport(f.out, info, *run, {f.gnuplot}); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return drover::cli::kExitFailure;
    }
    std::cout << "report: " << f.out << "/report.html\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  drover::app::SaveArgv(argv);
  // The supervisor must stay single-threaded and quiet: handle it first.
  if (argc == 4 && std::string(argv[1]) == "supervise" && std::string(argv[2]) == "--dir") {
    return drover::agent::RunSupervisor(argv[3]);
  }
  // `drover up|server|agent --config F` reads F as that role's flags (and
  // its scheduler: and tenants: sections): CLI11 reads a config file only
  // for the top-level app, so the flag moves in front of the role, and the
  // file is scoped to it. DROVER_CONFIG names the file when no flag does.
  std::vector<std::string> args(argv, argv + argc);
  std::string scope;
  if (args.size() > 1 && std::find(std::begin(kRoles), std::end(kRoles), args[1]) != std::end(kRoles)) {
    scope = args[1];
    std::vector<std::string> config;
    for (size_t i = 2; i < args.size();) {
      if (args[i] == "--config" && i + 1 < args.size()) {
        config = {"--config", args[i + 1]};
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      } else if (args[i].starts_with("--config=")) {
        config = {"--config", args[i].substr(9)};
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (args[i] == "--") {
        break;
      } else {
        ++i;
      }
    }
    if (config.empty() && std::getenv("DROVER_CONFIG") != nullptr) config = {"--config", std::getenv("DROVER_CONFIG")};
    args.insert(args.begin() + 1, config.begin(), config.end());
  }
  CLI::App app("drover: a GPU cluster manager", "drover");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(drover::kVersion));
  drover::AddYamlConfig(app, scope);
  int exit_code = 0;
  RoleFlags f;

  drover::app::GatewayFlags gw;
  auto add_server_flags = [&f, &gw](CLI::App* cmd) {
    drover::app::AddGatewayFlags(cmd, &gw, false);
    cmd->add_option("--service-priority", f.service_priority,
                    "priority of deployments' replicas that do not name one (0..1000; docs/deployments.md)")
        ->capture_default_str();
    cmd->add_option("--services-preempt", f.services_preempt,
                    "deployments' replicas may preempt lower-priority preemptible batch jobs")
        ->capture_default_str();
    cmd->add_option("--data-dir", f.data_dir, "where state, logs and job directories live")->capture_default_str();
    cmd->add_option("--grpc-listen", f.grpc_listen, "gRPC listen address (port 0 picks one)")->capture_default_str();
    cmd->add_option("--listen", f.http_listen, "HTTP listen address for /api/v1, /healthz, /readyz")->capture_default_str();
    cmd->add_option("--log-level", f.log_level, "trace, debug, info, warn, error")->capture_default_str();
    drover::AddSchedulerFlags(cmd, &f.sched);
    drover::app::AddHaFlags(cmd, &f.ha);
    cmd->add_flag("--insecure", f.insecure,
                  "allow listening beyond loopback without TLS (tokens cross the network in the clear)");
    cmd->add_option("--tls-cert", f.tls_cert,
                    "serve TLS with this certificate (PEM; default: <data-dir>/tls/server.crt when `drover certs init` made one)");
    cmd->add_option("--tls-key", f.tls_key, "the private key of --tls-cert (PEM)");
    cmd->add_option("--tls-ca", f.tls_ca, "the cluster CA certificate: client certificates must chain to it (PEM)");
    cmd->add_option("--tls-ca-key", f.tls_ca_key, "the CA's private key: issue node certificates at join (optional)");
    cmd->add_flag("--metrics-public", f.metrics_public, "serve /metrics without a token");
    cmd->add_option("--heartbeat-interval", f.heartbeat_interval, "how often agents send a heartbeat (docs/failures.md)")
        ->capture_default_str();
    cmd->add_option("--lease-ttl", f.lease_ttl,
                    "a node unheard for this long, directly or through its peers, is lost and its jobs run elsewhere; "
                    "its agent fences them at 2/3 of it (docs/failures.md)")
        ->capture_default_str();
    cmd->add_option("--archive-after", f.archive_after,
                    "a finished job moves from the live state to the archive (<data-dir>/archive.db) this long after "
                    "it ended; `drover jobs` lists both")
        ->capture_default_str();
    cmd->add_option("--archive-retention", f.archive_retention,
                    "archived jobs that ended longer ago than this are deleted (0: kept for good)")
        ->capture_default_str();
    cmd->add_option("--rate-limit-writes", f.rate_limit_writes,
                    "state-changing calls per token, RATE:BURST per second (a tenant: 4x)")
        ->capture_default_str();
    cmd->add_option("--rate-limit-reads", f.rate_limit_reads, "reads per token, RATE:BURST per second (a tenant: 4x)")
        ->capture_default_str();
    cmd->add_option("--http-host-name", f.http_host_names,
                    "a DNS name the HTTP listener answers to besides IP addresses, localhost and the hostname (repeatable)");
    // Only for the help text: main() moves it in front of the role.
    cmd->add_option("--config", "YAML file of this role's flags, scheduler: and tenants: (docs/configuration.md)");
  };
  CLI::App* up = app.add_subcommand("up", "all-in-one: server and an agent for this machine, plus simulated nodes");
  const size_t before_server_flags = up->get_options().size();
  add_server_flags(up);
  std::vector<CLI::Option*> up_server_options = up->get_options();
  up_server_options.erase(up_server_options.begin(),
                          up_server_options.begin() + static_cast<std::ptrdiff_t>(before_server_flags));
  up->add_option("--node-name", f.node_name, "name of this machine's node (default: hostname)");
  up->add_option("--devices", f.devices,
                 "device backends for this machine: auto, nvml, rocm-smi, level-zero, opencl, simulated, none")
      ->capture_default_str();
  up->add_option("--agent-metrics-listen", f.agent_metrics_listen,
                 "serve this machine's GPU metrics (DCGM names) on http://ADDR/metrics (port 0 picks one)");
  up->add_option("--fault", f.faults,
                 "inject a fault into a simulated GPU: NODE:GPU:FAULT[@DELAY], e.g. sim-1:0:xid:79@30s (repeatable)");
  up->add_option("--simulate", f.simulate, "number of simulated nodes to add")->check(CLI::Range(0, 1024));
  up->add_option("--ha", f.up_ha,
                 "run an HA control plane here instead of one server: N etcd members and N servers (gRPC and HTTP "
                 "on the --grpc-listen and --listen ports and the next N-1), restarted when they die (docs/ha.md)")
      ->check(CLI::Range(0, 7));
  up->add_option("--ha-etcd-port", f.up_ha_etcd_port, "first etcd client port of --ha (peers and members follow)")
      ->capture_default_str();
  up->add_option("--simulate-gpus", f.sim_gpus, "GPUs per simulated node")->check(CLI::Range(0, 64))->capture_default_str();
  up->add_option("--simulate-model", f.sim_model, "GPU model of simulated nodes")->capture_default_str();
  up->add_option("--label", f.labels, "label of this machine's node, NAME=VALUE, repeatable (simulated nodes get rack and switch)");
  auto add_telemetry_flags = [&f](CLI::App* cmd) {
    cmd->add_option("--telemetry-period", f.telemetry_period, "GPU sampling period, 10ms..1s")->capture_default_str();
    cmd->add_option("--health-interval", f.health_interval, "time between GPU health checks")->capture_default_str();
    cmd->add_option("--health-clean-checks", f.health_clean_checks,
                    "consecutive clean health checks before an unhealthy GPU returns to service")
        ->capture_default_str();
    cmd->add_option("--thermal-throttle", f.thermal_throttle,
                    "thermal throttling that lasts this long takes a GPU out of service")
        ->capture_default_str();
  };
  add_telemetry_flags(up);
  up->add_option("--workload", f.workload,
                 "keep submitting a synthetic workload to the simulated nodes: mixed or none")
      ->capture_default_str();
  up->add_option("--workload-time-scale", f.workload_time_scale,
                 "simulated seconds per wall second of the live workload (60: a 2 h job runs 2 min)")
      ->capture_default_str();
  up->add_option("--workload-seed", f.workload_seed, "seed of the live workload")->capture_default_str();
  up->add_option("--workload-load", f.workload_load, "offered GPU demand relative to capacity (1.3: queues form)")
      ->capture_default_str();
  up->callback([&] {
    f.up_ha_server_flags = drover::app::PassedServerFlags(up_server_options);  // for `up --ha`
    gw.listen_given = up->count("--gateway-listen") > 0;
    exit_code = RunServer(f, gw, true);
  });

  CLI::App* server = app.add_subcommand("server", "control plane: state, scheduler, APIs");
  add_server_flags(server);
  server->callback([&] {
    gw.listen_given = server->count("--gateway-listen") > 0;
    exit_code = RunServer(f, gw, false);
  });

  CLI::App* agent = app.add_subcommand("agent", "node agent: discovers devices and runs the node's jobs");
  agent->add_option("--server", f.server_addr, "server gRPC address; several, comma-separated, for a leader and its standbys (docs/ha.md)")->capture_default_str();
  agent->add_option("--data-dir", f.data_dir, "where job directories live")->capture_default_str();
  agent->add_option("--node-name", f.node_name, "node name (default: hostname)");
  agent->add_option("--devices", f.devices, "device backends: auto, nvml, rocm-smi, level-zero, opencl, simulated, none")
      ->capture_default_str();
  agent->add_option("--metrics-listen", f.agent_metrics_listen,
                    "serve the node's GPU metrics (DCGM names) on http://ADDR/metrics (default 127.0.0.1:9400; beyond "
                    "loopback it needs --metrics-token-file or --insecure-metrics)");
  agent->add_option("--metrics-token-file", f.metrics_token_file,
                    "file holding a scrape token: /metrics then needs \"Authorization: Bearer <token>\"");
  agent->add_flag("--insecure-metrics", f.insecure_metrics,
                  "serve metrics beyond loopback without a scrape token (anyone who reaches the port reads them)");
  agent->add_option("--ca-file", f.ca_file,
                    "the cluster CA (ca.crt from `drover certs init`): talk TLS, verify the server with it, and get a "
                    "node certificate at join (kept in <data-dir>)")
      ->envname("DROVER_CA_FILE");
  agent->add_option("--simulate-gpus", f.sim_gpus, "GPUs of the simulated backend")->check(CLI::Range(0, 64));
  agent->add_option("--simulate-model", f.sim_model, "GPU model of the simulated backend");
  agent->add_option("--log-level", f.log_level, "trace, debug, info, warn, error")->capture_default_str();
  agent->add_option("--label", f.labels, "node label, NAME=VALUE, repeatable (e.g. rack=r12)");
  agent->add_option("--config", "YAML file of this role's flags");
  agent->add_option("--join-token", f.join_token,
                    "one-time join token (`drover join-token`); the node credential it buys is kept in <data-dir>/node.token");
  agent->add_option("--token-file", f.token_file, "file holding this node's token (instead of a join)");
  add_telemetry_flags(agent);
  agent->add_option("--checkpoint-root", f.checkpoint_root,
                    "where jobs' DROVER_CHECKPOINT_DIR live: a shared filesystem in a cluster (default "
                    "<data-dir>/checkpoints)");
  agent->add_option("--state-dir", f.state_dir,
                    "where the jobs' small state files live while they run: best in memory, gone with a reboot as "
                    "the jobs are (default /run/drover/ID for root where /run is a tmpfs, else /dev/shm/drover-UID/ID)");
  agent->add_option("--checkpoint-retention", f.checkpoint_retention,
                    "how long a job's checkpoints stay after it ended for good")
      ->capture_default_str();
  agent->add_option("--gossip-listen", f.gossip_listen,
                    "join the nodes' gossip group on this UDP address, one its peers can reach (10.0.0.7:7946; "
                    "docs/failures.md)");
  agent->add_option("--service-ports", f.service_ports,
                    "the ports services' replicas get (DROVER_PORT), FIRST-LAST (default: any free port)");
  agent->add_option("--advertise-host", f.advertise_host,
                    "the host the gateway reaches this node's services at (default: the --gossip-listen host, else "
                    "127.0.0.1)");
  agent->add_option("--fault", f.faults, "inject a fault into a simulated GPU: NODE:GPU:FAULT[@DELAY] (repeatable)");
  agent->callback([&] { exit_code = RunAgentRole(f); });

  SimFlags sf;
  CLI::App* sim = app.add_subcommand("sim", "replay a cluster trace through the scheduler on a virtual clock");
  sim->add_option("--cluster", sf.cluster, "cluster: FORMAT:PATH (itp, pai2023, pai2020, philly-vc) or a YAML file")
      ->required();
  sim->add_option("--workload", sf.workload, "workload: FORMAT:PATH or a YAML file (kind: synthetic)")->required();
  sim->add_option("--mode", sf.mode, "time (jobs run and finish) or packing (FGD: jobs never finish)")
      ->capture_default_str();
  sim->add_option("--policy", sf.policy,
                  "scheduler policies, e.g. fair-share,spread or queue=las,backfill=off (default: the server's)");
  sim->add_option("--seed", sf.seed, "seed of every random choice (synthetic workloads, --inflate)")
      ->capture_default_str();
  sim->add_option("--inflate", sf.inflate, "extend the jobs to X x cluster GPU capacity, then shuffle (FGD: 1.3)")
      ->check(CLI::Range(0.0, 1000.0));
  sim->add_flag("--resume", sf.resume,
                "a preempted job keeps its progress (checkpoints) and runs only the rest; default: from scratch");
  sim->add_flag("--preemptible", sf.all_preemptible, "make every job preemptible (traces do not say)");
  sim->add_option("--stop-delay", sf.stop_delay, "how long a preempted job takes to stop")->capture_default_str();
  sim->add_option("--tick", sf.tick, "an extra scheduling pass this often while jobs wait (0: only after events)")
      ->capture_default_str();
  sim->add_option("--out", sf.out, "write summary.json, timeseries.csv, jobs.csv and report.html here");
  sim->add_option("--gnuplot", sf.gnuplot, "gnuplot to draw the report's charts (empty: none)")->capture_default_str();
  sim->add_flag("--check", sf.check, "check the scheduler's invariants after every pass (slow)");
  sim->callback([&] {
    sf.seed_given = sim->count("--seed") > 0;
    exit_code = RunSim(sf, args);
  });

  std::string certs_dir = ".drover";
  std::vector<std::string> certs_sans;
  CLI::App* certs = app.add_subcommand("certs", "the cluster CA and the server's certificate (TLS)");
  certs->require_subcommand(1);
  CLI::App* certs_init = certs->add_subcommand(
      "init", "make the cluster CA (once) and a server certificate in <data-dir>/tls; idempotent");
  certs_init->add_option("--data-dir", certs_dir, "the server's data directory")->capture_default_str();
  certs_init->add_option("--san", certs_sans,
                         "a DNS name or IP address agents and clients dial the server by (repeatable; 127.0.0.1, ::1, "
                         "localhost and the host name are always in)");
  certs_init->callback([&] { exit_code = RunCertsInit(certs_dir, certs_sans); });

  for (CLI::App* role : {up, server, agent}) drover::BindEnvironment(*role);
  drover::app::StandaloneGatewayFlags sgw;
  drover::app::AddStandaloneGatewayCommand(app, &sgw, &exit_code);
  drover::cli::AddClientCommands(app, &exit_code);

  // Roles wait for signals with sigwait: block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  bool is_role = argc > 1 && (std::string(argv[1]) == "up" || std::string(argv[1]) == "server" ||
                              std::string(argv[1]) == "agent" || std::string(argv[1]) == "gateway");
  if (is_role) {
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), std::prev(args.rend()));  // CLI11 takes them reversed, no argv[0]
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : drover::cli::kExitUsage;
  }
  return exit_code;
}
