#include "drover/server/cluster_metrics.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "drover/rpc/convert.h"
#include "drover/rpc/gpu_metrics.h"
#include "drover/server/control_loop.h"
#include "drover/server/tenant_book.h"

namespace drover::server {
namespace {

constexpr double kNsPerSecond = 1e9;

const char* NodeStateLabel(v1::NodeState s) {
  switch (s) {
    case v1::NODE_STATE_READY: return "Ready";
    case v1::NODE_STATE_SUSPECT: return "Suspect";
    case v1::NODE_STATE_LOST: return "Lost";
    default: return "NotReady";
  }
}

void WriteLoopStats(const LoopStats& s, metrics::Exposition& out) {
  auto jobs = out.Gauge("drover_jobs", "Jobs by state.");
  for (const auto& [state, n] : s.jobs) jobs.Add({{"state", rpc::JobStateDisplay(state)}}, static_cast<double>(n));
  out.Gauge("drover_scheduler_queue_depth", "Jobs waiting to be placed.").Add({}, static_cast<double>(s.queue_depth));
  out.Gauge("drover_nodes", "Registered nodes by state.")
      .Add({{"state", "Ready"}}, static_cast<double>(s.nodes_ready))
      .Add({{"state", "NotReady"}}, static_cast<double>(s.nodes_not_ready - s.nodes_lost))
      .Add({{"state", "Lost"}}, static_cast<double>(s.nodes_lost));
  out.Counter("drover_lease_renewals_total",
              "Node lease renewals: by the node's own heartbeat (session) or by a peer that heard it (gossip).")
      .Add({{"via", "session"}}, static_cast<double>(s.renewals_direct))
      .Add({{"via", "peers"}}, static_cast<double>(s.renewals_via_peers));
  out.Counter("drover_node_losses_total", "Nodes declared Lost (their jobs queued again).")
      .Add({}, static_cast<double>(s.node_losses));
  out.Counter("drover_scheduler_batches_total",
              "Batches of the control loop: with a scheduling pass, or without one (nothing it reads had changed).")
      .Add({{"pass", "run"}}, static_cast<double>(s.passes_run))
      .Add({{"pass", "skipped"}}, static_cast<double>(s.passes_skipped));
  out.Gauge("drover_gpus", "GPUs of registered nodes by health.")
      .Add({{"health", "Healthy"}}, static_cast<double>(s.gpus_healthy))
      .Add({{"health", "Unhealthy"}}, static_cast<double>(s.gpus_unhealthy));
}

}  // namespace

void WriteNodeMetrics(const std::vector<v1::Node>& nodes, metrics::Exposition& out) {
  auto state =
      out.Gauge("drover_node_state", "Each registered node's state: 1 for the state it is in, 0 for the others.");
  auto drained = out.Gauge("drover_node_drained", "Whether the node is drained (keeps its jobs, takes no new ones).");
  for (const v1::Node& n : nodes) {
    const std::string now = NodeStateLabel(n.state());
    for (const char* s : {"Ready", "NotReady", "Suspect", "Lost"}) {
      state.Add({{"node", n.name()}, {"state", s}}, now == s ? 1 : 0);
    }
    drained.Add({{"node", n.name()}}, n.drained() ? 1 : 0);
  }
  for (const v1::Node& n : nodes) {
    if (n.state() != v1::NODE_STATE_READY) continue;
    for (const v1::Gpu& g : n.gpus()) rpc::WriteGpuMetrics(n.name(), g, out);
  }
}

void WriteTenantMetrics(const v1::ListTenantsResponse& tenants, int64_t now_unix_nanos, metrics::Exposition& out) {
  auto held =
      out.Gauge("drover_tenant_gpus_allocated", "GPUs the tenant's jobs hold now (a share counts its fraction).");
  auto quota = out.Gauge("drover_tenant_gpu_quota", "The tenant's quota of GPUs held at once, every model together.");
  auto pending = out.Gauge("drover_tenant_pending_jobs", "The tenant's jobs waiting to be placed.");
  auto max_pending = out.Gauge("drover_tenant_max_pending_jobs", "The tenant's limit of jobs waiting at once.");
  // GPU-seconds (Prometheus's base unit; the quota is set in GPU-hours).
  auto used = out.Gauge("drover_tenant_gpu_seconds_used", "GPU-seconds the tenant used in its current budget period.");
  auto budget =
      out.Gauge("drover_tenant_gpu_seconds_budget", "The tenant's GPU-hour budget per period, in GPU-seconds.");
  auto period_end = out.Gauge("drover_tenant_budget_period_end_timestamp_seconds",
                              "When the tenant's current budget period ends (unix seconds).");
  for (const v1::TenantStatus& t : tenants.tenants()) {
    const metrics::Labels l = {{"tenant", t.name()}};
    const v1::TenantQuota& q = t.quota();
    held.Add(l, static_cast<double>(t.usage_milli()) / 1000.0);
    pending.Add(l, static_cast<double>(t.pending_jobs()));
    used.Add(l, t.gpu_hours_used() * 3600);
    if (auto all = q.max_gpus().find("*"); all != q.max_gpus().end() && all->second > 0) quota.Add(l, all->second);
    if (q.max_pending_jobs() > 0) max_pending.Add(l, q.max_pending_jobs());
    if (q.gpu_hours() > 0) {
      budget.Add(l, q.gpu_hours() * 3600);
      period_end.Add(l, static_cast<double>(TenantBook::PeriodEnd(q, now_unix_nanos)) / kNsPerSecond);
    }
  }
}

void WritePendingJobMetrics(const std::vector<v1::Job>& pending, int64_t now_unix_nanos, metrics::Exposition& out) {
  struct Oldest {
    int64_t count = 0;
    int64_t submit_ns = 0;
    std::string job_id;
  };
  std::map<std::pair<std::string, std::string>, Oldest> by_class;
  for (const v1::Job& j : pending) {
    if (j.status().state() != v1::JOB_STATE_PENDING) continue;
    const std::string& cls = j.status().wait_class().empty() ? "new" : j.status().wait_class();
    Oldest& o = by_class[{j.spec().tenant(), cls}];
    ++o.count;
    const int64_t at = j.status().submit_time_unix_nanos();
    if (o.job_id.empty() || at < o.submit_ns) {
      o.submit_ns = at;
      o.job_id = j.id();
    }
  }
  auto count = out.Gauge("drover_jobs_pending", "Jobs waiting to be placed, by tenant and why they wait.");
  auto oldest = out.Gauge("drover_jobs_pending_oldest_seconds",
                          "How long the tenant's oldest job waiting for this reason has waited; job_id names it.");
  for (const auto& [key, o] : by_class) {
    count.Add({{"tenant", key.first}, {"reason", key.second}}, static_cast<double>(o.count));
    const double age = o.submit_ns > 0 ? static_cast<double>(now_unix_nanos - o.submit_ns) / kNsPerSecond : 0;
    oldest.Add({{"tenant", key.first}, {"reason", key.second}, {"job_id", o.job_id}}, std::max(age, 0.0));
  }
}

void WriteServerMetrics(const ServerFacts& facts, metrics::Exposition& out) {
  out.Gauge("drover_leader_epoch",
            "The epoch of this server's leadership (etcd store); a new leader has a higher one. 0: a single server.")
      .Add({}, static_cast<double>(facts.leader_epoch));
  auto expiry = out.Gauge("drover_certificate_expiry_timestamp_seconds",
                          "When a certificate this server serves with expires (unix seconds).");
  for (const auto& [name, not_after] : facts.certificate_not_after_unix) {
    expiry.Add({{"certificate", name}}, static_cast<double>(not_after));
  }
}

void CollectCluster(ControlLoop* loop, const ServerFacts& facts, metrics::Exposition& out) {
  WriteServerMetrics(facts, out);
  auto stats = loop->Stats();
  auto nodes = loop->ListNodes();
  auto tenants = loop->ListTenants();
  v1::ListJobsRequest waiting;
  constexpr v1::JobState kPending = v1::JOB_STATE_PENDING;  // a filter, not a job's state
  waiting.set_state(kPending);
  auto pending = loop->ListJobs(waiting);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  if (stats.wait_until(deadline) != std::future_status::ready ||
      nodes.wait_until(deadline) != std::future_status::ready ||
      tenants.wait_until(deadline) != std::future_status::ready ||
      pending.wait_until(deadline) != std::future_status::ready) {
    return;  // the loop is busy; this scrape goes without
  }
  const int64_t now = ToUnixNanos(SystemClock::Get()->Now());
  if (auto s = stats.get(); s.ok()) WriteLoopStats(*s, out);
  if (auto ns = nodes.get(); ns.ok()) WriteNodeMetrics(*ns, out);
  if (auto ts = tenants.get(); ts.ok()) WriteTenantMetrics(*ts, now, out);
  if (auto js = pending.get(); js.ok()) WritePendingJobMetrics(*js, now, out);
}

}  // namespace drover::server
