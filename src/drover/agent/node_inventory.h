#pragma once
// NodeInventory: what the node is made of and what it allows. It owns the
// GPUs the device backends found (and, through Telemetry, the backends and
// their samples and health), the host topology and the link matrix the
// node registers with, the workload isolation this machine allows (cgroups,
// CPU pinning, device files, the allow-listed part of the agent's
// environment) and the load each GPU was last said to carry.
//
// It answers the questions the other parts ask about hardware: what to
// register, which CPUs and device files a workload gets, which visibility
// variables name its GPUs, what the GPU part of a heartbeat or a /metrics
// scrape says. It knows nothing of jobs beyond what it is handed.
//
// Owned by the agent (agent.cc). Not thread-safe, except that gpus() and
// telemetry() may be read from any thread once Init has returned (both
// are set by Init and not changed after; Telemetry is thread-safe).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drover/agent/agent.h"
#include "drover/agent/device_filter.h"
#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/agent/isolation.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/job_env.h"
#include "drover/agent/cdi.h"
#include "drover/agent/oci_bundle.h"
#include "drover/agent/telemetry.h"
#include "drover/common/metrics.h"
#include "drover/common/status.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

class NodeInventory {
 public:
  NodeInventory() = default;
  NodeInventory(const NodeInventory&) = delete;
  NodeInventory& operator=(const NodeInventory&) = delete;

  // Discovers the devices of `opts.backends` (moved into the telemetry; a
  // backend that cannot start or list its devices is left out, with an
  // error in the log), the host topology (hwloc, unless the options bring
  // one), the links and the isolation; makes the telemetry, not started.
  // `health_changed` runs on the telemetry's thread when a GPU's health
  // changes. Fails only on invalid telemetry options.
  Status Init(AgentOptions& opts, std::function<void()> health_changed);
  void Start() { telemetry_->Start(); }
  void Stop() {
    if (telemetry_) telemetry_->Stop();
  }

  const std::vector<GpuDevice>& gpus() const { return gpus_; }
  Telemetry& telemetry() { return *telemetry_; }
  const Telemetry& telemetry() const { return *telemetry_; }
  const std::map<std::string, std::string>& agent_env() const { return agent_env_; }

  // GPUs, links, topology, isolation, CPU and memory of the registration.
  void FillRegister(v1::RegisterRequest* reg);

  // The workload's CPUs (those of its GPUs' NUMA nodes the agent may use)
  // and cgroup (its limits, the other GPUs' device files denied).
  JobIsolation IsolationFor(const std::string& key, const v1::Workload& w) const;
  // The device nodes a container of `w` gets (oci_bundle.h).
  std::vector<DeviceNode> DeviceNodesFor(const v1::Workload& w) const;
  // Whether jobs get their namespaces here (sandbox.h).
  bool sandbox() const { return isolation_.sandbox; }
  // Whether jobs' system calls are filtered here (seccomp_profile.h).
  bool seccomp() const { return isolation_.seccomp; }
  // DROVER_GPU_IDS and each vendor's visibility variable for its GPUs.
  void AddGpuVisibility(const v1::Workload& w, std::map<std::string, std::string>* env) const;

  // The GPU reports of a heartbeat (`jobs`: process group -> job id;
  // `shim_reports(i)`: the memory-limit shim's reports on GPU i).
  void AddGpuReports(v1::Heartbeat* h, const std::map<int64_t, std::string>& jobs,
                     const std::function<std::vector<ShimReport>(int gpu)>& shim_reports);
  // Each GPU's metrics under dcgm-exporter's names; `holders[i]`: the job
  // ids and tenants on GPU i, comma-separated.
  void WriteMetrics(const std::vector<std::pair<std::string, std::string>>& holders, metrics::Exposition& out);

  // A fault the server relays (an administrator's), or one the options
  // schedule; the outcome goes to the log.
  void InjectFault(const v1::InjectFault& f);
  void InjectScheduled(const ScheduledFault& f);
  // How busy each GPU is (0..1, simulated backends): only changes are passed on.
  void SetLoads(const std::vector<double>& load);

 private:
  struct BackendLinks {
    size_t first = 0;  // node index of the backend's first device
    size_t count = 0;
    std::vector<DeviceLink> links;  // count x count
  };
  void DiscoverDevices(std::vector<std::unique_ptr<DeviceBackend>>& backends);
  std::vector<int32_t> LinkMatrix() const;
  void SetUpIsolation(const AgentOptions& opts);
  std::vector<int> CpusFor(const v1::Workload& w) const;
  std::vector<DeviceRule> DenyFor(const v1::Workload& w) const;
  void BuildCdiSpec();
  void FillIsolation(v1::WorkloadIsolation* out) const;

  std::string node_name_;
  std::vector<GpuDevice> gpus_;
  std::vector<int> vendor_index_;             // node index -> index within its backend
  std::vector<DeviceBackend*> slot_backend_;  // node index -> its backend
  std::vector<BackendLinks> backend_links_;
  HostTopology host_;
  std::vector<int32_t> links_;  // the node's link matrix, as registered
  std::unique_ptr<Telemetry> telemetry_;
  NodeIsolation isolation_;
  std::vector<int> allowed_cpus_;                     // the agent's own affinity, ascending
  std::map<std::string, std::string> agent_env_;      // the allow-listed part of the agent's environment
  std::vector<std::vector<DeviceRule>> gpu_devices_;  // per GPU: its device files
  std::vector<std::vector<std::string>> gpu_files_;   // ... and their paths
  CdiSpec cdi_;                                       // the GPUs as CDI devices (cdi.h)
  std::vector<double> loads_;                         // what SetLoad was last told, per GPU (-1: nothing yet)
};

}  // namespace drover::agent
