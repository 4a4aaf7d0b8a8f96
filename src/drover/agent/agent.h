#pragma once
// Agent: one per machine (or per simulated node). Discovers its devices,
// registers with the server, keeps one Session stream to it, and reconciles
// the desired workloads the server sends with the jobs it runs.
//
// Level-triggered: on every (re)connect the agent reports the full set of
// workloads it knows; the server answers with the full desired set. Jobs run
// under per-job supervisors (see supervisor.h) and keep running while the
// agent or the server is down; a restarted agent adopts them from its data
// directory, so a job is never started twice and its exit is never lost.
//
// Threading: one owner loop (its own thread, or one shared with other
// agents) holds all workload state; the link to the server runs on gRPC's
// callback API and posts what it reads to that loop (connection.h).

#include <grpcpp/channel.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/agent/image_store.h"
#include "drover/agent/job_env.h"
#include "drover/agent/sandbox.h"
#include "drover/agent/telemetry.h"
#include "drover/common/status.h"

namespace drover::runtime {
class EventLoop;
}
namespace drover::membership {
class UdpHub;
}

namespace drover::agent {

class ExitWatcher;

// A fault the agent injects into one of its GPUs `after` it started (from
// the configuration; tests and demos of the health cycle).
struct ScheduledFault {
  int gpu = 0;
  Fault fault;
  std::chrono::milliseconds after{0};
};

struct AgentOptions {
  std::string node_name;
  std::string server_address = "127.0.0.1:7070";  // or several, comma-separated (docs/ha.md)
  // Set: the agent's channel to the server for a token (an agent in the
  // server's process: Server::InProcessChannel) instead of server_address.
  std::function<std::shared_ptr<grpc::Channel>(const std::string& token)> channel;
  std::string data_dir;  // jobs' output lives under <data_dir>/jobs/
  // Their state files (job_dir.h); empty: JobStateRoot(data_dir), in memory.
  std::string state_dir;
  std::string supervisor_exe;  // the drover binary (it has the `supervise` verb)
  std::vector<std::unique_ptr<DeviceBackend>> backends;
  // Node labels sent at registration (rack, switch, ...); validated by StartAgent.
  std::map<std::string, std::string> labels;
  // Sampling period, health checks.
  TelemetryOptions telemetry;
  // The machine's topology from hwloc; a simulated node passes its own
  // (SimulatedHostTopology) instead of the machine's.
  bool discover_host_topology = true;
  HostTopology host_topology;
  // Serves this node's GPU metrics (dcgm-exporter names) on
  // http://<metrics_listen>/metrics when not empty; port 0 picks one.
  // Beyond loopback it needs `metrics_token` (every request must carry
  // "Authorization: Bearer <token>") or `metrics_insecure`
  // (CheckMetricsExposure; docs/security.md).
  std::string metrics_listen;
  std::string metrics_token;
  bool metrics_insecure = false;
  std::vector<ScheduledFault> faults;
  // The node's credential (a node token, "drv_..."). When empty: the one
  // stored in <data_dir>/node.token by an earlier join, else a join with
  // `join_token` (one-time, from `drover join-token`), whose result is
  // stored there (mode 0600).
  std::string token;
  std::string join_token;
  // The cluster CA (PEM file) to verify the server with: the agent then
  // talks TLS, a join also asks for a node certificate (key in
  // <data_dir>/node.key, 0600; certificate in node.crt; the CA is kept in
  // ca.crt), and later connections present it. Empty: <data_dir>/ca.crt
  // when an earlier join kept one, else plaintext.
  std::string ca_file;
  // The variables of the agent's environment its jobs get (exact names, or
  // prefixes written "NCCL_*"); nothing else of it reaches a job
  // (docs/security.md, "Workload isolation").
  std::vector<std::string> job_env_allow = kDefaultEnvAllowList;
  // Self-fencing (docs/failures.md): the agent keeps <data_dir>/lease up to
  // date with the server's acknowledgements and every job's supervisor stops
  // its job once it runs out. Off only for agents in the server's own
  // process (`drover up`), which cannot lose the server without dying too.
  bool fencing = true;
  // The node's gossip endpoint (UDP, "10.0.0.7:7946", an address its peers
  // can reach; docs/failures.md): the agent joins the membership group, so
  // that a node whose own link to the server is down is kept alive by its
  // peers. Empty: no gossip. Port 0 picks a free port when the agent
  // starts (it registers the port it picked).
  std::string gossip_listen;
  // Serves the node's gossip socket on a thread shared with other nodes
  // (simulated nodes); null: a thread of its own.
  membership::UdpHub* gossip_hub = nullptr;
  // Tells the agent when a job's supervisor ends, shared with other agents
  // (simulated nodes); null: one of its own.
  ExitWatcher* exit_watcher = nullptr;
  // Keeps one spare supervisor waiting (SupervisorPool; only with the small
  // drover-supervise), so that a job's start costs a write, not an exec.
  // Simulated nodes share a machine by the hundred: a spare each is too many.
  bool spare_supervisor = true;
  // The gossip protocol period (one probe per period; the direct probe
  // waits half of it). 0: the protocol's default, 200 ms.
  std::chrono::milliseconds gossip_period{0};
  // Where each job's DROVER_CHECKPOINT_DIR (<root>/<job id>) lives: a
  // shared filesystem in a real cluster, so that a requeued job finds its
  // checkpoints on any node. Empty: <data_dir>/checkpoints. A job's
  // directory goes `checkpoint_retention` after the server says the job
  // ended for good.
  std::string checkpoint_root;
  std::chrono::seconds checkpoint_retention{3600};
  // How jobs are sandboxed (sandbox.h; docs/security.md, "The job sandbox").
  SandboxPolicy sandbox;
  // Container workloads (docs/containers.md): the runtime and the node's
  // image store.
  ContainerOptions containers;
  // The thread the agent works on (its own state, telemetry, its link to
  // the server), shared with other agents: `drover up --simulate N` runs
  // N simulated nodes on a few loops. Null: threads of its own. A shared
  // loop must run until the agent's Stop() returns.
  runtime::EventLoop* loop = nullptr;
  // Services (docs/deployments.md): the ports their replicas get
  // (DROVER_PORT), [service_port_first, service_port_last] (`drover agent
  // --service-ports 20000-29999`, ParsePortRange in service.h); 0, 0: any
  // free port the kernel picks.
  int service_port_first = 0;
  int service_port_last = 0;
  // The host in a replica's endpoint ("host:port"), an address clients and
  // gateways reach the node at. Empty: the host of gossip_listen when it
  // names one (not 0.0.0.0), else 127.0.0.1.
  std::string advertise_host;
  // The ports the server gives the masters of jobs bound here
  // (DROVER_MASTER_PORT, docs/distributed.md; `drover agent --launch-ports`),
  // reported at registration.
  int launch_port_first = 29400;
  int launch_port_last = 29499;
};

// The host of a simulated node: 2 sockets, 2 NUMA nodes, 64 cores, one NIC
// per NUMA node. Its jobs are real processes on this machine: each simulated
// NUMA node gets half of the CPUs this process may use (SplitCpus), so a
// job is pinned to the half of its GPUs' node.
HostTopology SimulatedHostTopology();

class Agent {
 public:
  virtual ~Agent() = default;
  // Stops talking to the server. Jobs keep running under their supervisors.
  virtual void Stop() = 0;
  virtual const std::vector<GpuDevice>& gpus() const = 0;
  // The node's GPU metrics in the Prometheus text format.
  virtual std::string RenderMetrics() = 0;
  // Where /metrics is served ("127.0.0.1:9400"); empty when not.
  virtual std::string metrics_address() const = 0;
};

// OK unless the options would serve metrics beyond loopback to anyone.
Status CheckMetricsExposure(const AgentOptions& o);

// Discovers devices (a backend that is not available, or whose library
// cannot start or list its devices, is skipped with an error in the log, so
// the node still joins), adopts the jobs in the data directory, and starts
// telemetry, health checks and (with metrics_listen) /metrics.
Result<std::unique_ptr<Agent>> StartAgent(AgentOptions options);

}  // namespace drover::agent
