#include "drover/agent/agent.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>

#include "drover/agent/cgroup.h"
#include "drover/agent/connection.h"
#include "drover/agent/exit_watcher.h"
#include "drover/agent/device_filter.h"
#include "drover/agent/gpu_report.h"
#include "drover/agent/isolation.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/job_env.h"
#include "drover/agent/service.h"
#include "drover/agent/supervisor.h"
#include "drover/auth/token.h"
#include "drover/common/address.h"
#include "drover/common/files.h"
#include "drover/common/hash.h"
#include "drover/common/ids.h"
#include "drover/common/metrics.h"
#include "drover/common/version.h"
#include "drover/http/server.h"
#include "drover/membership/udp_node.h"
#include "drover/rpc/gpu_metrics.h"
#include "drover/rpc/convert.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

extern char** environ;

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

constexpr auto kTick = std::chrono::milliseconds(100);
// How long after a job's launch the next spare supervisor is started.
constexpr auto kSpareRefillDelay = std::chrono::milliseconds(50);
constexpr int kSpareDirs = 16;  // of each kind (SpareDirs)
// Until the server says otherwise (RegisterResponse).
constexpr auto kDefaultHeartbeat = std::chrono::milliseconds(2000);
// Heartbeats kept waiting for their acknowledgement.
constexpr size_t kMaxUnackedHeartbeats = 256;
// LeaveASilentServer: a server that acknowledged no heartbeat for this many
// heartbeats, and at least this long, is left for the next.
constexpr int kSilentHeartbeats = 4;
constexpr auto kSilentAtLeast = std::chrono::milliseconds(1500);
// Peers a lagging node sends its fresh beat to (AnnounceIfLagging).
constexpr size_t kAnnounceFanout = 3;

int64_t MonoNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
constexpr int64_t kLogChunk = 256 * 1024;
constexpr int64_t kLogPerTick = 4 * kLogChunk;
// Log output waiting for the network beyond which no more is read for now.
constexpr size_t kLogBacklog = 4 << 20;

// The agent's name for a workload: its job directory and report key (see
// v1::Workload.workload_id).
std::string WorkloadKey(const v1::Workload& w) { return w.workload_id().empty() ? w.job_id() : w.workload_id(); }
std::string StopKey(const v1::Stop& s) { return s.workload_id().empty() ? s.job_id() : s.workload_id(); }

// "j-000007.1" -> {"j-000007", 1}; an adopted directory of any other name
// reports as itself.
rpc::WorkloadRef RefOf(const std::string& key) {
  auto ref = rpc::ParseWorkloadId(key);
  if (ref.ok()) return *ref;
  return rpc::WorkloadRef{key, 0, false};
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the agent knows of one job on this node.
struct LocalJob {
  explicit LocalJob(JobDir d) : dir(std::move(d)) {}
  JobDir dir;
  std::string output_dir;  // its output.log (spec.json's output_dir)
  pid_t supervisor = 0;  // 0 when adopted (not our child) or unknown
  std::optional<StartedFile> started;
  std::optional<ExitFile> exited;
  std::optional<int64_t> sigterm_ns;
  std::optional<int64_t> checkpoint_ns;  // when the checkpoint signal went
  int grace_seconds = 10;
  int64_t log_sent = 0;
  v1::WorkloadState reported = v1::WORKLOAD_STATE_UNSPECIFIED;
  int64_t checkpoint_said_ns = 0;  // the checkpoint directory's mtime last told the server
  int64_t launch_ns = 0;
  std::optional<JobCgroup> cgroup;  // its group, removed (with what is left in it) when forgotten
  // Services only (service.h): the replica's state; the spec it runs under
  // (kept in service.json); a restart waiting for its back-off (nothing runs,
  // started.json and exit.json are gone) and the exit it follows; what the
  // server was last told of it; the first start of its process.
  std::unique_ptr<ServiceReplica> service;
  v1::ServiceSpec service_spec;
  bool restart_pending = false;
  std::optional<ExitFile> last_exit;
  ServiceView reported_service;
  int64_t first_start_ns = 0;
};

// "exit code 1", "killed by signal 9", "failed to start: ...".
std::string DescribeExit(const ExitFile& e) {
  if (e.failed_to_start) return "failed to start: " + e.message;
  if (e.signal != 0) return fmt::format("killed by signal {}", e.signal);
  if (e.exit_code < 0 && !e.message.empty()) return e.message;  // no exit status: the agent's word
  return fmt::format("exit code {}", e.exit_code);
}

// `s` cut to at most `max` bytes, at a UTF-8 character's start.
std::string Bounded(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

ServiceView ViewOf(const v1::WorkloadStatus& ws) {
  return {ws.port(), ws.endpoint(), ws.ready(), ws.restarts(), ws.not_ready_reason()};
}

class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentOptions o)
      : opts_(std::move(o)),
        own_loop_(opts_.loop == nullptr ? std::make_unique<runtime::EventLoop>("agent") : nullptr),
        loop_(opts_.loop == nullptr ? own_loop_.get() : opts_.loop) {}
  ~AgentImpl() override { Stop(); }

  Status Init() {
    int index = 0;
    for (auto& backend : opts_.backends) {
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
    host_ = opts_.host_topology;
    if (opts_.discover_host_topology) {
      auto host = DiscoverHostTopology();
      if (host.ok()) {
        host_ = std::move(*host);
      } else {
        spdlog::warn("node '{}': no host topology from hwloc ({}); linking GPUs by NUMA node", opts_.node_name,
                     host.status().message());
      }
    }
    AssignNumaNodes(host_, &gpus_);
    links_ = LinkMatrix();
    SetUpIsolation();
    DROVER_RETURN_IF_ERROR(ValidateTelemetryOptions(opts_.telemetry));
    if (!opts_.gossip_listen.empty()) {
      DROVER_ASSIGN_OR_RETURN(opts_.gossip_listen, membership::UdpNode::PickPort(opts_.gossip_listen));
    }
    loads_.assign(gpus_.size(), -1);
    advertise_host_ = opts_.advertise_host.empty() ? DefaultAdvertiseHost(opts_.gossip_listen) : opts_.advertise_host;
    ports_.SetRange(opts_.service_port_first, opts_.service_port_last);
    std::vector<DeviceSlot> slots;
    for (size_t i = 0; i < gpus_.size(); ++i) slots.push_back({slot_backend_[i], vendor_index_[i]});
    TelemetryOptions telemetry = opts_.telemetry;
    telemetry.node_name = opts_.node_name;
    telemetry_ = std::make_unique<Telemetry>(std::move(opts_.backends), std::move(slots), telemetry,
                                             [this] { loop_.Post([this] { SendHeartbeat(/*with_gpus=*/true); }); },
                                             opts_.loop);
    std::error_code ec;
    state_dir_ = opts_.state_dir.empty() ? JobStateRoot(opts_.data_dir) : opts_.state_dir;
    // An agent with a loop of its own is the only one of its process.
    if (opts_.state_dir.empty() && opts_.loop == nullptr) SweepJobStateRoots(state_dir_);
    jobs_dir_ = state_dir_ + "/jobs";
    outputs_dir_ = opts_.data_dir + "/jobs";
    for (const std::string& d : {jobs_dir_, outputs_dir_}) {
      fs::create_directories(d, ec);
      if (ec) return Unavailable(fmt::format("cannot create '{}': {}", d, ec.message()));
    }
    AdoptJobs();
    // A job's output directory (output.log, work/) and its checkpoint
    // directory, made ahead of its launch (job_dir.h, SpareDirs).
    // Made ahead by a thread of the lowest priority (SCHED_IDLE): it runs
    // when a core would idle, never before a launch. Agents that share a
    // loop (simulated nodes, a thousand in a process) keep none.
    const int spares = opts_.loop == nullptr ? kSpareDirs : 0;
    if (spares > 0) {
      janitor_ = std::make_unique<runtime::EventLoop>("agent-janitor");
      janitor_->Start();
      janitor_->Post([] {
        struct sched_param none {};
        (void)::sched_setscheduler(0, SCHED_IDLE, &none);  // this thread only
      });
    }
    output_spares_ = std::make_unique<SpareDirs>(outputs_dir_, ".spare-", spares, [](const std::string& d) {
      ::mkdir((d + "/work").c_str(), 0755);
      int fd = ::open((d + "/output.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
    });
    fs::create_directories(CheckpointRoot(), ec);
    checkpoint_spares_ = std::make_unique<SpareDirs>(CheckpointRoot(), ".spare-" + opts_.node_name + "-", spares);
    RefillDirs();
    if (!jobs_.empty()) spdlog::info("node '{}' adopted {} job directories", opts_.node_name, jobs_.size());
    watcher_ = opts_.exit_watcher;
    if (watcher_ == nullptr) {
      auto w = ExitWatcher::Start();
      if (w.ok()) {
        own_watcher_ = std::move(*w);
        watcher_ = own_watcher_.get();
      } else {
        spdlog::warn("node '{}' notices job ends by looking every {} ms: {}", opts_.node_name, kTick.count(),
                     w.status().message());
      }
    }
    for (auto& [id, job] : jobs_) {
      pid_t sup = job.dir.ReadSupervisorPid().value_or(0);
      if (sup > 0 && SupervisorAlive(sup, job.dir.path())) WatchSupervisor(id, sup);
    }
    if (opts_.spare_supervisor) {
      supervisors_ = std::make_unique<SupervisorPool>(opts_.supervisor_exe);
      supervisors_->Refill();  // the first job finds its supervisor waiting
    }
    // Made before anything of the agent runs on the loop (which reads it),
    // started last.
    ConnectionEvents events;
    events.make_register = [this] { return MakeRegister(); };
    events.connected = [this](const v1::RegisterResponse& lease, int64_t contact) { OnConnected(lease, contact); };
    events.message = [this](v1::ServerMessage m) { OnMessage(std::move(m)); };
    auto connection = ServerConnection::Create(
        {opts_.node_name, opts_.server_address, opts_.data_dir, opts_.token, opts_.join_token, opts_.ca_file,
         opts_.channel},
        opts_.loop == nullptr ? own_loop_.get() : opts_.loop, std::move(events));
    if (!connection.ok()) return connection.status();
    connection_ = std::move(*connection);
    if (own_loop_) own_loop_->Start();
    telemetry_->Start();
    DROVER_RETURN_IF_ERROR(StartMetrics());
    for (const ScheduledFault& f : opts_.faults) {
      loop_.PostAfter(f.after, [this, f] {
        Status s = telemetry_->InjectFault(f.gpu, f.fault);
        if (s.ok()) {
          spdlog::warn("node '{}': scheduled fault '{}' injected into gpu {}", opts_.node_name,
                       FaultKindName(f.fault.kind), f.gpu);
        } else {
          spdlog::error("node '{}': scheduled fault for gpu {} failed: {}", opts_.node_name, f.gpu, s.message());
        }
      });
    }
    loop_.Post([this] { Tick(); });
    loop_.Post([this] { CheckpointSweepTimer(); });
    connection_->Begin();
    return Status::Ok();
  }

  // The jobs an earlier agent of this data directory left: their state
  // directories (the agent restarted, the machine did not), job directories
  // of the layout before the state moved to memory (state and output in
  // one), and outputs whose state went with a reboot: those jobs ended with
  // it, and are reported so.
  void AdoptJobs() {
    auto adopt = [this](const JobDir& dir) {
      auto spec = dir.ReadSpec();
      if (!spec.ok()) {
        spdlog::warn("ignoring job directory '{}': {}", dir.path(), spec.status().message());
        return;
      }
      LocalJob job(dir);
      job.output_dir = dir.OutputDir(*spec);
      job.grace_seconds = spec->grace_seconds;
      job.sigterm_ns = dir.ReadStop();
      if (auto iso = dir.ReadIsolation(); iso.ok()) job.cgroup = iso->cgroup;
      AdoptService(&job);
      jobs_.emplace(spec->job_id, std::move(job));
    };
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(jobs_dir_, ec)) {
      if (entry.is_directory()) adopt(JobDir(entry.path().string()));
    }
    if (outputs_dir_ == jobs_dir_) return;
    for (const auto& entry : fs::directory_iterator(outputs_dir_, ec)) {
      const std::string key = entry.path().filename().string();
      if (!entry.is_directory() || jobs_.contains(key)) continue;
      JobDir old(entry.path().string());
      if (fs::exists(old.File("spec.json"), ec)) {
        adopt(old);
        continue;
      }
      if (!rpc::ParseWorkloadId(key).ok()) continue;
      JobDir dir(jobs_dir_ + "/" + key);
      fs::create_directories(dir.path(), ec);
      LocalJob job(dir);
      job.output_dir = entry.path().string();
      job.exited = ExitFile{-1, 0, NowNanos(), "its state was lost: the machine restarted while it ran", false};
      dir.WriteExit(*job.exited).IgnoreError("best effort: job.exited is what gets reported");
      jobs_.emplace(key, std::move(job));
    }
  }

  void Stop() override {
    if (stopping_.exchange(true)) return;
    if (connection_) connection_->Stop();
    if (metrics_http_) metrics_http_->Stop();
    loop_.Close();
    if (prober_) prober_->Stop();  // a probe under way ends within its timeout; its result is dropped
    // Nothing of the agent runs on the loop any more: its watches are ours
    // to end, and no callback of theirs runs after.
    if (watcher_ != nullptr) {
      for (const auto& [id, handle] : exit_watches_) watcher_->Cancel(handle);
      exit_watches_.clear();
    }
    supervisors_.reset();  // the unused spare reads the end of its input and exits
    if (own_loop_) own_loop_->Stop();
    if (janitor_) janitor_->Stop();  // what it was given is done first
    // Nothing left to adopt: nothing left in memory (the data directory may
    // go next, and nobody else would remove this).
    if (!jobs_dir_.empty() && ::rmdir(jobs_dir_.c_str()) == 0 && opts_.state_dir.empty()) {
      ::unlink((state_dir_ + "/owner").c_str());
      ::rmdir(state_dir_.c_str());
    }
    if (gossip_) gossip_->Stop();
    if (telemetry_) telemetry_->Stop();
  }

  const std::vector<GpuDevice>& gpus() const override { return gpus_; }

  std::string metrics_address() const override { return metrics_address_; }

  // The GPUs as v1::Gpu with their latest telemetry and the jobs holding
  // them, under dcgm-exporter's names (rpc::WriteGpuMetrics).
  std::string RenderMetrics() override { return metrics_.Render(); }

  Status StartMetrics() {
    metrics_.AddCollector([this](metrics::Exposition& out) {
      std::vector<std::pair<std::string, std::string>> holders(gpus_.size());  // job ids, tenants
      if (!RunOnLoop([&] {
            for (const auto& [id, w] : desired_) {
              for (int i : w.gpu_indices()) {
                if (i < 0 || static_cast<size_t>(i) >= holders.size()) continue;
                auto& [jobs, tenants] = holders[static_cast<size_t>(i)];
                jobs += (jobs.empty() ? "" : ",") + w.job_id();
                tenants += (tenants.empty() ? "" : ",") + w.tenant();
              }
            }
          })) {
        return;
      }
      std::vector<GpuReading> readings = telemetry_->TakeReadings(/*summarise=*/false);
      std::map<int64_t, std::string> no_jobs;
      for (size_t i = 0; i < gpus_.size(); ++i) {
        v1::Gpu g = GpuView(gpus_[i], readings[i]);
        g.set_job_id(holders[i].first);
        g.set_tenant(holders[i].second);
        FillTelemetry(readings[i], no_jobs, g.mutable_telemetry());
        rpc::WriteGpuMetrics(opts_.node_name, g, out);
      }
    });
    metrics_.AddCollector([this](metrics::Exposition& out) {
      // Read under the node's own lock; the pointer is set once, on the loop.
      membership::UdpNode* g = nullptr;
      if (!RunOnLoop([&] { g = gossip_.get(); }) || g == nullptr) return;
      membership::UdpNodeStats st = g->Stats();
      auto dropped = out.Counter("drover_gossip_dropped_packets_total",
                                 "Gossip packets dropped, by reason (forged, replayed, malformed, ...).");
      for (size_t i = 0; i < membership::kDropReasonCount; ++i) {
        dropped.Add({{"reason", membership::DropReasonName(static_cast<membership::DropReason>(i))}},
                    static_cast<double>(st.group.dropped[i]));
      }
      out.Counter("drover_gossip_packets_total", "Valid gossip packets, by direction.")
          .Add({{"direction", "received"}}, static_cast<double>(st.group.packets_received))
          .Add({{"direction", "sent"}}, static_cast<double>(st.group.packets_sent));
      out.Counter("drover_gossip_suspicions_total", "Peers this node suspected.")
          .Add({}, static_cast<double>(st.group.suspicions));
      size_t alive = 0;
      for (const membership::MemberView& m : g->Members()) alive += m.state == membership::MemberState::kAlive;
      out.Gauge("drover_gossip_members_alive", "Peers this node sees alive.").Add({}, static_cast<double>(alive));
    });
    if (opts_.metrics_listen.empty()) return Status::Ok();
    auto server = http::StartServer(opts_.metrics_listen, [this](const http::Request& req) {
      if (!opts_.metrics_token.empty()) {
        auto it = req.headers.find("authorization");
        std::string_view given = it == req.headers.end() ? "" : std::string_view(it->second);
        if (!given.starts_with("Bearer ") ||
            !auth::ConstantTimeEqual(given.substr(7), opts_.metrics_token)) {
          http::Response refused = http::ErrorResponse(Unauthenticated(
              "this endpoint needs the node's scrape token: \"Authorization: Bearer <token>\" (--metrics-token-file)"));
          refused.headers["WWW-Authenticate"] = "Bearer";
          return refused;
        }
      }
      if (req.path == "/metrics") {
        return http::Response{200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics(), {}, {}};
      }
      return SamplesResponse(*telemetry_, gpus_.size(), req);
    });
    if (!server.ok()) {
      // Metrics are not worth keeping a node out of service for (another
      // exporter may hold the port): said loudly, and the node runs on.
      spdlog::error("node '{}' cannot serve metrics on '{}': {}", opts_.node_name, opts_.metrics_listen,
                    server.status().message());
      return Status::Ok();
    }
    metrics_http_ = std::move(*server);
    std::string host = opts_.metrics_listen.substr(0, opts_.metrics_listen.rfind(':'));
    metrics_address_ = fmt::format("{}:{}", host, metrics_http_->port());
    spdlog::info("node '{}' serves GPU metrics on http://{}/metrics", opts_.node_name, metrics_address_);
    return Status::Ok();
  }

 private:
  struct BackendLinks {
    size_t first = 0;  // node index of the backend's first device
    size_t count = 0;
    std::vector<DeviceLink> links;  // count x count
  };

  // The node's link matrix: what each backend knows of its own devices
  // (NVLink, xGMI), merged with hwloc's PCIe tree and NUMA nodes.
  std::vector<int32_t> LinkMatrix() const {
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
        DeviceLink l = merged.size() == n * n ? merged[i * n + j]
                       : gpus_[i].numa_node == gpus_[j].numa_node ? DeviceLink::kSameNuma
                                                                  : DeviceLink::kCrossSocket;
        out[i * n + j] = static_cast<int32_t>(l);
      }
    }
    return out;
  }

  // ---- workload isolation (docs/security.md) ----

  // Finds what this machine allows, once, and says it.
  void SetUpIsolation() {
    allowed_cpus_ = AllowedCpus();
    for (auto& [k, v] : EnvMap(environ)) {
      if (EnvAllowed(k, opts_.job_env_allow)) agent_env_[k] = v;
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
    std::string data = fs::absolute(opts_.data_dir, ec).lexically_normal().string();
    std::string group = fmt::format("drover-{}-{:08x}", opts_.node_name, Fnv1a64(data) & 0xffffffffu);
    isolation_ = ProbeNodeIsolation(group, pinning_problem);
    for (const GpuDevice& g : gpus_) {
      std::vector<DeviceRule> rules;
      for (const std::string& file : GpuDeviceFiles(g.pci_bus_id)) {
        if (auto rule = DeviceRuleOf(file)) rules.push_back(*rule);
      }
      gpu_devices_.push_back(std::move(rules));
    }
    spdlog::info("node '{}': workload isolation: {}", opts_.node_name, isolation_.message);
  }

  // The CPUs of the NUMA nodes of the workload's GPUs that the agent may
  // use; empty (not pinned) when there are none.
  std::vector<int> CpusFor(const v1::Workload& w) const {
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
  std::vector<DeviceRule> DenyFor(const v1::Workload& w) const {
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

  JobIsolation IsolationFor(const std::string& key, const v1::Workload& w) const {
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

  void FillIsolation(v1::WorkloadIsolation* out) const {
    out->set_cpu_limits(isolation_.cpu_limits());
    out->set_memory_limits(isolation_.memory_limits());
    out->set_device_limits(isolation_.device_limits);
    out->set_cpu_pinning(isolation_.cpu_pinning);
    out->set_clean_environment(isolation_.clean_environment);
    out->set_cgroup_parent(isolation_.cgroup_parent_path);
    out->set_message(isolation_.message);
  }

  // ---- the server (connection.h) ----

  // What the node registers with, on every (re)connect.
  v1::RegisterRequest MakeRegister() {
    v1::RegisterRequest reg;
    reg.set_node_name(opts_.node_name);
    std::vector<GpuReading> readings = telemetry_->TakeReadings(/*summarise=*/false);
    for (size_t i = 0; i < gpus_.size(); ++i) {
      *reg.add_gpus() = GpuView(gpus_[i], readings[i]);
    }
    for (int32_t l : links_) reg.add_links(l);
    v1::HostTopology* topo = reg.mutable_topology();
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
    FillIsolation(reg.mutable_isolation());
    reg.mutable_labels()->insert(opts_.labels.begin(), opts_.labels.end());
    reg.set_cpu_millis(sysconf(_SC_NPROCESSORS_ONLN) * 1000);
    reg.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
    reg.set_agent_version(kVersion);
    reg.set_gossip_address(opts_.gossip_listen);
    return reg;
  }

  void OnMessage(v1::ServerMessage m) {
    if (m.has_desired()) OnDesired(m.desired());
    if (m.has_inject_fault()) InjectFault(m.inject_fault());
    if (m.has_heartbeat_ack()) OnHeartbeatAck(m.heartbeat_ack());
  }

  // Runs `fn` on the owner loop and waits for it; false when the agent
  // stopped first.
  bool RunOnLoop(std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> answer = done->get_future();
    if (!loop_.Post([fn = std::move(fn), done] {
          fn();
          done->set_value();
        })) {
      return false;
    }
    try {
      answer.get();
      return true;
    } catch (const std::future_error&) {
      return false;  // dropped: the agent stopped
    }
  }

  // ---- owner loop ----

  void OnConnected(const v1::RegisterResponse& lease, int64_t contact) {
    have_desired_ = false;
    if (lease.heartbeat_interval_ms() > 0) heartbeat_every_ = std::chrono::milliseconds(lease.heartbeat_interval_ms());
    fence_after_ns_ = int64_t{lease.fence_after_ms()} * 1'000'000;
    fence_grace_ms_ = lease.fence_grace_ms();
    unacked_.clear();
    NoteContact(contact);
    StartGossip(lease);
    SetPeers(lease.peers());
    SendHeartbeat(/*with_gpus=*/true);
    HeartbeatTimer(++heartbeat_generation_);
    spdlog::info("node '{}' connected to {}", opts_.node_name, opts_.server_address);
    // Everything is news to a new session: resend every log from the start
    // (the server writes by offset, so repeats are harmless) and report all.
    for (auto& [id, job] : jobs_) {
      job.log_sent = 0;
      job.reported = v1::WORKLOAD_STATE_UNSPECIFIED;
      job.reported_service = {};
      job.checkpoint_said_ns = 0;
      Look(id, &job);
      ShipLog(id, &job, /*all=*/true);
    }
    v1::AgentMessage m;
    m.mutable_status()->set_full(true);
    for (auto& [id, job] : jobs_) {
      *m.mutable_status()->add_workloads() = StatusOf(id, job);
      MarkReported(*m.status().workloads().rbegin(), &job);
    }
    Send(m);
  }


  // The server acknowledged a heartbeat: it renewed the lease no earlier
  // than when that heartbeat was sent.
  void OnHeartbeatAck(const v1::HeartbeatAck& ack) {
    if (gossip_) {
      if (ack.peers_changed()) {
        SetPeers(ack.peers());
        peers_version_ = ack.peers_version();
      }
      // Tell each peer whose beat this heartbeat carried that its lease holds.
      for (const v1::PeerBeat& p : ack.renewed()) {
        gossip_->SendLeaseAck(p.node_name(), p.beat()).IgnoreError("a datagram: the next heartbeat renews it");
      }
    }
    while (!unacked_.empty() && unacked_.front().first < ack.seq()) unacked_.pop_front();
    if (unacked_.empty() || unacked_.front().first != ack.seq()) return;  // not one of this session's
    NoteContact(unacked_.front().second);
    unacked_.pop_front();
  }

  // Moves the fence out to `contact` + the fence interval and tells the
  // supervisors (the lease file). Only forward: contact is monotonic.
  void NoteContact(int64_t contact) {
    if (contact <= contact_ns_) return;
    contact_ns_ = contact;
    if (!opts_.fencing || fence_after_ns_ <= 0) return;
    NodeLease lease{contact_ns_ + fence_after_ns_, fence_grace_ms_};
    if (Status s = WriteNodeLease(LeaseFile(), lease); !s.ok()) {
      spdlog::error("node '{}' cannot renew its lease file: {}; its jobs fence themselves", opts_.node_name,
                    s.message());
    }
  }

  std::string LeaseFile() const { return opts_.data_dir + "/lease"; }

  // ---- gossip (docs/failures.md) ----

  // Joins the group once the server has said its key (the first session).
  void StartGossip(const v1::RegisterResponse& r) {
    if (opts_.gossip_listen.empty() || gossip_ || r.gossip_key().empty()) return;
    membership::UdpNodeOptions o;
    o.name = opts_.node_name;
    o.bind_address = opts_.gossip_listen;
    o.hub = opts_.gossip_hub;
    if (opts_.gossip_period.count() > 0) {
      o.config.protocol_period_ns = std::chrono::nanoseconds(opts_.gossip_period).count();
      o.config.probe_timeout_ns = o.config.protocol_period_ns / 2;
    }
    o.config.cluster_id = r.gossip_cluster();
    o.config.key = r.gossip_key();
    // A peer relayed our beat to the server and it renewed our lease: that
    // is contact as of when the beat began.
    o.on_lease_ack = [this](int64_t, int64_t started_ns) { loop_.Post([this, started_ns] { NoteContact(started_ns); }); };
    auto node = membership::UdpNode::Start(std::move(o));
    if (!node.ok()) {
      spdlog::error("node '{}' cannot join the gossip group on {}: {}", opts_.node_name, opts_.gossip_listen,
                    node.status().message());
      return;
    }
    gossip_ = std::move(*node);
    spdlog::info("node '{}' gossips on {}", opts_.node_name, gossip_->address());
  }

  void SetPeers(const google::protobuf::RepeatedPtrField<v1::Peer>& peers) {
    if (!gossip_) return;
    std::map<std::string, std::string> m;
    for (const v1::Peer& p : peers) m[p.node_name()] = p.gossip_address();
    if (Status s = gossip_->SetPeers(m); !s.ok()) {
      spdlog::warn("node '{}': gossip peers refused: {}", opts_.node_name, s.message());
    }
  }

  // Heartbeats go out on their own timer, at the server's interval (which
  // the first session may change), whatever else the loop is doing.
  // Each session starts a timer of its own (`generation`); an older one
  // stops at its next turn.
  void HeartbeatTimer(uint64_t generation) {
    if (stopping_ || generation != heartbeat_generation_) return;
    auto since = std::chrono::steady_clock::now() - last_heartbeat_;
    if (since >= heartbeat_every_) {
      LeaveASilentServer();
      AnnounceIfLagging();
      SendHeartbeat();
      since = std::chrono::steady_clock::duration::zero();
    }
    loop_.PostAfter(heartbeat_every_ - since, [this, generation] { HeartbeatTimer(generation); });
  }

  // A session whose oldest unacknowledged heartbeat is older than
  // kSilentHeartbeats heartbeats (at least kSilentAtLeast) is left for the
  // next server: a leader that was paused, cut off from etcd or deposed
  // keeps the connection open but answers nothing (docs/ha.md). With one
  // server, MoveOn does nothing.
  void LeaveASilentServer() {
    if (!Connected() || unacked_.empty()) return;
    const int64_t silent_ns = MonoNanos() - unacked_.front().second;
    const int64_t limit_ns = std::max(std::chrono::nanoseconds(heartbeat_every_ * kSilentHeartbeats),
                                      std::chrono::nanoseconds(kSilentAtLeast)).count();
    if (silent_ns < limit_ns) return;
    spdlog::warn("node '{}': no heartbeat acknowledged for {} ms; trying the next server", opts_.node_name,
                 silent_ns / 1'000'000);
    connection_->MoveOn();
  }

  // With no acknowledged contact for 1.5 heartbeats (the server's own
  // threshold for relaying), the node sends a fresh beat to a few peers
  // every heartbeat: the LeaseAck they relay then dates from moments ago,
  // which keeps the fence well ahead when only the server link is down.
  void AnnounceIfLagging() {
    if (!gossip_ || fence_after_ns_ <= 0) return;
    int64_t lag_ns = MonoNanos() - contact_ns_;
    if (lag_ns > std::chrono::nanoseconds(heartbeat_every_).count() * 3 / 2) gossip_->Announce(kAnnounceFanout);
  }

  bool Connected() const { return connection_ != nullptr && connection_->connected(); }
  bool Send(const v1::AgentMessage& m) { return connection_ != nullptr && connection_->Send(m); }

  std::string CheckpointRoot() const {
    return opts_.checkpoint_root.empty() ? opts_.data_dir + "/checkpoints" : opts_.checkpoint_root;
  }
  // The job id was validated (rpc::ParseWorkloadId) before it names a path.
  std::string CheckpointDir(const std::string& job_id) const { return CheckpointRoot() + "/" + job_id; }

  // The server says these jobs ended for good: their checkpoint directories
  // are marked, and go once the retention has passed (SweepCheckpoints).
  // The server repeats its last kEndedJobsPerNode ids in every desired set:
  // only ids not seen before cost a look at the disk, and the sweep of
  // every directory is the minute timer's (both ran per job start, and
  // with thousands of ended jobs they were most of the agent's time).
  void NoteEndedJobs(const google::protobuf::RepeatedPtrField<std::string>& ended) {
    for (const std::string& id : ended) {
      if (!ParseJobId(id).ok() || !ended_seen_.insert(id).second) continue;
      ended_order_.push_back(id);
      if (ended_order_.size() > kEndedRemembered) {
        ended_seen_.erase(ended_order_.front());
        ended_order_.pop_front();
      }
      OffLoop([dir = CheckpointDir(id), keep = opts_.checkpoint_retention.count() > 0] {
        std::error_code ec;
        if (!fs::is_directory(dir, ec) || fs::exists(dir + "/.drover-ended", ec)) return;
        if (!keep) {
          fs::remove_all(dir, ec);
          return;
        }
        std::ofstream(dir + "/.drover-ended") << NowNanos() << "\n";
      });
    }
  }

  void CheckpointSweepTimer() {
    if (stopping_) return;
    SweepCheckpoints();
    // Supervisors whose end nobody watched (no pidfd here): not left as zombies.
    for (pid_t pid : std::vector<pid_t>(unreaped_.begin(), unreaped_.end())) Reap(pid);
    loop_.PostAfter(std::chrono::minutes(1), [this] { CheckpointSweepTimer(); });
  }

  void SweepCheckpoints() {
    std::error_code ec;
    auto now = fs::file_time_type::clock::now();
    for (const auto& entry : fs::directory_iterator(CheckpointRoot(), ec)) {
      fs::path marker = entry.path() / ".drover-ended";
      std::error_code mec;
      auto when = fs::last_write_time(marker, mec);
      if (mec || now - when < opts_.checkpoint_retention) continue;
      fs::remove_all(entry.path(), mec);
      if (!mec) spdlog::info("node '{}' removed the checkpoints of ended job '{}'", opts_.node_name,
                             entry.path().filename().string());
    }
  }

  void OnDesired(const v1::DesiredWorkloads& d) {
    NoteEndedJobs(d.ended_jobs());
    desired_.clear();
    for (const v1::Workload& w : d.workloads()) desired_[WorkloadKey(w)] = w;
    stops_.clear();
    for (const v1::Stop& stop : d.stops()) stops_[StopKey(stop)] = stop;
    have_desired_ = true;
    for (const auto& [id, w] : desired_) {
      if (!jobs_.contains(id)) Launch(w);
    }
    Reconcile();
  }

  // The job's whole environment: allow-listed variables of the agent's,
  // the job's own, then Drover's (job_env.h).
  std::map<std::string, std::string> EnvFor(const v1::Workload& w, const std::vector<int>& cpus) const {
    std::map<std::string, std::string> env;
    if (!cpus.empty()) env["DROVER_CPUS"] = FormatCpuList(cpus);
    env["DROVER_JOB_ID"] = w.job_id();
    env["DROVER_REPLICA"] = std::to_string(w.replica());
    env["DROVER_REPLICAS"] = std::to_string(std::max(w.replicas(), 1));
    env["DROVER_NODE"] = opts_.node_name;
    if (!w.array_id().empty()) {
      env["DROVER_ARRAY_ID"] = w.array_id();
      env["DROVER_ARRAY_INDEX"] = std::to_string(w.array_index());
    }
    env["DROVER_CHECKPOINT_DIR"] = CheckpointDir(w.job_id());
    std::string ids;
    std::map<std::string, std::string> by_vendor;
    for (int i : w.gpu_indices()) {
      ids += (ids.empty() ? "" : ",") + std::to_string(i);
      if (i < 0 || static_cast<size_t>(i) >= gpus_.size()) continue;
      std::string& list = by_vendor[gpus_[static_cast<size_t>(i)].vendor];
      list += (list.empty() ? "" : ",") + std::to_string(vendor_index_[static_cast<size_t>(i)]);
    }
    env["DROVER_GPU_IDS"] = ids;
    for (const auto& [vendor, list] : by_vendor) {
      std::string_view var = VisibilityVariable(vendor);
      if (!var.empty()) env[std::string(var)] = list;
    }
    return BuildJobEnv(agent_env_, opts_.job_env_allow, {w.env().begin(), w.env().end()}, env);
  }

  void Launch(const v1::Workload& w) {
    const std::string key = WorkloadKey(w);
    auto ref = rpc::ParseWorkloadId(key);
    if (!ref.ok() || ref->job_id != w.job_id() || (ref->gang && ref->replica != w.replica())) {
      spdlog::error("server sent a workload with a malformed id '{}' (job '{}')", key, w.job_id());
      return;
    }
    JobDir dir(jobs_dir_ + "/" + key);
    LocalJob job(dir);
    job.output_dir = outputs_dir_ + "/" + key;
    job.grace_seconds = w.termination_grace_seconds() > 0 ? w.termination_grace_seconds() : 10;
    job.launch_ns = NowNanos();
    // The state first: an output directory without it is a job whose state
    // a reboot took (AdoptJobs).
    std::error_code ec;
    fs::create_directories(dir.path(), ec);
    if (!ec) ec = output_spares_->Take(job.output_dir);
    JobIsolation iso = IsolationFor(key, w);
    // Kept across attempts: made once, left as it is by a new attempt.
    std::error_code cec = checkpoint_spares_->Take(CheckpointDir(w.job_id()));
    RefillSoon();
    if (cec) {
      spdlog::warn("node '{}': cannot create the checkpoint directory of '{}': {}", opts_.node_name, w.job_id(),
                   cec.message());
    }
    job.cgroup = iso.cgroup;
    std::map<std::string, std::string> env = EnvFor(w, iso.cpus);
    std::unique_ptr<ServiceReplica> service;
    Status svc = w.has_service() ? PrepareService(w, dir, &env, &service) : Status::Ok();
    // A GPU memory limit: the shim preloaded (job_env.h); the job fails to start without it.
    Status limit = AddGpuMemoryLimit(w.gpu_memory_limit_bytes(), dir.path() + "/gpu-memory", &env);
    JobSpecFile spec{key, {w.command().begin(), w.command().end()}, std::move(env), w.working_dir(),
                     job.grace_seconds, opts_.fencing ? LeaseFile() : "", job.output_dir};
    Status s = ec ? Unavailable(fmt::format("cannot create the directories of '{}': {}", key, ec.message()))
                  : !limit.ok() ? limit : !svc.ok() ? svc : dir.WriteSpec(spec);
    if (s.ok()) s = dir.WriteIsolation(iso);
    if (s.ok()) s = SpawnSupervisorFor(key, &job);
    if (service && s.ok()) {
      job.service = std::move(service);
      job.service_spec = w.service();
    } else if (service) {
      ports_.Release(service->port());
    }
    if (!s.ok()) {
      spdlog::error("node '{}' cannot start job '{}': {}", opts_.node_name, key, s.message());
      job.exited = ExitFile{127, 0, NowNanos(), s.message(), true};
      dir.WriteExit(*job.exited).IgnoreError("best effort: job.exited is what gets reported");
    } else {
      spdlog::info("node '{}' started job '{}' on GPUs [{}]", opts_.node_name, key,
                   fmt::join(w.gpu_indices(), ","));
    }
    jobs_.emplace(key, std::move(job));
  }

  // The job's supervisor: the pool's, or one spawned for it alone.
  Result<SupervisorPool::Launched> StartSupervisor(const std::string& dir) {
    if (supervisors_) return supervisors_->Launch(dir);
    DROVER_ASSIGN_OR_RETURN(pid_t pid, SpawnSupervisor(opts_.supervisor_exe, dir));
    return SupervisorPool::Launched{pid, -1};
  }

  // The job's supervisor started and watched (its first start, or a
  // service's restart).
  Status SpawnSupervisorFor(const std::string& key, LocalJob* job) {
    DROVER_ASSIGN_OR_RETURN(SupervisorPool::Launched launched, StartSupervisor(job->dir.path()));
    job->supervisor = launched.pid;
    unreaped_.insert(launched.pid);
    if (launched.done_fd >= 0) {
      WatchPooled(key, launched.pid, launched.done_fd);
    } else {
      WatchSupervisor(key, launched.pid);
    }
    return job->dir.WriteSupervisorPid(launched.pid);
  }

  // ---- services (service.h, docs/deployments.md) ----

  // A service's settings checked, its port given, its variables set and its
  // record written; an error means the workload must not start.
  Status PrepareService(const v1::Workload& w, const JobDir& dir, std::map<std::string, std::string>* env,
                        std::unique_ptr<ServiceReplica>* out) {
    auto settings = ServiceSettingsOf(w.service());
    if (!settings.ok()) return InvalidArgument("invalid " + settings.status().message());
    DROVER_ASSIGN_OR_RETURN(int port, ports_.Allocate());
    (*env)["DROVER_PORT"] = std::to_string(port);
    if (!settings->model.empty()) {
      (*env)["DROVER_MODEL"] = settings->model;
      (*env)["DROVER_SERVED_MODEL_NAME"] = settings->model;
    }
    if (Status s = WriteServiceFile(dir.path(), {port, 0, w.service()}); !s.ok()) {
      ports_.Release(port);
      return s;
    }
    *out = std::make_unique<ServiceReplica>(std::move(*settings), port, EndpointOf(advertise_host_, port));
    return Status::Ok();
  }

  // A service an earlier agent started: its port, restarts and settings
  // from service.json.
  void AdoptService(LocalJob* job) {
    auto file = ReadServiceFile(job->dir.path());
    if (!file.ok()) {
      spdlog::warn("node '{}': job directory '{}' is adopted as a plain job: {}", opts_.node_name,
                   job->dir.path(), file.status().message());
      return;
    }
    if (!file->has_value()) return;
    ServiceFile& f = **file;
    auto settings = ServiceSettingsOf(f.spec);
    if (!settings.ok()) {
      spdlog::warn("node '{}': job directory '{}' is adopted as a plain job: {}", opts_.node_name,
                   job->dir.path(), settings.status().message());
      return;
    }
    ports_.Hold(f.port);
    job->service = std::make_unique<ServiceReplica>(std::move(*settings), f.port, EndpointOf(advertise_host_, f.port),
                                                    f.restarts);
    job->service_spec = std::move(f.spec);
    // It was waiting for a restart (HoldForRestart): it ended as it said, and
    // is restarted after its back-off.
    std::error_code ec;
    const std::string waiting = job->dir.File("restart.json");
    if (fs::exists(waiting, ec) && !fs::exists(job->dir.File("started.json"), ec)) {
      (void)::rename(waiting.c_str(), job->dir.File("exit.json").c_str());
    }
  }

  // Refresh, and a service's part of it: its probes begin once its process
  // has started, and its exit is held for a restart.
  void Look(const std::string& id, LocalJob* job) {
    if (job->restart_pending) return;  // nothing runs, and its files are gone
    Refresh(job);
    if (!job->service) return;
    if (job->exited) {
      HoldForRestart(id, job);
    } else if (job->started && !job->service->running()) {
      ServiceStarted(id, job);
    }
  }

  void ServiceStarted(const std::string& id, LocalJob* job) {
    job->service->Started(std::chrono::steady_clock::now());
    if (job->first_start_ns == 0) job->first_start_ns = job->started->start_unix_nanos;
    const uint64_t gen = job->service->generation();
    const ServiceSettings& s = job->service->settings();
    loop_.PostAfter(s.readiness.initial_delay, [this, id, gen] { ProbeTimer(id, gen, /*liveness=*/false); });
    if (s.liveness.Checks()) {
      loop_.PostAfter(s.liveness.initial_delay, [this, id, gen] { ProbeTimer(id, gen, /*liveness=*/true); });
    }
    (void)ReportIfChanged(id, job);
  }

  // A service whose process ended is started again after its back-off,
  // still running as far as the server is concerned, unless the server
  // stopped it (or no longer wants it) or the node fenced it.
  void HoldForRestart(const std::string& id, LocalJob* job) {
    const ExitFile e = *job->exited;
    if (e.fenced || job->sigterm_ns || stopping_ || (have_desired_ && !desired_.contains(id))) return;
    const std::string how = DescribeExit(e);
    const std::chrono::milliseconds delay = job->service->Exited(how, std::chrono::steady_clock::now());
    job->last_exit = e;
    job->exited.reset();
    job->started.reset();
    job->restart_pending = true;
    // The exit waits in restart.json: an agent that restarts meanwhile finds
    // it (AdoptService) instead of a job whose supervisor vanished.
    (void)::rename(job->dir.File("exit.json").c_str(), job->dir.File("restart.json").c_str());
    for (const char* f : {"started.json", "supervisor.pid"}) ::unlink(job->dir.File(f).c_str());
    AppendToLog(*job, fmt::format("drover: the service's process ended ({}); restarting it in {}\n", how,
                                  FormatDelay(delay)));
    spdlog::info("node '{}': service '{}' ended ({}); restarting it in {}", opts_.node_name, id, how,
                 FormatDelay(delay));
    const uint64_t gen = job->service->generation();
    loop_.PostAfter(delay, [this, id, gen] { Relaunch(id, gen); });
    (void)ReportIfChanged(id, job);
  }

  void Relaunch(const std::string& id, uint64_t gen) {
    auto it = jobs_.find(id);
    if (stopping_ || it == jobs_.end()) return;
    LocalJob& job = it->second;
    if (!job.restart_pending || !job.service || job.service->generation() != gen) return;
    if (have_desired_ && !desired_.contains(id)) {
      EndPendingRestart(&job);
      (void)ReportIfChanged(id, &job);
      return;
    }
    job.restart_pending = false;
    job.service->Restarting();
    Status s = WriteServiceFile(job.dir.path(), {job.service->port(), job.service->restarts(), job.service_spec});
    ::unlink(job.dir.File("restart.json").c_str());
    if (s.ok()) s = SpawnSupervisorFor(id, &job);
    if (!s.ok()) {
      // Tried again after the next back-off.
      spdlog::error("node '{}' cannot restart service '{}': {}", opts_.node_name, id, s.message());
      job.exited = ExitFile{127, 0, NowNanos(), "the agent cannot restart it: " + s.message(), true};
      HoldForRestart(id, &job);
      return;
    }
    spdlog::info("node '{}' restarted service '{}' (restart {})", opts_.node_name, id, job.service->restarts());
    (void)ReportIfChanged(id, &job);
  }

  // The server stopped a service while it waited for its restart: it ends
  // with the exit it had.
  void EndPendingRestart(LocalJob* job) {
    job->restart_pending = false;
    ExitFile e = job->last_exit.value_or(ExitFile{});
    e.message = "stopped while waiting for its restart after " + DescribeExit(e);
    e.failed_to_start = false;
    job->exited = e;
    job->dir.WriteExit(e).IgnoreError("best effort: job.exited is what gets reported");
  }

  // The service job `id` while its process of generation `gen` runs.
  LocalJob* ServiceJob(const std::string& id, uint64_t gen) {
    auto it = jobs_.find(id);
    if (stopping_ || it == jobs_.end()) return nullptr;
    LocalJob& job = it->second;
    if (!job.service || job.service->generation() != gen || !job.started || job.exited || job.restart_pending) {
      return nullptr;
    }
    return &job;
  }

  // Time for a probe of the process of generation `gen`: it runs on the
  // probe thread; its result comes back to the loop.
  void ProbeTimer(const std::string& id, uint64_t gen, bool liveness) {
    LocalJob* job = ServiceJob(id, gen);
    if (job == nullptr) return;
    const ProbeSettings& p = liveness ? job->service->settings().liveness : job->service->settings().readiness;
    if (!p.Checks()) {
      OnProbeResult(id, gen, liveness, Status::Ok());
      return;
    }
    if (!prober_) {
      prober_ = std::make_unique<runtime::EventLoop>("agent-probes");
      prober_->Start();
    }
    prober_->Post([this, p, port = job->service->port(), id, gen, liveness] {
      if (stopping_) return;
      Status r = CheckProbe(p, port);
      loop_.Post([this, id, gen, liveness, r] { OnProbeResult(id, gen, liveness, r); });
    });
  }

  void OnProbeResult(const std::string& id, uint64_t gen, bool liveness, const Status& r) {
    LocalJob* job = ServiceJob(id, gen);
    if (job == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    if (liveness && job->service->Liveness(r, now)) {
      spdlog::warn("node '{}' kills service '{}': {}", opts_.node_name, id, job->service->not_ready_reason());
      ::kill(-job->started->pid, SIGKILL);
      (void)ReportIfChanged(id, job);
      return;  // its exit restarts it
    }
    if (!liveness) job->service->Readiness(r, now);
    (void)ReportIfChanged(id, job);
    const ProbeSettings& p = liveness ? job->service->settings().liveness : job->service->settings().readiness;
    loop_.PostAfter(p.period, [this, id, gen, liveness] { ProbeTimer(id, gen, liveness); });
  }

  // A line of the agent's own in the job's log (between two runs of a
  // service's process, so nothing else writes then).
  static void AppendToLog(const LocalJob& job, const std::string& line) {
    int fd = ::open((job.output_dir + "/output.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
  }

  // The next spare supervisor and directories, once the job just launched
  // has had its start (supervisor.h: spawned at once, it took a core from
  // that job). Jobs launched meanwhile find no spare and make their own.
  void RefillSoon() {
    if (refill_pending_) return;
    refill_pending_ = true;
    loop_.PostAfter(kSpareRefillDelay, [this] {
      refill_pending_ = false;
      if (stopping_) return;
      if (supervisors_) supervisors_->Refill();
    });
    RefillDirs();
  }

  // Disk work the launch path need not wait for: on the janitor when there
  // is one (it runs when a core is free; ext4 takes its time), else here.
  void OffLoop(std::function<void()> work) {
    if (janitor_) {
      janitor_->Post(std::move(work));
    } else {
      work();
    }
  }

  void RefillDirs() {
    if (janitor_) janitor_->Post([this] {
      output_spares_->Refill();
      checkpoint_spares_->Refill();
    });
  }

  // Reads what the supervisor recorded since the last look.
  void Refresh(LocalJob* job) {
    if (job->exited) return;
    if (!job->started) job->started = job->dir.ReadStarted();
    job->exited = job->dir.ReadExit();
    if (job->exited) {
      // It records the end, then exits: not always gone yet (its exit
      // watch, or the minute sweep, reaps it then).
      if (job->supervisor > 0 && Reap(job->supervisor)) job->supervisor = -1;
      return;
    }
    if (job->supervisor > 0 && unreaped_.contains(job->supervisor)) {
      // Our own child, not ended: alive, whatever its /proc entry says. A
      // supervisor just spawned can still be inside execve, its argv not yet
      // readable, which SupervisorAlive takes for a zombie; under load that
      // killed jobs as "died without recording an exit".
      if (!Reap(job->supervisor)) return;
      job->supervisor = -1;
    }
    pid_t sup = job->supervisor > 0 ? job->supervisor : job->dir.ReadSupervisorPid().value_or(0);
    if (job->supervisor != -1 && sup > 0 && SupervisorAlive(sup, job->dir.path())) return;
    // Re-read: the supervisor may have written exit.json just before it ended.
    job->exited = job->dir.ReadExit();
    if (!job->exited) {
      // Nobody watches the job any more: it is killed before it is reported
      // ended, so its GPUs are never given to another job while it runs.
      if (job->started) ::kill(-job->started->pid, SIGKILL);
      if (job->cgroup) RemoveJobCgroup(job->cgroup->dir, job->cgroup->parent, std::chrono::seconds(2));
      job->exited = ExitFile{-1, 0, NowNanos(), "the job's supervisor died without recording an exit", false};
      job->dir.WriteExit(*job->exited).IgnoreError("best effort: job.exited is what gets reported");
    }
  }

  // Waits for `pid`, a supervisor this agent started, if it has ended;
  // true once it is reaped (or was never ours to reap). Every supervisor
  // is reaped through here, and only while unreaped_ holds its pid: a pid
  // not yet waited for cannot name a newer process.
  bool Reap(pid_t pid) {
    if (!unreaped_.contains(pid)) return true;
    pid_t r = ::waitpid(pid, nullptr, WNOHANG);
    if (r == 0) return false;
    unreaped_.erase(pid);  // reaped, or not our child after all (ECHILD)
    return true;
  }

  // Reports the job's end the moment its supervisor is gone (it records
  // the end first), and reaps it, whether or not the job is still known.
  void WatchSupervisor(const std::string& id, pid_t pid) {
    if (watcher_ == nullptr) return;
    KeepWatch(id, watcher_->Watch(pid, [this, id, pid] {
      loop_.Post([this, id, pid] {
        auto it = jobs_.find(id);
        if (Reap(pid) && it != jobs_.end() && it->second.supervisor == pid) it->second.supervisor = -1;
        OnSupervisorEnded(id);
      });
    }));
  }

  // A pooled supervisor (supervisor.h) says when its job has ended instead
  // of ending itself: its socket becomes readable then, or when it dies.
  void WatchPooled(const std::string& id, pid_t pid, int fd) {
    if (watcher_ == nullptr) return;  // Refresh looks: exit.json, or the process gone
    KeepWatch(id, watcher_->WatchReadable(fd, [this, id, pid, fd] {
      loop_.Post([this, id, pid, fd] { OnPooledReady(id, pid, fd); });
    }));
  }

  // The job's one watch (a new one replaces the old); without one, its end
  // is noticed by looking.
  void KeepWatch(const std::string& id, Result<uint64_t> handle) {
    if (!handle.ok()) {
      spdlog::warn("node '{}' will notice the end of job '{}' by looking: {}", opts_.node_name, id,
                   handle.status().message());
      return;
    }
    if (auto old = exit_watches_.find(id); old != exit_watches_.end()) watcher_->Cancel(old->second);
    exit_watches_[id] = *handle;
  }

  void OnPooledReady(const std::string& id, pid_t pid, int fd) {
    exit_watches_.erase(id);
    if (stopping_ || !supervisors_) return;
    auto it = jobs_.find(id);
    switch (supervisors_->Hear(pid)) {
      case SupervisorPool::Heard::kNothing:
        if (it != jobs_.end() && it->second.supervisor == pid) WatchPooled(id, pid, fd);  // still the pool's
        return;
      case SupervisorPool::Heard::kStarted:
        // Its process runs: reported now, with its start time, rather than
        // at the next look (Tick).
        if (it == jobs_.end() || it->second.supervisor != pid) return;
        WatchPooled(id, pid, fd);
        OnStarted(id, &it->second);
        return;
      case SupervisorPool::Heard::kDone:
        break;  // it waits for the next job, still our child
      case SupervisorPool::Heard::kRetired:
      case SupervisorPool::Heard::kGone:
        // It exits (or has): reaped when it has, through its pidfd.
        if (!Reap(pid)) WatchRetired(pid);
        break;
    }
    // The job is no longer this process's: its end is in exit.json (or,
    // for one that died, nowhere, which Refresh says).
    if (it != jobs_.end() && it->second.supervisor == pid) it->second.supervisor = -1;
    OnSupervisorEnded(id);
  }

  void OnStarted(const std::string& id, LocalJob* job) {
    Look(id, job);
    (void)ReportIfChanged(id, job);
  }

  // Sends the job's status alone unless it is the one last reported; false
  // when it was.
  bool ReportIfChanged(const std::string& id, LocalJob* job) {
    v1::WorkloadStatus ws = StatusOf(id, *job);
    if (!Unreported(ws, *job)) return false;
    v1::AgentMessage m;
    *m.mutable_status()->add_workloads() = ws;
    if (Send(m)) MarkReported(ws, job);
    return true;
  }

  // Whether `ws` says something the server was not told of `job`.
  static bool Unreported(const v1::WorkloadStatus& ws, const LocalJob& job) {
    return ws.state() != job.reported || (job.service && ViewOf(ws) != job.reported_service);
  }
  static void MarkReported(const v1::WorkloadStatus& ws, LocalJob* job) {
    job->reported = ws.state();
    job->reported_service = ViewOf(ws);
  }

  // Reaps a supervisor that no job needs any more once it has ended.
  void WatchRetired(pid_t pid) {
    if (watcher_ == nullptr) return;  // the minute sweep reaps it
    watcher_->Watch(pid, [this, pid] { loop_.Post([this, pid] { Reap(pid); }); })
        .IgnoreError("unwatched, the minute sweep reaps it");
  }

  void OnSupervisorEnded(const std::string& id) {
    exit_watches_.erase(id);
    auto it = jobs_.find(id);
    if (stopping_ || it == jobs_.end()) return;
    LocalJob& job = it->second;
    Look(id, &job);
    ShipLog(id, &job, job.exited.has_value());
    if (ReportIfChanged(id, &job)) Reconcile();
  }

  v1::WorkloadStatus StatusOf(const std::string& id, const LocalJob& job) const {
    v1::WorkloadStatus ws;
    ws.set_job_id(RefOf(id).job_id);
    ws.set_workload_id(id);
    ws.set_start_time_unix_nanos(job.started ? job.started->start_unix_nanos : job.launch_ns);
    if (job.exited) {
      ws.set_state(job.exited->failed_to_start ? v1::WORKLOAD_STATE_FAILED_TO_START : v1::WORKLOAD_STATE_EXITED);
      ws.set_exit_code(job.exited->exit_code);
      ws.set_signal(job.exited->signal);
      ws.set_end_time_unix_nanos(job.exited->end_unix_nanos);
      ws.set_message(job.exited->message);
      ws.set_fenced(job.exited->fenced);
    } else {
      ws.set_state(v1::WORKLOAD_STATE_RUNNING);
    }
    if (job.service) {
      ServiceView v = job.service->View();
      ws.set_port(v.port);
      ws.set_endpoint(v.endpoint);
      ws.set_restarts(v.restarts);
      ws.set_ready(v.ready && !job.exited);
      ws.set_not_ready_reason(
          Bounded(job.exited ? "ended: " + DescribeExit(*job.exited) : v.not_ready_reason, rpc::kMaxReasonBytes));
      if (job.first_start_ns > 0) ws.set_start_time_unix_nanos(job.first_start_ns);
    }
    return ws;
  }

  // Sends output not yet sent: a bounded amount, or all of it.
  // Only the first replica of a gang ships its output (the job's log is one
  // byte stream); the others keep theirs in their job directory.
  void ShipLog(const std::string& id, LocalJob* job, bool all) {
    if (!Connected()) return;
    rpc::WorkloadRef ref = RefOf(id);
    if (ref.replica != 0) return;
    std::ifstream in(job->output_dir + "/output.log", std::ios::binary);
    if (!in) return;
    in.seekg(job->log_sent);
    int64_t budget = all ? INT64_MAX : kLogPerTick;
    std::string buf(static_cast<size_t>(kLogChunk), '\0');
    // Bounded by what waits for the network too: a slow link paces the logs.
    while (budget > 0 && Connected() && connection_->queued_bytes() < kLogBacklog) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      std::streamsize n = in.gcount();
      if (n <= 0) break;
      v1::AgentMessage m;
      m.mutable_log()->set_job_id(ref.job_id);
      m.mutable_log()->set_workload_id(id);
      m.mutable_log()->set_offset(job->log_sent);
      m.mutable_log()->set_data(buf.data(), static_cast<size_t>(n));
      if (!Send(m)) break;
      job->log_sent += n;
      budget -= n;
    }
  }

  // Stops jobs that are no longer desired; forgets ended ones the server has.
  void Reconcile() {
    if (!have_desired_) return;
    int64_t now = NowNanos();
    std::vector<std::string> forget;
    for (auto& [id, job] : jobs_) {
      if (desired_.contains(id)) continue;
      if (job.restart_pending) {
        EndPendingRestart(&job);
        continue;
      }
      if (job.exited) {
        // The server no longer wants it and has heard how it ended.
        if (job.reported == v1::WORKLOAD_STATE_EXITED || job.reported == v1::WORKLOAD_STATE_FAILED_TO_START) {
          forget.push_back(id);
        }
        continue;
      }
      if (!job.started) continue;  // the supervisor has not started it yet; next tick
      pid_t pgid = job.started->pid;
      // A preemption sets its own grace (the server resends it with every
      // desired set while the job stops); otherwise the job's own applies.
      auto stop = stops_.find(id);
      int grace = stop != stops_.end() ? std::max(stop->second.grace_seconds(), 0) : job.grace_seconds;
      // A preemption or a drain first asks the job to checkpoint.
      if (stop != stops_.end() && stop->second.checkpoint_signal() > 0 && !job.sigterm_ns) {
        if (!job.checkpoint_ns) {
          spdlog::info("node '{}' asks job '{}' to checkpoint (signal {}, {}s before SIGTERM)", opts_.node_name, id,
                       stop->second.checkpoint_signal(), stop->second.checkpoint_grace_seconds());
          ::kill(-pgid, stop->second.checkpoint_signal());
          job.checkpoint_ns = now;
          continue;
        }
        if (now - *job.checkpoint_ns < int64_t{stop->second.checkpoint_grace_seconds()} * 1'000'000'000) continue;
      }
      if (!job.sigterm_ns) {
        spdlog::info("node '{}' stopping job '{}' (SIGTERM, {}s grace){}", opts_.node_name, id, grace,
                     stop != stops_.end() ? ": " + stop->second.reason() : "");
        ::kill(-pgid, SIGTERM);
        job.sigterm_ns = now;
        job.dir.WriteStop(now).IgnoreError("best effort: an agent restarted without it sends SIGTERM again");
        if (job.service) {
          job.service->Stopping();
          (void)ReportIfChanged(id, &job);
        }
      } else if (now - *job.sigterm_ns > int64_t{grace} * 1'000'000'000) {
        ::kill(-pgid, SIGKILL);
      }
    }
    for (const std::string& id : forget) {
      // The supervisor removes the group when the job ends; one that died
      // first leaves it (and perhaps the job's processes) behind.
      if (const auto& g = jobs_.at(id).cgroup) RemoveJobCgroup(g->dir, g->parent, std::chrono::milliseconds(0));
      if (const auto& svc = jobs_.at(id).service) ports_.Release(svc->port());
      std::error_code ec;
      fs::remove_all(jobs_.at(id).dir.path(), ec);  // in memory: at once
      OffLoop([dir = jobs_.at(id).output_dir] {
        std::error_code oec;
        fs::remove_all(dir, oec);
      });
      jobs_.erase(id);
    }
  }

  void Tick() {
    if (stopping_) return;
    v1::AgentMessage m;
    const ServiceTime now = std::chrono::steady_clock::now();
    for (auto& [id, job] : jobs_) {
      Look(id, &job);
      if (job.service) job.service->CheckReadyTimeout(now);
      ShipLog(id, &job, job.exited.has_value());  // all of an ended job's output precedes its end
      v1::WorkloadStatus ws = StatusOf(id, job);
      if (Unreported(ws, job)) *m.mutable_status()->add_workloads() = ws;
    }
    if (m.status().workloads_size() > 0 && Send(m)) {
      for (const auto& ws : m.status().workloads()) MarkReported(ws, &jobs_.at(ws.workload_id()));
    }
    Reconcile();
    UpdateLoads();
    loop_.PostAfter(kTick, [this] { Tick(); });
  }

  // ---- telemetry ----

  // The server relays an administrator's fault injection. The answer only goes to the log: the server checked
  // that the GPU is simulated before it relayed the call.
  void InjectFault(const v1::InjectFault& f) {
    auto fault = ParseFault(f.fault());
    Status s = fault.ok() ? telemetry_->InjectFault(f.gpu_index(), *fault) : fault.status();
    if (s.ok()) {
      spdlog::warn("node '{}': fault '{}' injected into gpu {}", opts_.node_name, f.fault(), f.gpu_index());
    } else {
      spdlog::error("node '{}': cannot inject fault '{}' into gpu {}: {}", opts_.node_name, f.fault(),
                    f.gpu_index(), s.message());
    }
  }

  // Which job each process on a GPU belongs to: jobs run in their own
  // process group, led by the process the supervisor started.
  std::map<int64_t, std::string> JobsByProcessGroup() const {
    std::map<int64_t, std::string> out;
    for (const auto& [id, job] : jobs_) {
      if (job.started && !job.exited) out[job.started->pid] = RefOf(id).job_id;
    }
    return out;
  }

  // Every heartbeat renews the lease; GPU reports ride along once per
  // telemetry period (there is nothing newer in between), on a new session,
  // and at once when a GPU's health changes (`with_gpus`).
  void SendHeartbeat(bool with_gpus = false) {
    if (!Connected()) return;
    auto now = std::chrono::steady_clock::now();
    with_gpus = with_gpus || now - last_gpu_report_ >= std::max<std::chrono::nanoseconds>(opts_.telemetry.period, heartbeat_every_);
    v1::AgentMessage hb;
    v1::Heartbeat* h = hb.mutable_heartbeat();
    h->set_time_unix_nanos(NowNanos());
    h->set_seq(++heartbeat_seq_);
    if (gossip_) {
      h->set_peers_version(peers_version_);
      for (const auto& [name, beat] : gossip_->TakeHeardDirectly()) {
        v1::PeerBeat* p = h->add_peers();
        p->set_node_name(name);
        p->set_beat(beat);
      }
    }
    unacked_.emplace_back(h->seq(), MonoNanos());
    if (unacked_.size() > kMaxUnackedHeartbeats) unacked_.pop_front();
    std::vector<GpuReading> readings;
    if (with_gpus) {
      readings = telemetry_->TakeReadings(/*summarise=*/true);
      last_gpu_report_ = now;
    }
    std::map<int64_t, std::string> jobs = with_gpus ? JobsByProcessGroup() : std::map<int64_t, std::string>();
    for (size_t i = 0; i < readings.size(); ++i) {
      v1::GpuReport* r = h->add_gpus();
      r->set_index(static_cast<int32_t>(i));
      r->set_health(readings[i].healthy ? v1::GPU_HEALTH_HEALTHY : v1::GPU_HEALTH_UNHEALTHY);
      r->set_health_reason(readings[i].reason);
      FillTelemetry(readings[i], jobs, r->mutable_telemetry());
      AddGpuMemoryReports(ShimReportsOn(static_cast<int>(i)), r->mutable_telemetry());  // job_env.h
    }
    if (with_gpus) AddCheckpoints(h);
    Send(hb);
    last_heartbeat_ = std::chrono::steady_clock::now();
  }

  // Running workloads whose checkpoint directory changed since the server
  // was last told (its mtime moves when a file is created, renamed or
  // removed in it): one stat per running job, with the GPU readings.
  void AddCheckpoints(v1::Heartbeat* h) {
    for (auto& [key, job] : jobs_) {
      if (job.reported != v1::WORKLOAD_STATE_RUNNING) continue;
      auto w = desired_.find(key);
      if (w == desired_.end()) continue;
      struct stat st {};
      if (::stat(CheckpointDir(w->second.job_id()).c_str(), &st) != 0) continue;
      const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
      if (mtime <= job.checkpoint_said_ns || h->checkpoints_size() >= rpc::kMaxCheckpointsPerHeartbeat) continue;
      job.checkpoint_said_ns = mtime;
      v1::CheckpointMark* c = h->add_checkpoints();
      c->set_workload_id(key);
      c->set_time_unix_nanos(mtime);
    }
  }

  // The running jobs on GPU `gpu` that the memory-limit shim reports for.
  std::vector<ShimReport> ShimReportsOn(int gpu) const {
    std::vector<ShimReport> out;
    for (const auto& [id, job] : jobs_) {
      auto w = desired_.find(id);
      if (!job.started || job.exited || w == desired_.end()) continue;
      const auto& on = w->second.gpu_indices();
      if (std::find(on.begin(), on.end(), gpu) == on.end()) continue;
      out.push_back({w->second.job_id(), job.dir.path() + "/gpu-memory"});
    }
    return out;
  }

  // Tells backends that model their devices (simulated) how busy each GPU
  // is: a running job keeps its GPUs busy (DROVER_SIM_LOAD in its
  // environment, 0..1, says how much; 1 by default).
  void UpdateLoads() {
    std::vector<double> load(gpus_.size(), 0.0);
    for (const auto& [id, job] : jobs_) {
      if (!job.started || job.exited) continue;
      auto w = desired_.find(id);
      if (w == desired_.end()) continue;
      double l = 1.0;
      if (auto e = w->second.env().find("DROVER_SIM_LOAD"); e != w->second.env().end()) {
        char* end = nullptr;
        double v = std::strtod(e->second.c_str(), &end);
        if (end != e->second.c_str() && *end == '\0' && v >= 0 && v <= 1) l = v;
      }
      for (int i : w->second.gpu_indices()) {
        if (i >= 0 && static_cast<size_t>(i) < load.size()) load[static_cast<size_t>(i)] += l;
      }
    }
    for (size_t i = 0; i < load.size(); ++i) {
      double l = std::min(load[i], 1.0);
      if (loads_[i] == l) continue;
      loads_[i] = l;
      telemetry_->SetLoad(static_cast<int>(i), l);
    }
  }

  AgentOptions opts_;
  std::vector<GpuDevice> gpus_;
  std::vector<int> vendor_index_;  // node index -> index within its backend
  std::vector<DeviceBackend*> slot_backend_;  // node index -> its backend
  HostTopology host_;
  std::unique_ptr<Telemetry> telemetry_;
  // Ended job ids already handled (NoteEndedJobs), oldest first; more than
  // the server repeats.
  static constexpr size_t kEndedRemembered = 1024;
  std::set<std::string> ended_seen_;
  std::deque<std::string> ended_order_;
  std::unique_ptr<SupervisorPool> supervisors_;  // with opts_.spare_supervisor; loop thread only
  bool refill_pending_ = false;                  // loop thread
  std::unique_ptr<ExitWatcher> own_watcher_;  // unless the options name a shared one
  ExitWatcher* watcher_ = nullptr;             // null: job ends are noticed by looking
  std::map<std::string, uint64_t> exit_watches_;  // by workload id; loop thread (Init before it runs)
  std::set<pid_t> unreaped_;                       // supervisors started here, not yet waited for; loop thread
  metrics::Registry metrics_;
  std::unique_ptr<http::Server> metrics_http_;
  std::string metrics_address_;
  std::vector<BackendLinks> backend_links_;
  std::vector<int32_t> links_;  // the node's link matrix, as registered
  NodeIsolation isolation_;
  std::vector<int> allowed_cpus_;  // the agent's own affinity, ascending
  std::map<std::string, std::string> agent_env_;  // the allow-listed part of the agent's environment
  std::vector<std::vector<DeviceRule>> gpu_devices_;  // per GPU: its device files
  std::string state_dir_;    // JobStateRoot's, or the options'
  std::string jobs_dir_;     // the jobs' state: <state_dir_>/jobs/<key>
  std::string outputs_dir_;  // their output: <data_dir>/jobs/<key>
  std::unique_ptr<SpareDirs> output_spares_, checkpoint_spares_;
  std::unique_ptr<runtime::EventLoop> janitor_;  // makes spares, removes outputs (own-loop agents)
  std::atomic<bool> stopping_{false};
  std::unique_ptr<runtime::EventLoop> own_loop_;  // unless the options name a shared one
  runtime::LoopClient loop_;
  std::unique_ptr<ServerConnection> connection_;  // set by Init, then read-only

  // Owned by the loop thread.
  std::map<std::string, LocalJob> jobs_;
  std::map<std::string, v1::Workload> desired_;
  std::map<std::string, v1::Stop> stops_;  // how to stop what is not desired
  std::vector<double> loads_;  // what SetLoad was last told, per GPU (-1: nothing yet)
  bool have_desired_ = false;
  std::chrono::milliseconds heartbeat_every_ = kDefaultHeartbeat;
  std::chrono::steady_clock::time_point last_heartbeat_;
  uint64_t heartbeat_generation_ = 0;
  std::chrono::steady_clock::time_point last_gpu_report_;
  int64_t heartbeat_seq_ = 0;
  std::deque<std::pair<int64_t, int64_t>> unacked_;  // (seq, monotonic send time), oldest first
  int64_t contact_ns_ = 0;      // monotonic: the last acknowledged contact
  int64_t fence_after_ns_ = 0;  // from the server; 0: not yet told
  int64_t fence_grace_ms_ = 0;
  std::unique_ptr<membership::UdpNode> gossip_;  // started by the first session; then read-only pointer
  std::string advertise_host_;  // services' endpoints name it (Init, then read-only)
  PortAllocator ports_;         // services' ports
  // Runs services' probes, one at a time, each within its timeout; made
  // with the first service (agents without services have no such thread).
  std::unique_ptr<runtime::EventLoop> prober_;
  int64_t peers_version_ = 0;
};

}  // namespace

HostTopology SimulatedHostTopology() {
  HostTopology t;
  t.sockets = 2;
  t.numa_nodes = 2;
  t.cores = 64;
  t.nics = {{"eth0", "", 0}, {"eth1", "", 1}};
  std::vector<std::vector<int>> halves = SplitCpus(AllowedCpus(), t.numa_nodes);
  for (int n = 0; n < t.numa_nodes; ++n) {
    if (!halves[static_cast<size_t>(n)].empty()) t.numa_cpus[n] = halves[static_cast<size_t>(n)];
  }
  return t;
}

Status CheckMetricsExposure(const AgentOptions& o) {
  if (o.metrics_listen.empty() || !o.metrics_token.empty() || o.metrics_insecure) return Status::Ok();
  if (IsLoopbackHost(HostOf(o.metrics_listen))) return Status::Ok();
  return FailedPrecondition(fmt::format(
      "refusing to serve metrics on '{}' to anyone who asks: the node's GPUs, jobs and tenants would be readable "
      "from the network; give a scrape token with --metrics-token-file, listen on 127.0.0.1, or pass "
      "--insecure-metrics to accept that (docs/security.md)",
      o.metrics_listen));
}

Result<std::unique_ptr<Agent>> StartAgent(AgentOptions options) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(options.node_name));
  DROVER_RETURN_IF_ERROR(CheckMetricsExposure(options));
  for (const auto& [k, v] : options.labels) DROVER_RETURN_IF_ERROR(rpc::ValidateLabel("--label", k, v));
  if (options.service_port_first != 0 || options.service_port_last != 0) {
    DROVER_RETURN_IF_ERROR(ParsePortRange(fmt::format("{}-{}", options.service_port_first,
                                                      options.service_port_last)).status());
  }
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  DROVER_RETURN_IF_ERROR(agent->Init());
  return std::unique_ptr<Agent>(std::move(agent));
}

}  // namespace drover::agent
