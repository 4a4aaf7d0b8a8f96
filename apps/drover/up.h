#pragma once
// `drover up`: the whole cluster in one process. The control plane of
// server_role.h (one server here, or with --ha N an HA group of child
// processes), an agent for this machine, --simulate N simulated nodes and,
// with --workload mixed, a live synthetic workload (live_workload.h) and
// the gateway.
//
// Thread-safety: for the role's one thread.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "monitoring.h"
#include "node_setup.h"
#include "server_role.h"

namespace drover::app {

struct UpFlags {
  ServerFlags server;
  // This machine's node.
  std::string node_name;  // "": the host name
  std::vector<std::string> devices = {"auto"};
  std::string agent_metrics_listen;
  std::vector<std::string> labels;  // k=v
  TelemetryFlags telemetry;
  SandboxFlags sandbox;
  ContainerFlags containers;
  // Simulated nodes.
  int simulate = 0;
  int sim_gpus = 8;
  std::string sim_model = "H100 80GB";
  std::vector<std::string> faults;  // NODE:GPU:FAULT[@DELAY]
  // `--ha N`: an HA control plane of N etcd members and N servers.
  int ha = 0;
  int ha_etcd_port = 2379;
  std::vector<std::string> ha_server_flags;  // the server flags given, for its servers (set by the command)
  // `--workload mixed`: a live synthetic workload on the simulated nodes.
  std::string workload = "none";
  double workload_time_scale = 60;
  uint64_t workload_seed = 1;
  double workload_load = 1.3;
  // `--monitoring`: Prometheus, Alertmanager and the node exporter (monitoring.h).
  MonitoringFlags monitoring;
};

// `drover up`: until SIGINT/SIGTERM. Returns the exit code.
int RunUp(const UpFlags& f);
CLI::App* AddUpCommand(CLI::App& app, UpFlags* f, int* exit_code);

}  // namespace drover::app
