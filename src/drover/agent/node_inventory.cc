#include "drover/agent/node_inventory.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "drover/agent/device_filter.h"
#include "drover/agent/gpu_report.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/seccomp_profile.h"
#include "drover/common/hash.h"
#include "drover/rpc/gpu_metrics.h"

extern char** environ;

namespace drover::agent {

namespace fs = std::filesystem;

Status NodeInventory::Init(AgentOptions& opts, std::function<void()> health_changed) {
  node_name_ = opts.node_name;
  DiscoverDevices(opts.backends);
  host_ = opts.host_topology;
  if (opts.discover_host_topology) {
    auto host = DiscoverHostTopology();
    if (host.ok()) {
      host_ = std::move(*host);
    } else {
      spdlog::warn("node '{}': no host topology from hwloc ({}); linking GPUs by NUMA node", node_name_,
                   host.status().message());
    }
  }
  AssignNumaNodes(host_, &gpus_);
  links_ = LinkMatrix();
  backend_links_.clear();
  SetUpIsolation(opts);
  DROVER_RETURN_IF_ERROR(ValidateTelemetryOptions(opts.telemetry));
  loads_.assign(gpus_.size(), -1);
  std::vector<DeviceSlot> slots;
  for (size_t i = 0; i < gpus_.size(); ++i) slots.push_back({slot_backend_[i], vendor_index_[i]});
  TelemetryOptions telemetry = opts.telemetry;
  telemetry.node_name = opts.node_name;
  telemetry_ = std::make_unique<Telemetry>(std::move(opts.backends), std::move(slots), telemetry,
                                           std::move(health_changed), opts.loop);
  return Status::Ok();
}

void NodeInventory::DiscoverDevices(std::vector<std::unique_ptr<DeviceBackend>>& backends) {
  int index = 0;
  for (auto& backend : backends) {
    if (!backend->IsAvailable()) {
      spdlog::info("device backend '{}' is not available on this machine", backend->Name());
      continue;
    }
    // A library without its driver (librocm_smi64 on a machine with no
    // amdgpu, libnvidia-ml after a driver upgrade without a reboot) must not
    // keep the node from joining: it is reported and its devices left out.
    if (Status s = backend->Initialize(); !s.ok()) {
      spdlog::warn("device backend '{}' cannot start: {}; its devices are left out", backend->Name(), s.message());
      continue;
    }
    auto discovered = backend->Discover();
    if (!discovered.ok()) {
      spdlog::error("device backend '{}' cannot list its devices: {}; they are left out", backend->Name(),
                    discovered.status().message());
      continue;
    }
    std::vector<GpuDevice> found = std::move(*discovered);
    std::vector<DeviceLink> links = backend->Links();
    if (links.size() != found.size() * found.size()) links.clear();
    size_t first = gpus_.size();
    for (GpuDevice& d : found) {
      vendor_index_.push_back(d.index);
      slot_backend_.push_back(backend.get());
      d.index = index++;
      gpus_.push_back(std::move(d));
    }
    if (!links.empty()) backend_links_.push_back({first, found.size(), std::move(links)});
  }
}

// The node's link matrix: what each backend knows of its own devices
// (NVLink, xGMI), merged with hwloc's PCIe tree and NUMA nodes.
std::vector<int32_t> NodeInventory::LinkMatrix() const {
  size_t n = gpus_.size();
  std::vector<DeviceLink> vendor;
  if (!backend_links_.empty()) {
    vendor.assign(n * n, DeviceLink::kCrossSocket);
    for (const BackendLinks& b : backend_links_) {
      for (size_t i = 0; i < b.count; ++i) {
        for (size_t j = 0; j < b.count; ++j) vendor[(b.first + i) * n + b.first + j] = b.links[i * b.count + j];
      }
    }
  }
  std::vector<DeviceLink> merged = MergeLinks(host_, gpus_, vendor);
  std::vector<int32_t> out(n * n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      DeviceLink l = merged.size() == n * n                     ? merged[i * n + j]
                     : gpus_[i].numa_node == gpus_[j].numa_node ? DeviceLink::kSameNuma
                                                                : DeviceLink::kCrossSocket;
      out[i * n + j] = static_cast<int32_t>(l);
    }
  }
  return out;
}

// ---- workload isolation (docs/security.md) ----

// Finds what this machine allows, once, and says it.
void NodeInventory::SetUpIsolation(const AgentOptions& opts) {
  allowed_cpus_ = AllowedCpus();
  for (auto& [k, v] : EnvMap(environ)) {
    if (EnvAllowed(k, opts.job_env_allow)) agent_env_[k] = v;
  }
  std::string pinning_problem;
  if (allowed_cpus_.empty()) {
    pinning_problem = "the agent cannot read its own CPU affinity";
  } else if (host_.numa_cpus.empty()) {
    pinning_problem = "the host topology lists no CPUs for its NUMA nodes";
  }
  // The agent's group is named for its node and its data directory: two
  // agents of one node name (tests, `drover up` twice) never share one.
  std::error_code ec;
  std::string data = fs::absolute(opts.data_dir, ec).lexically_normal().string();
  std::string group = fmt::format("drover-{}-{:08x}", opts.node_name, Fnv1a64(data) & 0xffffffffu);
  isolation_ = ProbeNodeIsolation(group, pinning_problem);
  for (const GpuDevice& g : gpus_) {
    std::vector<DeviceRule> rules;
    std::vector<std::string> files;
    for (const std::string& file : GpuDeviceFiles(g.pci_bus_id)) {
      if (auto rule = DeviceRuleOf(file)) {
        rules.push_back(*rule);
        files.push_back(file);
      }
    }
    gpu_devices_.push_back(std::move(rules));
    gpu_files_.push_back(std::move(files));
  }
  BuildCdiSpec();
  if (!opts.containers.cdi_dir.empty() || !opts.data_dir.empty()) {
    const std::string dir = !opts.containers.cdi_dir.empty() ? opts.containers.cdi_dir : opts.data_dir + "/cdi";
    std::error_code cec;
    fs::create_directories(dir, cec);
    Status w = cec ? Unavailable(cec.message())
                   : WriteFileAtomic(dir + "/drover-" + opts.node_name + ".json", CdiSpecJson(cdi_), 0644,
                                     /*durable=*/false);
    if (!w.ok()) spdlog::warn("node '{}': cannot write its CDI spec in '{}': {}", opts.node_name, dir, w.message());
  }
  if (opts.sandbox.enabled) {
    std::string problem = ProbeSandbox();
    isolation_.sandbox = problem.empty();
    isolation_.message = isolation_.sandbox
                             ? isolation_.message + "; sandbox on (mount and PID namespaces, tenants' own users)"
                             : "sandbox off: " + problem + "; " + isolation_.message;
    // The filter needs no namespaces: it holds wherever the kernel has it.
    std::string filter_problem = !opts.sandbox.seccomp ? "--sandbox-seccomp=off"
                                 : ::geteuid() != 0    ? "the agent does not run as root"
                                                       : ProbeSeccomp();
    isolation_.seccomp = filter_problem.empty();
    isolation_.message = isolation_.seccomp ? isolation_.message + "; seccomp on"
                                            : "seccomp off: " + filter_problem + "; " + isolation_.message;
  } else {
    isolation_.message = "sandbox off: --sandbox=off; " + isolation_.message;
  }
  spdlog::info("node '{}': workload isolation: {}", opts.node_name, isolation_.message);
}

// The CPUs of the NUMA nodes of the workload's GPUs that the agent may
// use; empty (not pinned) when there are none.
std::vector<int> NodeInventory::CpusFor(const v1::Workload& w) const {
  if (!isolation_.cpu_pinning) return {};
  std::set<int> numa;
  for (int i : w.gpu_indices()) {
    if (i >= 0 && static_cast<size_t>(i) < gpus_.size()) numa.insert(gpus_[static_cast<size_t>(i)].numa_node);
  }
  std::set<int> cpus;
  for (int n : numa) {
    auto it = host_.numa_cpus.find(n);
    if (it == host_.numa_cpus.end()) continue;
    for (int c : it->second) {
      if (std::binary_search(allowed_cpus_.begin(), allowed_cpus_.end(), c)) cpus.insert(c);
    }
  }
  return {cpus.begin(), cpus.end()};
}

// The device files of the node's other GPUs (those of the workload's own
// GPUs stay open to it even when shared with another GPU).
std::vector<DeviceRule> NodeInventory::DenyFor(const v1::Workload& w) const {
  std::set<size_t> own;
  for (int i : w.gpu_indices()) {
    if (i >= 0 && static_cast<size_t>(i) < gpus_.size()) own.insert(static_cast<size_t>(i));
  }
  std::set<DeviceRule> deny;
  std::set<DeviceRule> keep;
  for (size_t i = 0; i < gpu_devices_.size(); ++i) {
    (own.contains(i) ? keep : deny).insert(gpu_devices_[i].begin(), gpu_devices_[i].end());
  }
  std::vector<DeviceRule> out;
  std::set_difference(deny.begin(), deny.end(), keep.begin(), keep.end(), std::back_inserter(out));
  return out;
}

// A container's devices (cdi.h): the CDI edits of its own GPUs.
std::vector<DeviceNode> NodeInventory::DeviceNodesFor(const v1::Workload& w) const {
  std::vector<std::string> names;
  for (int i : w.gpu_indices()) names.push_back(std::to_string(i));
  return CdiEditsFor(cdi_, names);
}

// The node's GPUs as CDI devices (cdi.h): each GPU's device files at their
// own paths and the vendors' shared control files it needs, or for a GPU
// without device files (simulated) a stand-in, /dev/drover-gpu<index>.
void NodeInventory::BuildCdiSpec() {
  cdi_.devices.clear();
  auto node = [](const std::string& host, const std::string& path) -> std::optional<CdiDeviceNode> {
    auto rule = DeviceRuleOf(host);
    if (!rule) return std::nullopt;
    return CdiDeviceNode{path, host, DeviceNode{path, rule->type, rule->major, rule->minor, 0666}};
  };
  for (size_t i = 0; i < gpus_.size(); ++i) {
    CdiDevice d;
    d.name = std::to_string(i);
    if (gpu_files_[i].empty()) {
      if (auto n = node("/dev/null", fmt::format("/dev/drover-gpu{}", i))) d.nodes.push_back(*n);
    }
    for (const std::string& f : gpu_files_[i]) {
      if (auto n = node(f, f)) d.nodes.push_back(*n);
    }
    std::vector<const char*> shared;
    if (gpus_[i].vendor == "nvidia") shared = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"};
    if (gpus_[i].vendor == "amd") shared = {"/dev/kfd"};
    for (const char* f : shared) {
      if (auto n = node(f, f)) d.nodes.push_back(*n);
    }
    cdi_.devices.push_back(std::move(d));
  }
}

JobIsolation NodeInventory::IsolationFor(const std::string& key, const v1::Workload& w) const {
  JobIsolation iso;
  iso.cpus = CpusFor(w);
  if (!isolation_.cgroup_parent.empty()) {
    JobCgroup g;
    g.parent = isolation_.cgroup_parent;
    g.dir = isolation_.cgroup_parent + "/" + key;
    g.controllers = isolation_.controllers;
    g.cpu_millis = w.cpu_millis();
    g.memory_bytes = w.memory_bytes();
    if (isolation_.device_limits) g.deny_devices = DenyFor(w);
    iso.cgroup = std::move(g);
  }
  return iso;
}

void NodeInventory::FillIsolation(v1::WorkloadIsolation* out) const {
  out->set_cpu_limits(isolation_.cpu_limits());
  out->set_memory_limits(isolation_.memory_limits());
  out->set_device_limits(isolation_.device_limits);
  out->set_cpu_pinning(isolation_.cpu_pinning);
  out->set_clean_environment(isolation_.clean_environment);
  out->set_sandbox(isolation_.sandbox);
  out->set_cgroup_parent(isolation_.cgroup_parent_path);
  out->set_message(isolation_.message);
}

void NodeInventory::AddGpuVisibility(const v1::Workload& w, std::map<std::string, std::string>* env) const {
  std::string ids;
  std::map<std::string, std::string> by_vendor;
  for (int i : w.gpu_indices()) {
    ids += (ids.empty() ? "" : ",") + std::to_string(i);
    if (i < 0 || static_cast<size_t>(i) >= gpus_.size()) continue;
    std::string& list = by_vendor[gpus_[static_cast<size_t>(i)].vendor];
    list += (list.empty() ? "" : ",") + std::to_string(vendor_index_[static_cast<size_t>(i)]);
  }
  (*env)["DROVER_GPU_IDS"] = ids;
  // Every vendor of the node's GPUs is named, so that a CPU-only job (or a
  // job on another vendor's GPUs) sees none of its GPUs: an empty list.
  for (const GpuDevice& g : gpus_) by_vendor.try_emplace(g.vendor);
  for (const auto& [vendor, list] : by_vendor) {
    std::string_view var = VisibilityVariable(vendor);
    if (!var.empty()) (*env)[std::string(var)] = list;
  }
}

// ---- what the node reports ----

void NodeInventory::FillRegister(v1::RegisterRequest* reg) {
  std::vector<GpuReading> readings = telemetry_->TakeReadings(/*summarise=*/false);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    *reg->add_gpus() = GpuView(gpus_[i], readings[i]);
  }
  for (int32_t l : links_) reg->add_links(l);
  v1::HostTopology* topo = reg->mutable_topology();
  topo->set_sockets(host_.sockets);
  topo->set_numa_nodes(host_.numa_nodes);
  topo->set_cores(host_.cores);
  for (const NicInfo& nic : host_.nics) {
    v1::Nic* out = topo->add_nics();
    out->set_name(nic.name);
    out->set_pci_bus_id(nic.pci_bus_id);
    out->set_numa_node(nic.numa_node);
  }
  for (const auto& [node, cpus] : host_.numa_cpus) (*topo->mutable_numa_cpus())[node] = FormatCpuList(cpus);
  FillIsolation(reg->mutable_isolation());
}

void NodeInventory::AddGpuReports(v1::Heartbeat* h, const std::map<int64_t, std::string>& jobs,
                                  const std::function<std::vector<ShimReport>(int gpu)>& shim_reports) {
  std::vector<GpuReading> readings = telemetry_->TakeReadings(/*summarise=*/true);
  for (size_t i = 0; i < readings.size(); ++i) {
    v1::GpuReport* r = h->add_gpus();
    r->set_index(static_cast<int32_t>(i));
    r->set_health(readings[i].healthy ? v1::GPU_HEALTH_HEALTHY : v1::GPU_HEALTH_UNHEALTHY);
    r->set_health_reason(readings[i].reason);
    FillTelemetry(readings[i], jobs, r->mutable_telemetry());
    AddGpuMemoryReports(shim_reports(static_cast<int>(i)), r->mutable_telemetry());  // job_env.h
  }
}

void NodeInventory::WriteMetrics(const std::vector<std::pair<std::string, std::string>>& holders,
                                 metrics::Exposition& out) {
  std::vector<GpuReading> readings = telemetry_->TakeReadings(/*summarise=*/false);
  std::map<int64_t, std::string> no_jobs;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    v1::Gpu g = GpuView(gpus_[i], readings[i]);
    g.set_job_id(holders[i].first);
    g.set_tenant(holders[i].second);
    FillTelemetry(readings[i], no_jobs, g.mutable_telemetry());
    rpc::WriteGpuMetrics(node_name_, g, out);
  }
}

// ---- faults and loads ----

// The server relays an administrator's fault injection. The answer only goes to the log: the server checked
// that the GPU is simulated before it relayed the call.
void NodeInventory::InjectFault(const v1::InjectFault& f) {
  auto fault = ParseFault(f.fault());
  Status s = fault.ok() ? telemetry_->InjectFault(f.gpu_index(), *fault) : fault.status();
  if (s.ok()) {
    spdlog::warn("node '{}': fault '{}' injected into gpu {}", node_name_, f.fault(), f.gpu_index());
  } else {
    spdlog::error("node '{}': cannot inject fault '{}' into gpu {}: {}", node_name_, f.fault(), f.gpu_index(),
                  s.message());
  }
}

void NodeInventory::InjectScheduled(const ScheduledFault& f) {
  Status s = telemetry_->InjectFault(f.gpu, f.fault);
  if (s.ok()) {
    spdlog::warn("node '{}': scheduled fault '{}' injected into gpu {}", node_name_, FaultKindName(f.fault.kind),
                 f.gpu);
  } else {
    spdlog::error("node '{}': scheduled fault for gpu {} failed: {}", node_name_, f.gpu, s.message());
  }
}

void NodeInventory::SetLoads(const std::vector<double>& load) {
  for (size_t i = 0; i < load.size() && i < loads_.size(); ++i) {
    double l = std::min(load[i], 1.0);
    if (loads_[i] == l) continue;
    loads_[i] = l;
    telemetry_->SetLoad(static_cast<int>(i), l);
  }
}

}  // namespace drover::agent
