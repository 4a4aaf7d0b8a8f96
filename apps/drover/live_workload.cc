#include "live_workload.h"

#include "drover/common/mutex.h"
#include "drover/rpc/channel.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "drover/agent/devices/device_backend.h"
#include "drover/sim/live.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::app {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kRpcDeadline = std::chrono::seconds(5);
constexpr auto kPendingRefresh = std::chrono::seconds(1);
constexpr auto kNodePoll = std::chrono::seconds(1);
constexpr auto kLogEvery = std::chrono::minutes(1);
constexpr int kGraceSeconds = 2;
constexpr std::string_view kLoadEnv = "DROVER_SIM_LOAD";

// The simulator's catalog entry for `model`, matched as the simulated
// backend matches it (any case); its spelling is what the nodes report.
const agent::SimulatedModel* FindModel(std::string_view model) {
  for (const agent::SimulatedModel& m : agent::SimulatedModels()) {
    if (m.model.size() != model.size()) continue;
    if (std::equal(m.model.begin(), m.model.end(), model.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        })) {
      return &m;
    }
  }
  return nullptr;
}

struct Checked {
  sim::LiveCluster cluster;
  sim::LiveMixOptions mix;
  std::string model;  // the catalog's spelling
};

Result<Checked> Check(const LiveWorkloadOptions& o) {
  DROVER_RETURN_IF_ERROR(ValidateWorkloadKind(o.kind));
  if (o.nodes < 1) return InvalidArgument("--workload mixed needs simulated nodes (--simulate N, N >= 1)");
  if (o.gpus_per_node < 1) return InvalidArgument("--workload mixed needs simulated GPUs (--simulate-gpus >= 1)");
  const agent::SimulatedModel* model = FindModel(o.gpu_model);
  if (model == nullptr) {
    return InvalidArgument(fmt::format("--workload mixed: GPU model '{}' is not one the simulator knows", o.gpu_model));
  }
  if (o.max_pending < 0) {
    return InvalidArgument(fmt::format("live workload: max pending {} is negative", o.max_pending));
  }
  Checked c;
  c.cluster = {o.nodes, o.gpus_per_node, model->memory_bytes};
  c.mix = {o.time_scale, o.target_load, o.seed};
  c.model = std::string(model->model);
  DROVER_RETURN_IF_ERROR(sim::LivePlan::Make(c.cluster, c.mix).status());
  return c;
}

std::string Seconds(double ms) {
  int64_t s = std::llround(ms / 1000);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

}  // namespace

Status ValidateWorkloadKind(std::string_view kind) { return sim::ParseLiveWorkloadKind(kind).status(); }

Status ValidateLiveWorkload(const LiveWorkloadOptions& options) {
  DROVER_ASSIGN_OR_RETURN(sim::LiveWorkloadKind kind, sim::ParseLiveWorkloadKind(options.kind));
  if (kind == sim::LiveWorkloadKind::kNone) return Status::Ok();
  return Check(options).status();
}

void ApplyLiveSchedulerDefaults(const LiveWorkloadOptions& options, SchedulerFlags* flags) {
  auto kind = sim::ParseLiveWorkloadKind(options.kind);
  if (!kind.ok() || *kind == sim::LiveWorkloadKind::kNone) return;
  const agent::SimulatedModel* model = FindModel(options.gpu_model);
  const std::string name = model != nullptr ? std::string(model->model) : options.gpu_model;
  sim::LiveSchedulerSettings s = sim::LiveScheduler({options.nodes, options.gpus_per_node, 0}, name);
  if (flags->queue_policy.empty()) flags->queue_policy = std::string(sched::QueuePolicyName(s.config.queue));
  if (flags->preemption.empty()) flags->preemption = s.config.preemption ? "true" : "false";
  if (flags->tenants.empty()) {
    std::string yaml;
    for (const sched::TenantInfo& t : s.tenants) {
      yaml += fmt::format("- {{name: {}, weight: {}", t.name, t.weight);
      for (const auto& [m, gpus] : t.guaranteed_gpus) yaml += fmt::format(", guaranteed: {{\"{}\": {}}}", m, gpus);
      yaml += "}\n";
    }
    flags->tenants = yaml;
  }
}

// Everything the submitting thread uses. The options, plan and counters
// below `mu` are the thread's own; Stop and totals() touch only what `mu`
// guards.
struct LiveWorkload::State {
  LiveWorkloadOptions options;
  Checked checked;
  std::optional<sim::LivePlan> plan;
  int max_pending = 0;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::NodeService::Stub> nodes;
  std::thread thread;

  mutable Mutex mu;
  CondVar cv;
  bool stopping DROVER_GUARDED_BY(mu) = false;
  std::shared_ptr<grpc::ClientContext> call DROVER_GUARDED_BY(mu);  // the RPC in flight
  Totals totals DROVER_GUARDED_BY(mu);

  // The thread's own.
  bool send_load = true;  // false once the server refused DROVER_SIM_LOAD
  int64_t pending = 0;    // as last listed, plus what was submitted since
  Clock::time_point pending_at{};
  int64_t seq = 0;

  // What the minute's log line reports.
  struct Minute {
    std::map<std::string, int> by_tenant;
    double gpus = 0;
    int64_t held_back = 0, failed = 0;
    int64_t max_pending_seen = 0;
    std::string last_error;
  } minute;

  Totals totals_now() const {
    MutexLock lock(&mu);
    return totals;
  }

  // Waits until `until` or Stop; false on Stop.
  bool WaitUntil(Clock::time_point until) {
    MutexLock lock(&mu);
    return !cv.WaitUntil(&mu, until, [this]() DROVER_REQUIRES(mu) { return stopping; });
  }

  // Runs one RPC with a deadline, cancellable by Stop.
  template <typename Fn>
  grpc::Status Call(Fn&& fn) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
    {
      MutexLock lock(&mu);
      if (stopping) return grpc::Status(grpc::StatusCode::CANCELLED, "stopping");
      call = ctx;
    }
    grpc::Status s = fn(ctx.get());
    MutexLock lock(&mu);
    call.reset();
    return s;
  }

  // Simulated nodes that can run the mix: ready, not drained, with at
  // least gpus_per_node GPUs of the model.
  int ReadyNodes() {
    v1::ListNodesResponse resp;
    grpc::Status s = Call([&](grpc::ClientContext* ctx) { return nodes->List(ctx, v1::ListNodesRequest(), &resp); });
    if (!s.ok()) return 0;
    int ready = 0;
    for (const v1::Node& n : resp.nodes()) {
      if (n.state() != v1::NODE_STATE_READY || n.drained()) continue;
      int gpus = static_cast<int>(std::count_if(n.gpus().begin(), n.gpus().end(),
                                                [&](const v1::Gpu& g) { return g.model() == checked.model; }));
      ready += gpus >= options.gpus_per_node;
    }
    return ready;
  }

  bool WaitForNodes() {
    auto next_log = Clock::now();
    while (true) {
      int ready = ReadyNodes();
      if (ready >= options.nodes) return true;
      if (Clock::now() >= next_log) {
        spdlog::info("live workload: waiting for {} nodes with {} x {} ({} ready)", options.nodes,
                     options.gpus_per_node, checked.model, ready);
        next_log = Clock::now() + kLogEvery;
      }
      if (!WaitUntil(Clock::now() + kNodePoll)) return false;
    }
  }

  void RefreshPending(Clock::time_point now) {
    if (now - pending_at < kPendingRefresh) return;
    v1::ListJobsRequest req;
    req.set_state(v1::JOB_STATE_PENDING);
    v1::ListJobsResponse resp;
    grpc::Status s = Call([&](grpc::ClientContext* ctx) { return jobs->List(ctx, req, &resp); });
    if (s.ok()) pending = resp.jobs_size();
    pending_at = now;  // on failure, keep the estimate and try again later
    minute.max_pending_seen = std::max(minute.max_pending_seen, pending);
  }

  v1::SubmitJobRequest Spec(const sim::LiveJob& j) {
    v1::SubmitJobRequest r;
    v1::JobSpec* s = r.mutable_spec();
    s->set_name(fmt::format("{}-{}", j.req.tenant, ++seq));
    s->set_tenant(j.req.tenant);
    s->set_priority(j.req.priority);
    s->set_replicas(j.req.replicas);
    s->set_gpus(j.req.gpus);
    if (j.req.fractional()) {
      s->set_gpu_milli(j.req.gpu_milli);
      s->set_gpu_memory_bytes(j.req.gpu_memory_bytes);
    }
    s->set_gpu_model(checked.model);
    s->add_command("sleep");
    s->add_command(std::to_string((j.run_ms + 500) / 1000));
    if (send_load) (*s->mutable_env())[std::string(kLoadEnv)] = fmt::format("{:.2f}", j.load);
    s->set_termination_grace_seconds(kGraceSeconds);
    s->set_preemptible(j.req.preemptible);
    s->set_runtime_estimate_seconds((j.estimate_ms + 500) / 1000);
    return r;
  }

  void Submit(const sim::LiveJob& j) {
    v1::SubmitJobRequest req = Spec(j);
    v1::SubmitJobResponse resp;
    grpc::Status s = Call([&](grpc::ClientContext* ctx) { return jobs->Submit(ctx, req, &resp); });
    if (!s.ok() && send_load && s.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
        s.error_message().find(kLoadEnv) != std::string::npos) {
      // A server that reserves every DROVER_* name: run without the hint
      // (the simulated GPUs then show full load) rather than not at all.
      spdlog::warn("live workload: the server refuses {} ({}); submitting without it", kLoadEnv, s.error_message());
      send_load = false;
      req.mutable_spec()->mutable_env()->erase(std::string(kLoadEnv));
      s = Call([&](grpc::ClientContext* ctx) { return jobs->Submit(ctx, req, &resp); });
    }
    if (!s.ok()) {
      ++minute.failed;
      minute.last_error = s.error_message();
      MutexLock lock(&mu);
      ++totals.failed;
      return;
    }
    {
      MutexLock lock(&mu);
      ++totals.submitted;
    }
    ++minute.by_tenant[j.req.tenant];
    minute.gpus += static_cast<double>(j.req.milli()) / sched::kWholeGpu;
    ++pending;  // until the next listing says otherwise
  }

  void LogMinute() {
    int64_t n = 0;
    std::string tenants;
    for (const auto& [t, k] : minute.by_tenant) {
      n += k;
      tenants += fmt::format("{}{} {}", tenants.empty() ? "" : ", ", t, k);
    }
    std::string line = fmt::format("live workload: submitted {} jobs in the last minute", n);
    if (n > 0) line += fmt::format(" ({}; {:.2f} GPUs)", tenants, minute.gpus);
    if (minute.held_back > 0) {
      line += fmt::format(", held back {} while more than {} were pending", minute.held_back, max_pending);
    }
    line += fmt::format(", up to {} pending; {} in all", minute.max_pending_seen, totals_now().submitted);
    if (minute.failed > 0) {
      spdlog::warn("{}; {} failed, last: {}", line, minute.failed, minute.last_error);
    } else {
      spdlog::info("{}", line);
    }
    minute = Minute{};
  }

  void Run() {
    if (!WaitForNodes()) return;
    sim::LivePlan& p = *plan;
    spdlog::info(
        "live workload: mixed jobs on {} nodes x {} {} at {}x time: {:.1f} a minute offered at {:.2f} x capacity, "
        "runs {} on average, a warm-up of {}; holding back while more than {} jobs are pending",
        options.nodes, options.gpus_per_node, checked.model, options.time_scale, p.jobs_per_minute(),
        options.target_load, Seconds(p.mean_run_ms()), p.warmup_jobs(), max_pending);
    const Clock::time_point start = Clock::now();
    Clock::time_point next_log = start + kLogEvery;
    auto next = p.Next();
    while (next.ok()) {
      const Clock::time_point due = start + milliseconds(next->at_ms);
      if (!WaitUntil(std::min(due, next_log))) return;
      const Clock::time_point now = Clock::now();
      if (now >= next_log) {
        LogMinute();
        next_log = std::max(next_log + kLogEvery, now);
      }
      if (now < due) continue;
      RefreshPending(now);
      if (pending > max_pending) {
        ++minute.held_back;
        MutexLock lock(&mu);
        ++totals.held_back;
      } else {
        Submit(*next);
      }
      next = p.Next();
    }
    spdlog::error("live workload: stopped: {}", next.status().ToString());
  }
};

Result<std::unique_ptr<LiveWorkload>> LiveWorkload::Start(LiveWorkloadOptions options) {
  auto state = std::make_unique<State>();
  DROVER_ASSIGN_OR_RETURN(sim::LiveWorkloadKind kind, sim::ParseLiveWorkloadKind(options.kind));
  if (kind == sim::LiveWorkloadKind::kNone) return std::unique_ptr<LiveWorkload>(new LiveWorkload(std::move(state)));
  if (options.grpc_address.empty()) return InvalidArgument("live workload: no server address");
  DROVER_ASSIGN_OR_RETURN(state->checked, Check(options));
  DROVER_ASSIGN_OR_RETURN(sim::LivePlan plan, sim::LivePlan::Make(state->checked.cluster, state->checked.mix));
  state->plan.emplace(std::move(plan));
  state->max_pending = options.max_pending > 0 ? options.max_pending : 2 * options.nodes;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.ca_pem.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = options.ca_pem;
    creds = grpc::SslCredentials(tls);
  }
  auto channel = drover::rpc::MakeChannel(options.grpc_address, options.token, creds);
  state->jobs = v1::JobService::NewStub(channel);
  state->nodes = v1::NodeService::NewStub(channel);
  state->options = std::move(options);
  State* s = state.get();
  s->thread = std::thread([s] { s->Run(); });
  return std::unique_ptr<LiveWorkload>(new LiveWorkload(std::move(state)));
}

LiveWorkload::LiveWorkload(std::unique_ptr<State> state) : state_(std::move(state)) {}

LiveWorkload::~LiveWorkload() { Stop(); }

void LiveWorkload::Stop() {
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    if (state_->call) state_->call->TryCancel();
  }
  state_->cv.SignalAll();
  if (state_->thread.joinable()) state_->thread.join();
}

LiveWorkload::Totals LiveWorkload::totals() const { return state_->totals_now(); }

}  // namespace drover::app
