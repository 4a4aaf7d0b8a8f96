// What dashboards read: the fleet in one compact message, scheduler
// statistics over time, tenants' usage against their guarantee and fair
// share, and a GPU's recent readings. Every read is served on the caller's
// thread from what the loop publishes (JobReplica, NodeReplica, LoopBoard);
// PublishBoard and RecordSchedulerStats run on the loop.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

float OrUnknown(bool has, double v) { return has ? static_cast<float>(v) : -1.0f; }

}  // namespace

void ControlLoop::RecordSchedulerStats() {
  LoopStats counters;
  nodes_.AddCounters(&counters);
  counters.passes_run = passes_run_;
  counters.passes_skipped = passes_skipped_;
  board_.SetCounters(counters);
  board_.SetCounts(decisions_, preemptions_, static_cast<int64_t>(sched_.pending()),
                   static_cast<int64_t>(sched_.bound()));
  board_.Sample(NowNs());
}

void ControlLoop::PublishBoard(const std::set<uint64_t>& persisted) {
  // Reasons: those of jobs that stopped waiting go; a new epoch when what a
  // reason says may have changed.
  std::vector<uint64_t> gone;
  std::set<std::string> tenants;  // whose usage may have changed
  for (uint64_t seq : persisted) {
    auto it = jobs_.find(seq);
    if (it == jobs_.end() || it->second.status().state() != v1::JOB_STATE_PENDING) gone.push_back(seq);
    if (it != jobs_.end()) tenants.insert(it->second.spec().tenant());
  }
  if (!gone.empty()) board_.DropReasons(gone);
  // (A pass raises the generation too: its reservation moved.)
  if (sched_.generation() != reason_generation_ || jobs_.gates_version() != reason_gates_) {
    reason_generation_ = sched_.generation();
    reason_gates_ = jobs_.gates_version();
    board_.SetReasonEpoch(++reason_epoch_);
  }
  RecordSchedulerStats();
  if (!tenants_changed_) {
    if (tenants.empty()) return;
    std::vector<std::pair<std::string, sched::Scheduler::TenantUsage>> usage;
    usage.reserve(tenants.size());
    for (const std::string& t : tenants) usage.emplace_back(t, sched_.Usage(t));
    board_.SetUsage(usage);
    return;
  }
  // Every tenant: configured, stored, or holding GPUs.
  tenants_changed_ = false;
  std::map<std::string, LoopBoard::Tenant> all;
  for (const sched::TenantInfo& t : options_.tenants) {
    all[t.name].info = t;
    all[t.name].configured = true;
  }
  for (const auto& [name, t] : tenants_.stored()) {
    LoopBoard::Tenant& row = all[name];
    if (auto info = TenantBook::ToInfo(t); info.ok()) row.info = *info;
    row.info.name = name;
    row.configured = true;
    row.stored_quota = t.quota();
    row.mount_roots.assign(t.mount_roots().begin(), t.mount_roots().end());
  }
  for (const auto& [seq, job] : jobs_) {
    if (rpc::HoldsGpus(job.status().state()) && !all.contains(job.spec().tenant())) {
      all[job.spec().tenant()].info.name = job.spec().tenant();
    }
  }
  for (auto& [name, row] : all) row.usage = sched_.Usage(name);
  board_.SetTenants(std::move(all));
}

std::future<Result<v1::Fleet>> ControlLoop::Fleet() {
  // From the replicas, on the caller's thread: a dashboard's tick costs the
  // loop nothing.
  std::promise<Result<v1::Fleet>> promise;
  Result<std::vector<NodeReplica::SnapshotPtr>> nodes = node_replica_.List();
  Result<std::map<v1::JobState, int64_t>> counts = replica_.Counts();
  if (!nodes.ok() || !counts.ok()) {
    promise.set_value(!nodes.ok() ? nodes.status() : counts.status());
    return promise.get_future();
  }
  v1::Fleet out;
  out.set_time_unix_nanos(NowNs());
  for (const NodeReplica::SnapshotPtr& snapshot : *nodes) {
    const v1::Node node_view = RenderNode(*snapshot);
    const v1::Node* node = &node_view;
    v1::FleetNode* n = out.add_nodes();
    n->set_name(node->name());
    n->set_state(node->state());
    n->set_drained(node->drained());
    for (const v1::Gpu& g : node->gpus()) {
      v1::FleetGpu* f = n->add_gpus();
      const v1::GpuTelemetry& t = g.telemetry();
      f->set_utilization_pct(OrUnknown(t.has_utilization_pct(), t.utilization_pct()));
      f->set_memory_used_bytes(t.has_memory_used_bytes() ? t.memory_used_bytes() : -1);
      f->set_memory_total_bytes(t.has_memory_total_bytes() ? t.memory_total_bytes() : g.memory_bytes());
      f->set_temperature_c(OrUnknown(t.has_temperature_c(), t.temperature_c()));
      f->set_power_w(OrUnknown(t.has_power_w(), t.power_w()));
      f->set_power_limit_w(OrUnknown(t.has_power_limit_w(), t.power_limit_w()));
      f->set_healthy(g.health() != v1::GPU_HEALTH_UNHEALTHY);
      f->set_health_reason(g.health_reason());
      f->set_job_id(g.job_id());
      f->set_model(g.model());
    }
  }
  for (const auto& [state, n] : *counts) (*out.mutable_jobs())[rpc::JobStateDisplay(state)] = n;
  // Waiting jobs, array tasks held back by their array's limit included.
  out.set_queue_depth(counts->at(v1::JOB_STATE_PENDING));
  promise.set_value(std::move(out));
  return promise.get_future();
}

std::future<Result<LoopStats>> ControlLoop::Stats() {
  std::promise<Result<LoopStats>> promise;
  promise.set_value([&]() -> Result<LoopStats> {
    LoopStats s = board_.Counters();
    DROVER_ASSIGN_OR_RETURN(s.jobs, replica_.Counts());  // as the last commit left them
    s.queue_depth = s.jobs[v1::JOB_STATE_PENDING];
    DROVER_ASSIGN_OR_RETURN(std::vector<NodeReplica::SnapshotPtr> nodes, node_replica_.List());
    for (const NodeReplica::SnapshotPtr& n : nodes) {
      ++(n->state == v1::NODE_STATE_READY ? s.nodes_ready : s.nodes_not_ready);
      if (n->state == v1::NODE_STATE_LOST) ++s.nodes_lost;
      for (const v1::Gpu& g : n->record->gpus())
        ++(g.health() == v1::GPU_HEALTH_UNHEALTHY ? s.gpus_unhealthy : s.gpus_healthy);
    }
    return s;
  }());
  return promise.get_future();
}

std::future<Result<v1::SchedulerStats>> ControlLoop::SchedulerStats() {
  std::promise<Result<v1::SchedulerStats>> promise;
  v1::SchedulerStats out = board_.Stats(NowNs());
  if (decision_seconds_ != nullptr) {
    metrics::Histogram::Snapshot snap = decision_seconds_->Read();
    // Every other bound (doubling): bars enough for a dashboard.
    const std::vector<double>& bounds = latency_bounds_;
    uint64_t below = 0;
    for (size_t i = 0; i < snap.cumulative.size(); ++i) {
      if (i < bounds.size() && i % 2 == 1) continue;
      v1::LatencyBucket* b = out.add_decision_latency();
      if (i < bounds.size()) {
        b->set_le_seconds(bounds[i]);
      } else {
        b->set_inf(true);
      }
      b->set_count(static_cast<int64_t>(snap.cumulative[i] - below));
      below = snap.cumulative[i];
    }
  }
  promise.set_value(std::move(out));
  return promise.get_future();
}

std::future<Result<v1::ListTenantsResponse>> ControlLoop::ListTenants() {
  std::promise<Result<v1::ListTenantsResponse>> promise;
  promise.set_value([&]() -> Result<v1::ListTenantsResponse> {
    struct Row {
      LoopBoard::Tenant t;
      int64_t running = 0, pending = 0;
    };
    std::map<std::string, Row> rows;
    std::map<std::string, LoopBoard::Tenant> published = board_.Tenants();
    for (auto& [name, t] : published) {
      if (t.configured) rows[name].t = std::move(t);
    }
    // Jobs per tenant as the replica counts them (not a scan of every job).
    DROVER_ASSIGN_OR_RETURN(auto by_tenant, replica_.CountsByTenant());
    for (const auto& [tenant, counts] : by_tenant) {
      for (const auto& [st, n] : counts) {
        if (rpc::IsTerminal(st)) continue;
        Row& r = rows[tenant];
        r.t.info.name = tenant;
        (st == v1::JOB_STATE_PENDING ? r.pending : r.running) += n;
      }
    }
    for (const auto& [name, t] : published) {  // usage of the tenants known only by their jobs
      if (auto it = rows.find(name); it != rows.end() && !t.configured) it->second.t.usage = t.usage;
    }
    // Fair share: the healthy GPUs of schedulable nodes split by weight
    // among the tenants that have work.
    DROVER_ASSIGN_OR_RETURN(std::vector<NodeReplica::SnapshotPtr> nodes, node_replica_.List());
    int64_t capacity = 0;
    for (const NodeReplica::SnapshotPtr& n : nodes) {
      if (!n->session || n->record->drained()) continue;
      for (const v1::Gpu& g : n->record->gpus()) capacity += g.health() == v1::GPU_HEALTH_UNHEALTHY ? 0 : 1000;
    }
    double active_weight = 0;
    for (const auto& [name, r] : rows) {
      if (r.running + r.pending > 0) active_weight += r.t.info.weight;
    }
    // GPU-hours in each stored tenant's quota period: one pass over the
    // replica's jobs of those tenants.
    const int64_t now = NowNs();
    std::map<std::string, double> gpu_ns;
    for (const auto& [name, r] : rows) {
      if (r.t.stored_quota) gpu_ns[name] = 0;
    }
    if (!gpu_ns.empty()) {
      DROVER_ASSIGN_OR_RETURN(std::vector<JobReplica::JobPtr> jobs,
                              replica_.Scan(
                                  0, [](const v1::Job&) { return true; },
                                  [&](const v1::Job& j) { return gpu_ns.contains(j.spec().tenant()); }));
      for (const JobReplica::JobPtr& j : jobs) {
        gpu_ns[j->spec().tenant()] += TenantBook::GpuNsInPeriod(*j, *rows.at(j->spec().tenant()).t.stored_quota, now);
      }
    }
    v1::ListTenantsResponse out;
    for (const auto& [name, r] : rows) {
      const sched::TenantInfo& info = r.t.info;
      v1::TenantStatus* t = out.add_tenants();
      t->set_name(name);
      t->set_weight(info.weight);
      for (const auto& [model, n] : info.guaranteed_gpus) (*t->mutable_guaranteed_gpus())[model] = n;
      t->set_borrow_limit(info.borrow_limit);
      t->set_usage_milli(r.t.usage.milli_gpus);
      t->set_borrowed_milli(r.t.usage.borrowed_milli);
      bool active = r.running + r.pending > 0;
      t->set_fair_share_milli(
          active && active_weight > 0
              ? static_cast<int64_t>(std::llround(static_cast<double>(capacity) * info.weight / active_weight))
              : 0);
      t->set_running_jobs(r.running);
      t->set_pending_jobs(r.pending);
      if (r.t.stored_quota) {
        t->set_stored(true);
        *t->mutable_quota() = *r.t.stored_quota;
        for (const std::string& root : r.t.mount_roots) t->add_mount_roots(root);
        t->set_gpu_hours_used(TenantBook::GpuHours(gpu_ns[name]));
      }
    }
    return out;
  }());
  return promise.get_future();
}

std::future<Result<v1::GpuHistory>> ControlLoop::GpuHistory(std::string node, int gpu) {
  std::promise<Result<v1::GpuHistory>> promise;
  promise.set_value([&]() -> Result<v1::GpuHistory> {
    DROVER_ASSIGN_OR_RETURN(NodeReplica::SnapshotPtr n, node_replica_.Get(node));
    if (n == nullptr) return NotFound(fmt::format("node '{}' is not registered", node));
    if (gpu < 0 || gpu >= n->record->gpus_size()) {
      return NotFound(fmt::format("node '{}' has no gpu {} (it has {})", node, gpu, n->record->gpus_size()));
    }
    v1::GpuHistory out;
    for (v1::GpuPoint& p : board_.History(node, gpu)) *out.add_points() = std::move(p);
    return out;
  }());
  return promise.get_future();
}

}  // namespace drover::server
