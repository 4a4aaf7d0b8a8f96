#pragma once
// The agent as a role: `drover agent`, one per machine, joining a server
// (or a leader and its standbys) over gRPC. Its flags and its run; the
// agent itself is drover/agent (agent.h).
//
// Thread-safety: for the role's one thread.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "node_setup.h"

namespace drover::app {

struct AgentFlags {
  std::string server_addr = "127.0.0.1:7070";
  std::string data_dir = ".drover";
  std::string node_name;  // "": the host name
  std::vector<std::string> devices = {"auto"};
  std::string metrics_listen;      // "": 127.0.0.1:9400
  std::string metrics_token_file;  // scrape token for /metrics
  bool insecure_metrics = false;
  std::string ca_file;  // the cluster CA to verify the server with
  int sim_gpus = 8;     // the simulated backend's
  std::string sim_model = "H100 80GB";
  std::string log_level = "info";
  std::vector<std::string> labels;  // k=v
  std::string join_token;
  std::string token_file;
  TelemetryFlags telemetry;
  SandboxFlags sandbox;
  ContainerFlags containers;
  std::string checkpoint_root;
  std::string state_dir;
  std::string checkpoint_retention = "1h";
  std::string gossip_listen;
  std::string service_ports;        // "20000-29999" (empty: any free port)
  std::string advertise_host;       // the host its services are reached at
  std::string launch_ports;         // "29400-29499" (empty: that default)
  std::vector<std::string> faults;  // NODE:GPU:FAULT[@DELAY]
};

// `drover agent`: until SIGINT/SIGTERM. Returns the exit code.
int RunAgent(const AgentFlags& f);
CLI::App* AddAgentCommand(CLI::App& app, AgentFlags* f, int* exit_code);

}  // namespace drover::app
