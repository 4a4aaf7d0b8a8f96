#include "agent_role.h"

#include <fstream>
#include <utility>

#include "data_dir.h"
#include "drover/agent/agent.h"
#include "drover/agent/service.h"
#include "drover/common/config.h"
#include "drover/rpc/convert.h"
#include "drover/runtime/logging.h"
#include "ha.h"
#include "role_common.h"

namespace drover::app {

int RunAgent(const AgentFlags& f) {
  if (Status s = runtime::InitLogging(f.log_level); !s.ok()) return Fatal(s);
  // Its owner's only, from the first file on: job specs hold the jobs'
  // whole environment, the data directory the node's credentials
  // (data_dir.h). The jobs' own directories are theirs.
  UsePrivateUmask();
  if (Status s = SecureDataDir(f.data_dir, AgentJobOwned()); !s.ok()) return Fatal(s);
  if (!f.state_dir.empty()) {
    if (Status s = SecureDataDir(f.state_dir); !s.ok()) return Fatal(s);
  }
  const std::string node = f.node_name.empty() ? Hostname() : f.node_name;
  auto labels = ParseLabels(f.labels);
  if (!labels.ok()) return BadConfig(labels.status());
  auto backends = Backends(f.devices, {f.sim_gpus, f.sim_model, node});
  if (!backends.ok()) return Fatal(backends.status());
  auto telemetry = TelemetryFrom(f.telemetry);
  if (!telemetry.ok()) return BadConfig(telemetry.status());
  auto faults = ParseFaultFlags(f.faults);
  if (!faults.ok()) return BadConfig(faults.status());
  auto sandbox = SandboxPolicyFrom(f.sandbox);
  if (!sandbox.ok()) return BadConfig(sandbox.status());
  auto containers = ContainerOptionsFrom(f.containers);
  if (!containers.ok()) return BadConfig(containers.status());
  agent::AgentOptions o;
  o.telemetry = *telemetry;
  o.sandbox = *sandbox;
  o.containers = *containers;
  o.metrics_listen = f.metrics_listen.empty() ? "127.0.0.1:9400" : f.metrics_listen;
  o.metrics_insecure = f.insecure_metrics;
  if (!f.metrics_token_file.empty()) {
    std::ifstream in(f.metrics_token_file);
    if (!in || !std::getline(in, o.metrics_token) || o.metrics_token.size() < 16) {
      return BadConfig(InvalidArgument("--metrics-token-file '" + f.metrics_token_file +
                                       "' holds no token of at least 16 characters on its first line"));
    }
  }
  if (Status s = agent::CheckMetricsExposure(o); !s.ok()) return BadConfig(s);
  o.ca_file = f.ca_file;
  o.faults = FaultsFor(*faults, node);
  o.join_token = f.join_token;
  o.gossip_listen = f.gossip_listen;
  o.checkpoint_root = f.checkpoint_root;
  o.state_dir = f.state_dir;
  if (!f.service_ports.empty()) {
    auto range = agent::ParsePortRange(f.service_ports);
    if (!range.ok()) return BadConfig(InvalidArgument("--service-ports: " + range.status().message()));
    o.service_port_first = range->first;
    o.service_port_last = range->second;
  }
  if (!f.launch_ports.empty()) {
    auto range = agent::ParsePortRange(f.launch_ports);
    if (!range.ok()) return BadConfig(InvalidArgument("--launch-ports: " + range.status().message()));
    o.launch_port_first = range->first;
    o.launch_port_last = range->second;
  }
  // Its peers and its jobs' hosts files need an address, not a name.
  if (!f.advertise_host.empty() && !rpc::IsIpAddress(f.advertise_host)) {
    return BadConfig(InvalidArgument("--advertise-host '" + f.advertise_host +
                                     "' is not an IP address (the address this node's peers reach it at)"));
  }
  o.advertise_host = f.advertise_host;
  auto retention = ParseDurationMs(f.checkpoint_retention);
  if (!retention.ok()) return BadConfig(retention.status());
  o.checkpoint_retention = std::chrono::seconds(*retention / 1000);
  if (!f.token_file.empty()) {
    std::ifstream in(f.token_file);
    if (!in || !std::getline(in, o.token) || o.token.empty()) {
      return BadConfig(InvalidArgument("--token-file '" + f.token_file + "' holds no token"));
    }
  }
  auto started = StartAgent(std::move(o), node, f.server_addr, f.data_dir, std::move(*backends), std::move(*labels));
  if (!started.ok()) return Fatal(started.status());
  SignalWaiter signals;  // blocks until SIGINT or SIGTERM
  signals.Wait();
  (*started)->Stop();
  return 0;
}

CLI::App* AddAgentCommand(CLI::App& app, AgentFlags* f, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("agent", "node agent: discovers devices and runs the node's jobs");
  cmd->add_option("--server", f->server_addr,
                  "server gRPC address; several, comma-separated, for a leader and its standbys (docs/ha.md)")
      ->capture_default_str();
  cmd->add_option("--data-dir", f->data_dir, "where job directories live")->capture_default_str();
  cmd->add_option("--node-name", f->node_name, "node name (default: hostname)");
  cmd->add_option("--devices", f->devices, "device backends: auto, nvml, rocm-smi, level-zero, opencl, simulated, none")
      ->capture_default_str();
  cmd->add_option("--metrics-listen", f->metrics_listen,
                  "serve the node's GPU metrics (DCGM names) on http://ADDR/metrics (default 127.0.0.1:9400; beyond "
                  "loopback it needs --metrics-token-file or --insecure-metrics)");
  cmd->add_option("--metrics-token-file", f->metrics_token_file,
                  "file holding a scrape token: /metrics then needs \"Authorization: Bearer <token>\"");
  cmd->add_flag("--insecure-metrics", f->insecure_metrics,
                "serve metrics beyond loopback without a scrape token (anyone who reaches the port reads them)");
  cmd->add_option("--ca-file", f->ca_file,
                  "the cluster CA (ca.crt from `drover certs init`): talk TLS, verify the server with it, and get a "
                  "node certificate at join (kept in <data-dir>)")
      ->envname("DROVER_CA_FILE");
  cmd->add_option("--simulate-gpus", f->sim_gpus, "GPUs of the simulated backend")->check(CLI::Range(0, 64));
  cmd->add_option("--simulate-model", f->sim_model, "GPU model of the simulated backend");
  cmd->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")->capture_default_str();
  cmd->add_option("--label", f->labels, "node label, NAME=VALUE, repeatable (e.g. rack=r12)");
  cmd->add_option("--config", "YAML file of this role's flags");
  cmd->add_option(
      "--join-token", f->join_token,
      "one-time join token (`drover join-token`); the node credential it buys is kept in <data-dir>/node.token");
  cmd->add_option("--token-file", f->token_file, "file holding this node's token (instead of a join)");
  AddTelemetryFlags(cmd, &f->telemetry);
  AddSandboxFlags(cmd, &f->sandbox);
  AddContainerFlags(cmd, &f->containers);
  cmd->add_option("--checkpoint-root", f->checkpoint_root,
                  "where jobs' DROVER_CHECKPOINT_DIR live: a shared filesystem in a cluster (default "
                  "<data-dir>/checkpoints)");
  cmd->add_option("--state-dir", f->state_dir,
                  "where the jobs' small state files live while they run: best in memory, gone with a reboot as "
                  "the jobs are (default /run/drover/ID for root where /run is a tmpfs, else /dev/shm/drover-UID/ID)");
  cmd->add_option("--checkpoint-retention", f->checkpoint_retention,
                  "how long a job's checkpoints stay after it ended for good")
      ->capture_default_str();
  cmd->add_option("--gossip-listen", f->gossip_listen,
                  "join the nodes' gossip group on this UDP address, one its peers can reach (10.0.0.7:7946; "
                  "docs/failures.md)");
  cmd->add_option("--service-ports", f->service_ports,
                  "the ports services' replicas get (DROVER_PORT), FIRST-LAST (default: any free port)");
  cmd->add_option("--advertise-host", f->advertise_host,
                  "the IP address the gateway reaches this node's services at and its jobs' peers reach it at "
                  "(MASTER_ADDR, DROVER_HOSTS; default: the --gossip-listen host, else 127.0.0.1)");
  cmd->add_option("--launch-ports", f->launch_ports,
                  "the ports the server gives the masters of jobs bound here (DROVER_MASTER_PORT, MASTER_PORT; "
                  "docs/distributed.md), FIRST-LAST")
      ->default_str("29400-29499");
  cmd->add_option("--fault", f->faults, "inject a fault into a simulated GPU: NODE:GPU:FAULT[@DELAY] (repeatable)");
  cmd->callback([f, exit_code] { *exit_code = RunAgent(*f); });
  return cmd;
}

}  // namespace drover::app
