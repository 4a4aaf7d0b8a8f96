#pragma once
// The server as a role: `drover server`, and the control plane of `drover
// up` (up.h). Its flags, the server options they ask for, and the pieces
// one process of the control plane runs: a server (or, for `up --ha`, a
// group of them as child processes, ha.h) and the OpenAI-compatible
// gateway fed by it (gateway_role.h).
//
// Thread-safety: for the role's one thread.

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/common/config.h"
#include "drover/common/status.h"
#include "drover/server/server.h"
#include "gateway_role.h"
#include "ha.h"

namespace drover::app {

// The flags of `drover server`, also the server's flags of `drover up`.
struct ServerFlags {
  std::string data_dir = ".drover";
  std::string grpc_listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:8080";
  std::string log_level = "info";
  SchedulerFlags sched;
  HaFlags ha;  // --store, etcd, leader lease (docs/ha.md)
  // Security (docs/security.md).
  bool insecure = false;
  bool metrics_public = false;
  std::vector<std::string> http_host_names;
  std::string rate_limit_writes = "500:2000";  // per token, per second:burst
  std::string rate_limit_reads = "5000:20000";
  // TLS (docs/security.md, "Across machines").
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string tls_ca_key;
  // Leases and the archive (docs/failures.md).
  std::string heartbeat_interval = "250ms";
  std::string lease_ttl = "1500ms";
  std::string archive_after = "5m";
  std::string archive_retention = "0";
  // Deployments' replicas (docs/deployments.md).
  int service_priority = 100;
  bool services_preempt = true;
  // The largest image archive `drover images load` may upload (docs/containers.md).
  std::string max_image_archive = "64GiB";
  GatewayFlags gateway;
};
// Adds the server's flags to `cmd` (the gateway's first, --config last).
void AddServerFlags(CLI::App* cmd, ServerFlags* f);

// The server options the flags ask for, checked in order (the first bad
// one is the error: a usage error); `control` from MakeControlLoopOptions.
// It leaves `stop` and `on_leadership_lost` to the caller.
Result<server::ServerOptions> ServerOptionsFrom(const ServerFlags& f, server::ControlLoopOptions control);

// The control plane one process of `drover server` or `drover up` runs:
// one server here or (`up --ha N`) an HA group of child processes, and the
// gateway fed by it. Stop the gateway first, the server or group last.
struct ControlPlane {
  std::unique_ptr<server::Server> server;  // or
  std::unique_ptr<HaGroup> ha_group;
  auth::Authority* authority = nullptr;  // the server's or the group's
  std::string grpc_address;              // what agents and clients dial
  std::unique_ptr<GatewayRole> gateway;  // none when off or its default port is taken
  // A TLS server's CA file and its PEM ("" for plaintext): in-process agents
  // and the live workload verify the server with it like any client.
  std::string ca_file;
  std::string ca_pem;

  // Starts the one server of `so` here. kCancelled: stopped (a signal)
  // while standing by.
  Status StartServer(const server::ServerOptions& so);
  // Takes an HA group as the control plane.
  void Adopt(std::unique_ptr<HaGroup> group);
  // Starts the gateway (unless the flags turn it off) with a token of its
  // own, over the server's own channel or gRPC to the group, adds it to
  // <data-dir>/endpoints.json, then reads the server's CA. Returns the exit
  // code when the role cannot go on (BadConfig, Fatal).
  std::optional<int> StartGatewayAndReadCa(const ServerFlags& f);
  // A token for an in-process client (an agent: kNode bound to `node`).
  Result<std::string> MintInternal(const std::string& name, auth::Role role, const std::string& node);
  // Stops the server or the group (the gateway is stopped before: Stop it).
  void Stop();
};

// `drover server`: until SIGINT/SIGTERM. Returns the exit code.
int RunServer(const ServerFlags& f);
CLI::App* AddServerCommand(CLI::App& app, ServerFlags* f, int* exit_code);

}  // namespace drover::app
