// What dashboards read from the control loop: the fleet in one compact
// message, scheduler statistics over time, tenants' usage against their
// guarantee and fair share, and a GPU's recent readings. Runs on the loop
// thread only (public methods post to it).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
constexpr int64_t kQueueEveryNs = 5 * kSecondNs;
constexpr size_t kQueuePoints = 720;  // an hour at one every 5 s
constexpr size_t kDecisionSamples = 11;  // the last 10 s, one a second

float OrUnknown(bool has, double v) { return has ? static_cast<float>(v) : -1.0f; }

}  // namespace

void ControlLoop::RecordSchedulerStats() {
  int64_t now = NowNs();
  if (decision_samples_.empty() || now - decision_samples_.back().first >= kSecondNs) {
    decision_samples_.emplace_back(now, decisions_);
    while (decision_samples_.size() > kDecisionSamples) decision_samples_.pop_front();
  }
  if (queue_history_.empty() || now - queue_history_.back().time_unix_nanos() >= kQueueEveryNs) {
    v1::QueuePoint p;
    p.set_time_unix_nanos(now);
    p.set_depth(static_cast<int64_t>(sched_.pending()));
    p.set_running(static_cast<int64_t>(sched_.bound()));
    queue_history_.push_back(std::move(p));
    while (queue_history_.size() > kQueuePoints) queue_history_.pop_front();
  }
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

std::future<Result<v1::SchedulerStats>> ControlLoop::SchedulerStats() {
  return Call<v1::SchedulerStats>([this]() -> Result<v1::SchedulerStats> {
    RecordSchedulerStats();
    v1::SchedulerStats out;
    out.set_decisions_total(decisions_);
    out.set_preemptions_total(preemptions_);
    out.set_queue_depth(static_cast<int64_t>(sched_.pending()));
    if (decision_samples_.size() >= 2) {
      const auto& [t0, d0] = decision_samples_.front();
      const auto& [t1, d1] = decision_samples_.back();
      if (t1 > t0) out.set_decisions_per_second(static_cast<double>(d1 - d0) * 1e9 / static_cast<double>(t1 - t0));
    }
    for (const v1::QueuePoint& p : queue_history_) *out.add_queue_history() = p;
    if (decision_seconds_ != nullptr) {
      metrics::Histogram::Snapshot snap = decision_seconds_->Read();
      const std::vector<double>& bounds = latency_bounds_;
      uint64_t below = 0;
      for (size_t i = 0; i < snap.cumulative.size(); ++i) {
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
    return out;
  });
}

std::future<Result<v1::ListTenantsResponse>> ControlLoop::ListTenants() {
  return Call<v1::ListTenantsResponse>([this]() -> Result<v1::ListTenantsResponse> {
    struct Row {
      sched::TenantInfo info;
      int64_t running = 0, pending = 0;
    };
    std::map<std::string, Row> rows;
    for (const sched::TenantInfo& t : options_.tenants) rows[t.name].info = t;
    for (const auto& [name, t] : tenants_) {
      if (auto info = ToTenantInfo(t); info.ok()) rows[name].info = *info;
    }
    // Jobs per tenant as the replica counts them (not a scan of every job).
    DROVER_ASSIGN_OR_RETURN(auto by_tenant, replica_.CountsByTenant());
    for (const auto& [tenant, counts] : by_tenant) {
      for (const auto& [st, n] : counts) {
        if (rpc::IsTerminal(st)) continue;
        Row& r = rows[tenant];
        r.info.name = tenant;
        (st == v1::JOB_STATE_PENDING ? r.pending : r.running) += n;
      }
    }
    // Fair share: the healthy GPUs of schedulable nodes split by weight
    // among the tenants that have work.
    int64_t capacity = 0;
    for (const auto& [name, entry] : nodes_) {
      if (!entry.sink || entry.node.drained()) continue;
      for (const v1::Gpu& g : entry.node.gpus()) capacity += g.health() == v1::GPU_HEALTH_UNHEALTHY ? 0 : 1000;
    }
    double active_weight = 0;
    for (const auto& [name, r] : rows) {
      if (r.running + r.pending > 0) active_weight += r.info.weight;
    }
    v1::ListTenantsResponse out;
    for (const auto& [name, r] : rows) {
      v1::TenantStatus* t = out.add_tenants();
      t->set_name(name);
      t->set_weight(r.info.weight);
      for (const auto& [model, n] : r.info.guaranteed_gpus) (*t->mutable_guaranteed_gpus())[model] = n;
      t->set_borrow_limit(r.info.borrow_limit);
      sched::Scheduler::TenantUsage u = sched_.Usage(name);
      t->set_usage_milli(u.milli_gpus);
      t->set_borrowed_milli(u.borrowed_milli);
      bool active = r.running + r.pending > 0;
      t->set_fair_share_milli(active && active_weight > 0
                                  ? static_cast<int64_t>(std::llround(static_cast<double>(capacity) * r.info.weight /
                                                                      active_weight))
                                  : 0);
      t->set_running_jobs(r.running);
      t->set_pending_jobs(r.pending);
      if (auto stored = tenants_.find(name); stored != tenants_.end()) {
        t->set_stored(true);
        *t->mutable_quota() = stored->second.quota();
        t->set_gpu_hours_used(GpuHoursUsed(name, stored->second.quota(), NowNs()));
      }
    }
    return out;
  });
}

v1::TenantStatus ControlLoop::TenantStatusOf(const std::string& name) const {
  v1::TenantStatus t;
  t.set_name(name);
  auto stored = tenants_.find(name);
  if (stored == tenants_.end()) return t;
  const v1::Tenant& rec = stored->second;
  t.set_weight(rec.weight() > 0 ? rec.weight() : 1.0);
  *t.mutable_guaranteed_gpus() = rec.guaranteed_gpus();
  t.set_borrow_limit(rec.borrow_limit());
  *t.mutable_quota() = rec.quota();
  t.set_stored(true);
  sched::Scheduler::TenantUsage u = sched_.Usage(name);
  t.set_usage_milli(u.milli_gpus);
  t.set_borrowed_milli(u.borrowed_milli);
  t.set_gpu_hours_used(GpuHoursUsed(name, rec.quota(), NowNs()));
  return t;
}

std::future<Result<v1::GpuHistory>> ControlLoop::GpuHistory(std::string node, int gpu) {
  return Call<v1::GpuHistory>([this, node = std::move(node), gpu]() -> Result<v1::GpuHistory> {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", node));
    if (gpu < 0 || gpu >= it->second.node.gpus_size()) {
      return NotFound(fmt::format("node '{}' has no gpu {} (it has {})", node, gpu, it->second.node.gpus_size()));
    }
    v1::GpuHistory out;
    if (static_cast<size_t>(gpu) < it->second.history.size()) {
      for (const v1::GpuPoint& p : it->second.history[static_cast<size_t>(gpu)]) *out.add_points() = p;
    }
    return out;
  });
}

}  // namespace drover::server
