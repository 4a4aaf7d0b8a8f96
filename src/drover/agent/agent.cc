// The agent (agent.h): the parts it is made of, put together on one loop.
//
//   NodeInventory     devices, topology, isolation, telemetry (node_inventory.h)
//   LeaseKeeper       heartbeats, the fence, gossip (lease_keeper.h)
//   ServerConnection  registration and the Session stream (connection.h)
//   WorkloadRunner    the workloads: launch, watch, report, reconcile (workload_runner.h)
//     Reconcile       what to start and stop, pure (reconciler.h)
//     WorkloadLauncher  how a workload starts: a supervisor (workload_launcher.h)
//   ServiceLifecycle  services' ports, probes and restarts (service_lifecycle.h)
//
// AgentImpl owns them, routes what the server sends to the part it is for,
// runs the timers, and serves /metrics.
#include "drover/agent/agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>

#include "drover/agent/connection.h"
#include "drover/agent/gpu_report.h"
#include "drover/agent/lease_keeper.h"
#include "drover/agent/node_inventory.h"
#include "drover/agent/service.h"
#include "drover/agent/service_lifecycle.h"
#include "drover/agent/workload_runner.h"
#include "drover/auth/token.h"
#include "drover/common/address.h"
#include "drover/common/ids.h"
#include "drover/common/metrics.h"
#include "drover/common/version.h"
#include "drover/http/server.h"
#include "drover/membership/udp_node.h"
#include "drover/rpc/convert.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);

// The agent: the composition of its parts. Owned by whoever StartAgent
// returned it to. Stop() and the destructor from any thread but the
// loop's; the rest of its work runs on its loop.
class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentOptions o)
      : opts_(std::move(o)),
        own_loop_(opts_.loop == nullptr ? std::make_unique<runtime::EventLoop>("agent") : nullptr),
        loop_(opts_.loop == nullptr ? own_loop_.get() : opts_.loop) {}
  ~AgentImpl() override { Stop(); }

  Status Init() {
    DROVER_RETURN_IF_ERROR(inventory_.Init(opts_, [this] { loop_.Post([this] { lease_->SendHeartbeat(true); }); }));
    if (!opts_.gossip_listen.empty()) {
      DROVER_ASSIGN_OR_RETURN(opts_.gossip_listen, membership::UdpNode::PickPort(opts_.gossip_listen));
    }
    MakeParts();
    DROVER_RETURN_IF_ERROR(runner_->Init());
    // Made before anything of the agent runs on the loop (which reads it),
    // started last.
    ConnectionEvents events;
    events.make_register = [this] { return MakeRegister(); };
    events.connected = [this](const v1::RegisterResponse& lease, int64_t contact) { OnConnected(lease, contact); };
    events.message = [this](v1::ServerMessage m) { OnMessage(std::move(m)); };
    auto connection = ServerConnection::Create({opts_.node_name, opts_.server_address, opts_.data_dir, opts_.token,
                                                opts_.join_token, opts_.ca_file, opts_.channel},
                                               opts_.loop == nullptr ? own_loop_.get() : opts_.loop, std::move(events));
    if (!connection.ok()) return connection.status();
    connection_ = std::move(*connection);
    lease_->SetConnection(connection_.get());
    runner_->SetConnection(connection_.get());
    if (own_loop_) own_loop_->Start();
    inventory_.Start();
    DROVER_RETURN_IF_ERROR(StartMetrics());
    for (const ScheduledFault& f : opts_.faults) {
      loop_.PostAfter(f.after, [this, f] { inventory_.InjectScheduled(f); });
    }
    loop_.Post([this] { Tick(); });
    loop_.Post([this] { SweepTimer(); });
    connection_->Begin();
    return Status::Ok();
  }

  void Stop() override {
    if (stopping_.exchange(true)) return;
    if (connection_) connection_->Stop();
    if (metrics_http_) metrics_http_->Stop();
    loop_.Close();
    if (services_) services_->Stop();  // a probe under way ends within its timeout; its result is dropped
    // Nothing of the agent runs on the loop any more: its watches are ours
    // to end, and no callback of theirs runs after.
    if (runner_) {
      runner_->CancelWatches();
      runner_->ReleaseLauncher();  // the unused spare reads the end of its input and exits
    }
    if (own_loop_) own_loop_->Stop();
    if (runner_) runner_->Finish();
    if (lease_) lease_->Stop();
    inventory_.Stop();
  }

  const std::vector<GpuDevice>& gpus() const override { return inventory_.gpus(); }

  std::string metrics_address() const override { return metrics_address_; }

  // The GPUs as v1::Gpu with their latest telemetry and the jobs holding
  // them, under dcgm-exporter's names (rpc::WriteGpuMetrics).
  std::string RenderMetrics() override { return metrics_.Render(); }

 private:
  // The address the node's peers reach it at (AgentOptions::advertise_host).
  std::string AdvertisedHost() const {
    return opts_.advertise_host.empty() ? DefaultAdvertiseHost(opts_.gossip_listen) : opts_.advertise_host;
  }

  // The parts, wired to each other (before the loop runs anything of them).
  void MakeParts() {
    ServiceLifecycleOptions so;
    so.node_name = opts_.node_name;
    so.advertise_host = AdvertisedHost();
    so.port_first = opts_.service_port_first;
    so.port_last = opts_.service_port_last;
    services_ = std::make_unique<ServiceLifecycle>(std::move(so), &loop_, &stopping_);

    LeaseKeeperOptions lo;
    lo.node_name = opts_.node_name;
    lo.data_dir = opts_.data_dir;
    lo.fencing = opts_.fencing;
    lo.gossip_listen = opts_.gossip_listen;
    lo.gossip_hub = opts_.gossip_hub;
    lo.gossip_period = opts_.gossip_period;
    lo.telemetry_period = opts_.telemetry.period;
    lease_ = std::make_unique<LeaseKeeper>(std::move(lo), &loop_, &stopping_, [this](v1::Heartbeat* h) {
      inventory_.AddGpuReports(h, runner_->JobsByProcessGroup(),
                               [this](int gpu) { return runner_->ShimReportsOn(gpu); });
      runner_->AddCheckpoints(h);
      runner_->AddImages(h);
    });

    WorkloadRunnerOptions wo;
    wo.node_name = opts_.node_name;
    wo.data_dir = opts_.data_dir;
    wo.state_dir = opts_.state_dir;
    wo.supervisor_exe = opts_.supervisor_exe;
    wo.spare_supervisor = opts_.spare_supervisor;
    wo.shared_loop = opts_.loop != nullptr;
    wo.lease_file = opts_.fencing ? lease_->lease_file() : "";
    wo.checkpoint_root = opts_.checkpoint_root;
    wo.checkpoint_retention = opts_.checkpoint_retention;
    wo.job_env_allow = opts_.job_env_allow;
    wo.sandbox = opts_.sandbox;
    wo.containers = opts_.containers;
    wo.exit_watcher = opts_.exit_watcher;
    wo.advertise_host = AdvertisedHost();
    runner_ = std::make_unique<WorkloadRunner>(std::move(wo), &loop_, &stopping_, &inventory_, services_.get());
    services_->SetHost(runner_.get());
  }

  // What the node registers with, on every (re)connect.
  v1::RegisterRequest MakeRegister() {
    v1::RegisterRequest reg;
    reg.set_node_name(opts_.node_name);
    inventory_.FillRegister(&reg);
    reg.mutable_labels()->insert(opts_.labels.begin(), opts_.labels.end());
    reg.set_cpu_millis(sysconf(_SC_NPROCESSORS_ONLN) * 1000);
    reg.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
    reg.set_agent_version(kVersion);
    reg.set_gossip_address(opts_.gossip_listen);
    // A name is not sent: a gang's peers and its hosts file need an address
    // (the server then names the node by its name).
    if (const std::string host = AdvertisedHost(); rpc::IsIpAddress(host)) reg.set_advertise_host(host);
    reg.set_launch_port_first(opts_.launch_port_first);
    reg.set_launch_port_last(opts_.launch_port_last);
    return reg;
  }

  // ---- owner loop ----

  void OnConnected(const v1::RegisterResponse& lease, int64_t contact) {
    runner_->SessionOpened();
    lease_->OnConnected(lease, contact);
    spdlog::info("node '{}' connected to {}", opts_.node_name, opts_.server_address);
    runner_->ReportAll();
  }

  void OnMessage(v1::ServerMessage m) {
    if (m.has_desired()) runner_->OnDesired(m.desired());
    if (m.has_inject_fault()) inventory_.InjectFault(m.inject_fault());
    if (m.has_pull_image()) runner_->PullImage(m.pull_image());
    if (m.has_heartbeat_ack()) lease_->OnHeartbeatAck(m.heartbeat_ack());
  }

  void Tick() {
    if (stopping_) return;
    runner_->Tick();
    // Tells backends that model their devices (simulated) how busy each GPU is.
    inventory_.SetLoads(runner_->Loads(inventory_.gpus().size()));
    loop_.PostAfter(kTick, [this] { Tick(); });
  }

  void SweepTimer() {
    if (stopping_) return;
    runner_->Sweep();
    loop_.PostAfter(std::chrono::minutes(1), [this] { SweepTimer(); });
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

  // ---- /metrics ----

  Status StartMetrics() {
    metrics_.AddCollector([this](metrics::Exposition& out) {
      std::vector<std::pair<std::string, std::string>> holders;  // job ids, tenants
      if (!RunOnLoop([&] { holders = runner_->GpuHolders(inventory_.gpus().size()); })) return;
      inventory_.WriteMetrics(holders, out);
    });
    metrics_.AddCollector([this](metrics::Exposition& out) { WriteGossipMetrics(out); });
    if (opts_.metrics_listen.empty()) return Status::Ok();
    auto server = http::StartServer(opts_.metrics_listen, [this](const http::Request& req) { return Serve(req); });
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

  http::Response Serve(const http::Request& req) {
    if (!opts_.metrics_token.empty()) {
      auto it = req.headers.find("authorization");
      std::string_view given = it == req.headers.end() ? "" : std::string_view(it->second);
      if (!given.starts_with("Bearer ") || !auth::ConstantTimeEqual(given.substr(7), opts_.metrics_token)) {
        http::Response refused = http::ErrorResponse(Unauthenticated(
            "this endpoint needs the node's scrape token: \"Authorization: Bearer <token>\" (--metrics-token-file)"));
        refused.headers["WWW-Authenticate"] = "Bearer";
        return refused;
      }
    }
    if (req.path == "/metrics") {
      return http::Response{200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics(), {}, {}};
    }
    return SamplesResponse(inventory_.telemetry(), inventory_.gpus().size(), req);
  }

  void WriteGossipMetrics(metrics::Exposition& out) {
    // Read under the node's own lock; the pointer is set once, on the loop.
    membership::UdpNode* g = nullptr;
    if (!RunOnLoop([&] { g = lease_->gossip(); }) || g == nullptr) return;
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
  }

  // Declared in the order they are made; destroyed after Stop() ended
  // every thread that could reach them.
  AgentOptions opts_;
  std::unique_ptr<runtime::EventLoop> own_loop_;  // unless the options name a shared one
  runtime::LoopClient loop_;
  std::atomic<bool> stopping_{false};
  NodeInventory inventory_;
  std::unique_ptr<ServiceLifecycle> services_;
  std::unique_ptr<LeaseKeeper> lease_;
  std::unique_ptr<WorkloadRunner> runner_;
  std::unique_ptr<ServerConnection> connection_;  // set by Init, then read-only
  metrics::Registry metrics_;
  std::unique_ptr<http::Server> metrics_http_;
  std::string metrics_address_;
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
    DROVER_RETURN_IF_ERROR(
        ParsePortRange(fmt::format("{}-{}", options.service_port_first, options.service_port_last)).status());
  }
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  DROVER_RETURN_IF_ERROR(agent->Init());
  return std::unique_ptr<Agent>(std::move(agent));
}

}  // namespace drover::agent
