#include "up.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "data_dir.h"
#include "drover/agent/agent.h"
#include "drover/agent/exit_watcher.h"
#include "drover/common/address.h"
#include "drover/common/files.h"
#include "drover/membership/udp_hub.h"
#include "drover/runtime/event_loop.h"
#include "drover/runtime/logging.h"
#include "drover/server/scheduler_options.h"
#include "ha.h"
#include "live_workload.h"
#include "role_common.h"

namespace drover::app {
namespace {

// Simulated node i (1-based) of `drover up --simulate N`: two nodes per leaf
// switch, four per rack, so gang placement by switch and rack has something
// to choose between.
std::map<std::string, std::string> SimulatedLabels(int i) {
  return {{"rack", "rack-" + std::to_string((i - 1) / 4 + 1)}, {"switch", "switch-" + std::to_string((i - 1) / 2 + 1)}};
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
    spdlog::warn("{} simulated nodes want about {} open files; the limit is {} (raise it with ulimit -n)", nodes, want,
                 r.rlim_cur);
  }
}

// `up --ha N`: etcd members and servers as child processes, an admin token
// for the CLI in <data-dir>/admin.token, and where to find the leader.
Result<std::unique_ptr<HaGroup>> StartHaGroup(const UpFlags& f) {
  const ServerFlags& s = f.server;
  auto port_of = [](const std::string& listen) { return std::atoi(listen.substr(listen.rfind(':') + 1).c_str()); };
  HaGroupOptions ho;
  ho.members = f.ha;
  ho.data_dir = s.data_dir;
  ho.etcd_port = f.ha_etcd_port;
  ho.grpc_port = port_of(s.grpc_listen);
  ho.http_port = port_of(s.http_listen);
  ho.log_level = s.log_level;
  ho.self_exe = SelfExe();
  ho.server_flags = f.ha_server_flags;
  DROVER_ASSIGN_OR_RETURN(auto group, HaGroup::Start(ho));
  DROVER_ASSIGN_OR_RETURN(std::string leader, group->WaitForLeader(std::chrono::seconds(60)));
  DROVER_RETURN_IF_ERROR(group->authority()->EnsureBootstrapAdmin(s.data_dir + "/admin.token").status());
  // The CLI run from here finds every server (and the token) in the data dir.
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(
      s.data_dir + "/endpoints.json",
      fmt::format("{{\"grpc\": \"{}\", \"http\": \"{}\"}}\n", group->servers(), group->http_servers()), 0600));
  spdlog::info("the leader is {}; elsewhere: export DROVER_ADDR={}", leader, group->servers());
  return group;
}

LiveWorkloadOptions LiveOptionsFrom(const UpFlags& f) {
  LiveWorkloadOptions live;
  live.kind = f.workload;
  live.nodes = f.simulate;
  live.gpus_per_node = f.sim_gpus;
  live.gpu_model = f.sim_model;
  live.time_scale = f.workload_time_scale;
  live.seed = f.workload_seed;
  live.target_load = f.workload_load;
  return live;
}

// The agents of `drover up`: this machine's node, then the simulated ones.
// Simulated nodes share a few loops, one per core (at most 4): a node is a
// set of tasks and timers on one of them, not threads of its own. Their
// gossip (loopback UDP, a socket each) is served by one thread, and the
// ends of their jobs' supervisors by one more.
//
// Owned by RunUp, on its thread; stopped (Stop) before the control plane.
// The Start methods return the exit code when `up` cannot go on.
class UpNodes {
 public:
  UpNodes(const UpFlags& f, ControlPlane* cp, agent::TelemetryOptions telemetry, agent::SandboxPolicy sandbox,
          std::vector<FaultFlag> faults)
      : f_(f), cp_(cp), telemetry_(std::move(telemetry)), sandbox_(std::move(sandbox)), faults_(std::move(faults)) {}

  std::optional<int> StartLocal(std::map<std::string, std::string> labels);
  std::optional<int> StartSimulated();
  void Stop() {
    for (auto& a : agents_) a->Stop();
  }

 private:
  std::optional<int> StartSimulatedNode(int i);
  // Waits until every loop ran what was posted to it so far.
  void CatchUp();

  const UpFlags& f_;
  ControlPlane* cp_;
  agent::TelemetryOptions telemetry_;
  agent::SandboxPolicy sandbox_;  // the server's data directory hidden too
  std::vector<FaultFlag> faults_;
  std::vector<std::unique_ptr<runtime::EventLoop>> loops_;
  std::unique_ptr<membership::UdpHub> gossip_;
  std::unique_ptr<agent::ExitWatcher> exits_;
  std::vector<std::unique_ptr<agent::Agent>> agents_;  // stopped before the loops go
};

std::optional<int> UpNodes::StartLocal(std::map<std::string, std::string> labels) {
  const std::string node = f_.node_name.empty() ? Hostname() : f_.node_name;
  auto backends = Backends(f_.devices, {f_.sim_gpus, f_.sim_model, node});
  if (!backends.ok()) return Fatal(backends.status());
  agent::AgentOptions lo;
  lo.fencing = cp_->ha_group != nullptr;  // in the server's process it cannot lose the server and live
  lo.telemetry = telemetry_;
  lo.sandbox = sandbox_;
  auto containers = ContainerOptionsFrom(f_.containers);
  if (!containers.ok()) return BadConfig(containers.status());
  lo.containers = *containers;
  lo.metrics_listen = f_.agent_metrics_listen;
  lo.metrics_insecure = f_.server.insecure;
  lo.ca_file = cp_->ca_file;
  lo.faults = FaultsFor(faults_, node);
  auto local_token = cp_->MintInternal(node, auth::Role::kNode, node);
  if (!local_token.ok()) return Fatal(local_token.status());
  lo.token = *local_token;
  // In the server's process: its channel needs no socket (the agents
  // stop before the server does).
  if (cp_->server) {
    lo.channel = [srv = cp_->server.get()](const std::string& token) { return srv->InProcessChannel(token); };
  }
  auto a = StartAgent(std::move(lo), node, cp_->grpc_address, f_.server.data_dir + "/agents/" + node,
                      std::move(*backends), std::move(labels));
  if (!a.ok()) return Fatal(a.status());
  agents_.push_back(std::move(*a));
  return std::nullopt;
}

std::optional<int> UpNodes::StartSimulated() {
  const int loops = f_.simulate == 0 ? 0 : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
  for (int i = 0; i < loops; ++i) {
    loops_.push_back(std::make_unique<runtime::EventLoop>("sim-nodes-" + std::to_string(i)));
    loops_.back()->Start();
  }
  if (f_.simulate > 0) {
    RaiseOpenFileLimit(f_.simulate);
    auto hub = membership::UdpHub::Start({});
    if (!hub.ok()) return Fatal(hub.status());
    gossip_ = std::move(*hub);
    auto watcher = agent::ExitWatcher::Start();
    if (!watcher.ok()) return Fatal(watcher.status());
    exits_ = std::move(*watcher);
  }
  for (int i = 1; i <= f_.simulate; ++i) {
    if (std::optional<int> rc = StartSimulatedNode(i)) return rc;
    // Starting a node is quicker than its first minutes on a loop (it
    // registers, reports, hears its peers): every 25 nodes, wait until the
    // loops caught up, so that their heartbeats never queue behind a
    // thousand start-ups (that cost nodes their leases at start).
    if (i % 25 == 0) CatchUp();
  }
  return std::nullopt;
}

std::optional<int> UpNodes::StartSimulatedNode(int i) {
  std::string name = "sim-" + std::to_string(i);
  auto b = agent::MakeSimulatedBackend({f_.sim_gpus, f_.sim_model, name});
  if (!b.ok()) return Fatal(b.status());
  std::vector<std::unique_ptr<agent::DeviceBackend>> bs;
  bs.push_back(std::move(*b));
  agent::AgentOptions o;
  o.fencing = false;
  o.telemetry = telemetry_;
  o.sandbox = sandbox_;
  // Their jobs are real processes, containers too (checked by StartLocal).
  if (auto containers = ContainerOptionsFrom(f_.containers); containers.ok()) o.containers = *containers;
  o.discover_host_topology = false;
  o.host_topology = agent::SimulatedHostTopology();
  o.loop = loops_[static_cast<size_t>(i - 1) % loops_.size()].get();
  o.gossip_listen = "127.0.0.1:0";
  o.gossip_hub = gossip_.get();
  o.exit_watcher = exits_.get();
  o.spare_supervisor = false;
  // One hub thread carries every simulated node's gossip: the period
  // grows with their number (1 ms per node, at least the default
  // 200 ms), which keeps it near 2 packets per millisecond in all
  // (docs/performance.md).
  o.gossip_period = std::max(std::chrono::milliseconds(200), std::chrono::milliseconds(f_.simulate));
  o.faults = FaultsFor(faults_, name);
  o.ca_file = cp_->ca_file;
  auto sim_token = cp_->MintInternal(name, auth::Role::kNode, name);
  if (!sim_token.ok()) return Fatal(sim_token.status());
  o.token = *sim_token;
  auto started = StartAgent(std::move(o), name, cp_->grpc_address, f_.server.data_dir + "/agents/" + name,
                            std::move(bs), SimulatedLabels(i));
  if (!started.ok()) return Fatal(started.status());
  agents_.push_back(std::move(*started));
  return std::nullopt;
}

void UpNodes::CatchUp() {
  for (auto& loop : loops_) {
    std::promise<void> caught_up;
    if (loop->Post([&] { caught_up.set_value(); })) caught_up.get_future().wait();
  }
}

// Starts the control plane `so` describes (with --ha, a group instead).
// Returns the exit code when `up` cannot go on.
std::optional<int> StartControlPlane(const UpFlags& f, const server::ServerOptions& so, ControlPlane* cp) {
  if (f.ha > 0) {
    auto group = StartHaGroup(f);
    if (!group.ok()) return Fatal(group.status());
    cp->Adopt(std::move(*group));
  } else if (Status s = cp->StartServer(so); s.code() == Code::kCancelled) {
    return 0;  // stopped while standing by
  } else if (!s.ok()) {
    return Fatal(s);
  }
  return cp->StartGatewayAndReadCa(f.server);
}

// `up --monitoring`: the stack scrapes this process's server, gateway and
// agent (monitoring.h).
Result<std::unique_ptr<MonitoringStack>> StartMonitoring(const UpFlags& f, const ControlPlane& cp) {
  if (!cp.server) return InvalidArgument("--monitoring does not work with --ha yet (docs/alerts.md)");
  MonitoringTargets t;
  t.server_http = cp.server->http_address();
  if (cp.gateway) t.gateway_http = fmt::format("{}:{}", HostOf(f.server.gateway.listen), cp.gateway->port());
  if (!f.agent_metrics_listen.empty() && f.agent_metrics_listen.ends_with(":0")) {
    spdlog::warn("--monitoring does not scrape the local agent: --agent-metrics-listen has no fixed port");
  } else {
    t.agent_metrics = f.agent_metrics_listen;
  }
  t.token_file = std::filesystem::absolute(f.server.data_dir + "/admin.token").string();
  t.ca_file = cp.ca_file.empty() ? "" : std::filesystem::absolute(cp.ca_file).string();
  return MonitoringStack::Start(f.monitoring, t, std::filesystem::absolute(f.server.data_dir + "/monitoring").string());
}

}  // namespace

int RunUp(const UpFlags& f) {
  if (Status s = runtime::InitLogging(f.server.log_level); !s.ok()) return Fatal(s);
  // Its owner's only, from the first file on, the agents' directories in
  // it too (data_dir.h).
  UsePrivateUmask();
  if (Status s = SecureDataDir(f.server.data_dir, ServerJobOwned()); !s.ok()) return Fatal(s);
  LiveWorkloadOptions live = LiveOptionsFrom(f);
  SchedulerFlags sched = f.server.sched;
  if (f.workload != "none") {
    if (Status s = ValidateLiveWorkload(live); !s.ok()) return BadConfig(s);
    ApplyLiveSchedulerDefaults(live, &sched);
  }
  auto control = server::MakeControlLoopOptions(sched);
  if (!control.ok()) return BadConfig(control.status());
  auto local_labels = ParseLabels(f.labels);
  if (!local_labels.ok()) return BadConfig(local_labels.status());
  auto so = ServerOptionsFrom(f.server, std::move(*control));
  if (!so.ok()) return BadConfig(so.status());
  // From here on a signal ends the process's wait, a standby's included.
  SignalWaiter signals;
  so->stop = signals.stopped();
  so->on_leadership_lost = [](const Status& why) { StartOver(why); };
  // The local agent's metrics beyond loopback: --insecure covers them too.
  agent::AgentOptions check;
  check.metrics_listen = f.agent_metrics_listen;
  check.metrics_insecure = f.server.insecure;
  if (Status s = agent::CheckMetricsExposure(check); !s.ok()) return BadConfig(s);
  auto sandbox = SandboxPolicyFrom(f.sandbox);
  if (!sandbox.ok()) return BadConfig(sandbox.status());
  // The server's data (its store, the admin token) is no job's business.
  sandbox->hide.push_back(std::filesystem::absolute(f.server.data_dir).lexically_normal().string());
  ControlPlane cp;
  if (std::optional<int> rc = StartControlPlane(f, *so, &cp)) return *rc;
  auto telemetry = TelemetryFrom(f.telemetry);
  if (!telemetry.ok()) return BadConfig(telemetry.status());
  auto faults = ParseFaultFlags(f.faults);
  if (!faults.ok()) return BadConfig(faults.status());
  UpNodes nodes(f, &cp, *telemetry, std::move(*sandbox), std::move(*faults));
  if (std::optional<int> rc = nodes.StartLocal(std::move(*local_labels))) return *rc;
  if (std::optional<int> rc = nodes.StartSimulated()) return *rc;
  spdlog::info("drover up: 1 local node and {} simulated nodes; try: DROVER_ADDR={} drover nodes", f.simulate,
               cp.grpc_address);
  // The live workload submits for several tenants: an admin token of its own.
  std::unique_ptr<LiveWorkload> workload;
  if (f.workload != "none") {
    live.grpc_address = cp.grpc_address;
    auto token = cp.MintInternal("live-workload", auth::Role::kAdmin, "");
    if (!token.ok()) return Fatal(token.status());
    live.token = *token;
    live.ca_pem = cp.ca_pem;
    auto w = LiveWorkload::Start(live);
    if (!w.ok()) return Fatal(w.status());
    workload = std::move(*w);
  }
  std::unique_ptr<MonitoringStack> monitoring;
  if (f.monitoring.enabled) {
    auto started = StartMonitoring(f, cp);
    if (!started.ok()) return Fatal(started.status());
    monitoring = std::move(*started);
  }
  signals.Wait();
  if (monitoring) monitoring->Stop();
  if (workload) workload->Stop();
  if (cp.gateway) cp.gateway->Stop();
  nodes.Stop();
  cp.Stop();
  return 0;
}

CLI::App* AddUpCommand(CLI::App& app, UpFlags* f, int* exit_code) {
  CLI::App* up = app.add_subcommand("up", "all-in-one: server and an agent for this machine, plus simulated nodes");
  const size_t before_server_flags = up->get_options().size();
  AddServerFlags(up, &f->server);
  std::vector<CLI::Option*> server_options = up->get_options();
  server_options.erase(server_options.begin(),
                       server_options.begin() + static_cast<std::ptrdiff_t>(before_server_flags));
  up->add_option("--node-name", f->node_name, "name of this machine's node (default: hostname)");
  up->add_option("--devices", f->devices,
                 "device backends for this machine: auto, nvml, rocm-smi, level-zero, opencl, simulated, none")
      ->capture_default_str();
  up->add_option("--agent-metrics-listen", f->agent_metrics_listen,
                 "serve this machine's GPU metrics (DCGM names) on http://ADDR/metrics (port 0 picks one)");
  up->add_option("--fault", f->faults,
                 "inject a fault into a simulated GPU: NODE:GPU:FAULT[@DELAY], e.g. sim-1:0:xid:79@30s (repeatable)");
  up->add_option("--simulate", f->simulate, "number of simulated nodes to add")->check(CLI::Range(0, 1024));
  up->add_option("--ha", f->ha,
                 "run an HA control plane here instead of one server: N etcd members and N servers (gRPC and HTTP "
                 "on the --grpc-listen and --listen ports and the next N-1), restarted when they die (docs/ha.md)")
      ->check(CLI::Range(0, 7));
  up->add_option("--ha-etcd-port", f->ha_etcd_port, "first etcd client port of --ha (peers and members follow)")
      ->capture_default_str();
  up->add_option("--simulate-gpus", f->sim_gpus, "GPUs per simulated node")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  up->add_option("--simulate-model", f->sim_model, "GPU model of simulated nodes")->capture_default_str();
  up->add_option("--label", f->labels,
                 "label of this machine's node, NAME=VALUE, repeatable (simulated nodes get rack and switch)");
  AddTelemetryFlags(up, &f->telemetry);
  AddSandboxFlags(up, &f->sandbox);
  AddContainerFlags(up, &f->containers);
  AddMonitoringFlags(up, &f->monitoring);
  up->add_option("--workload", f->workload,
                 "keep submitting a synthetic workload to the simulated nodes: mixed or none")
      ->capture_default_str();
  up->add_option("--workload-time-scale", f->workload_time_scale,
                 "simulated seconds per wall second of the live workload (60: a 2 h job runs 2 min)")
      ->capture_default_str();
  up->add_option("--workload-seed", f->workload_seed, "seed of the live workload")->capture_default_str();
  up->add_option("--workload-load", f->workload_load, "offered GPU demand relative to capacity (1.3: queues form)")
      ->capture_default_str();

  up->callback([up, f, exit_code, server_options] {
    f->ha_server_flags = PassedServerFlags(server_options);  // for `up --ha`
    f->server.gateway.listen_given = up->count("--gateway-listen") > 0;
    *exit_code = RunUp(*f);
  });
  return up;
}

}  // namespace drover::app
