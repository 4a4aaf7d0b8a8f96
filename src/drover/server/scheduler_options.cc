#include "drover/server/scheduler_options.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "drover/sched/model.h"

namespace drover::server {
namespace {

Status Named(std::string_view key, std::string_view flag, const Status& s) {
  return Status(s.code(), fmt::format("scheduler.{} (--{}): {}", key, flag, s.message()));
}

}  // namespace

Result<ControlLoopOptions> MakeControlLoopOptions(const SchedulerFlags& f) {
  ControlLoopOptions o;
  sched::Config& c = o.scheduler;
  if (!f.queue_policy.empty()) {
    auto q = sched::ParseQueuePolicy(f.queue_policy);
    if (!q.ok()) return Named("queue", "queue-policy", q.status());
    c.queue = *q;
  }
  if (!f.placement_policy.empty()) {
    auto p = sched::ParsePlacementPolicy(f.placement_policy);
    if (!p.ok()) return Named("placement", "placement-policy", p.status());
    c.placement = *p;
  }
  if (!f.backfill.empty()) {
    auto b = ParseBool(f.backfill);
    if (!b.ok()) return Named("backfill", "backfill", b.status());
    c.backfill = *b;
  }
  if (!f.preemption.empty()) {
    auto b = ParseBool(f.preemption);
    if (!b.ok()) return Named("preemption", "preemption", b.status());
    c.preemption = *b;
  }
  if (!f.aging.empty()) {
    auto d = ParseDurationMs(f.aging);
    if (!d.ok()) return Named("aging", "aging", d.status());
    c.aging_ms = *d;
  }
  if (!f.preemption_grace.empty()) {
    auto d = ParseDurationMs(f.preemption_grace);
    if (!d.ok()) return Named("preemption-grace", "preemption-grace", d.status());
    if (*d > int64_t{3600} * 1000) {
      return Named("preemption-grace", "preemption-grace",
                   InvalidArgument(fmt::format("'{}' is longer than 1h", f.preemption_grace)));
    }
    c.preemption_grace_ms = *d;
  }
  if (!f.las_thresholds.empty()) {
    auto t = sched::ParseLasThresholds(f.las_thresholds);
    if (!t.ok()) return Named("las-thresholds", "las-thresholds", t.status());
    c.las_thresholds = *t;
  }
  if (!f.las_starvation.empty()) {
    auto k = sched::ParseStarvationFactor(f.las_starvation);
    if (!k.ok()) return Named("las-starvation", "las-starvation", k.status());
    c.las_starvation_factor = *k;
  }
  auto count = [](const std::string& text, std::string_view flag, int64_t fallback, int64_t max) -> Result<int64_t> {
    if (text.empty()) return fallback;
    int64_t v = -1;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > max) {
      return InvalidArgument(
          fmt::format("--{}: '{}' is not a count from 0 to {} (0: none)", flag, text.substr(0, 32), max));
    }
    return v;
  };
  TenantDefaults& d = o.tenant_defaults;
  DROVER_ASSIGN_OR_RETURN(d.max_pending_jobs, count(f.default_max_pending_jobs, "default-max-pending-jobs",
                                                    kDefaultMaxPendingJobs, std::numeric_limits<int32_t>::max()));
  DROVER_ASSIGN_OR_RETURN(d.max_array_tasks, count(f.default_max_array_tasks, "default-max-array-tasks",
                                                   kDefaultMaxArrayTasks, kMaxArrayTasks));
  DROVER_ASSIGN_OR_RETURN(std::vector<TenantConfig> tenants, ParseTenants(f.tenants));
  for (TenantConfig& t : tenants) {
    sched::TenantInfo info;
    info.name = std::move(t.name);
    info.weight = t.weight;
    info.guaranteed_gpus = std::move(t.guaranteed);
    info.borrow_limit = t.borrow_limit;
    o.tenants.push_back(std::move(info));
  }
  return o;
}

}  // namespace drover::server
