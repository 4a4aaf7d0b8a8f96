// The tenant book (tenant_book.h): tenants as data, records in the store (/tenants/<name>) that override the
// config file's tenants: section, changed at run time; admission quotas
// (pending jobs, GPUs per user, a GPU-hour budget per period) checked at
// submission; the runtime limit enforced by a once-a-second check. The
// GPU and GPU-memory caps are the scheduler's (sched::TenantInfo): a job
// that would cross one waits, with the reason.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "drover/auth/authority.h"
#include "drover/common/ids.h"
#include "drover/rpc/container.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"
#include "drover/server/tenant_book.h"

namespace drover::server {
namespace {

constexpr std::string_view kTenantsPrefix = "/tenants/";
constexpr int64_t kNsPerSecond = 1'000'000'000;
constexpr int64_t kDefaultPeriodSeconds = 30LL * 24 * 3600;
constexpr int kMaxQuotaEntries = 64;

int64_t PeriodNs(const v1::TenantQuota& q) {
  return (q.period_seconds() > 0 ? q.period_seconds() : kDefaultPeriodSeconds) * kNsPerSecond;
}

}  // namespace

Result<sched::TenantInfo> TenantBook::ToInfo(const v1::Tenant& t) {
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", t.name()));
  if (t.weight() < 0 || t.weight() > 1e6 || std::isnan(t.weight())) {
    return InvalidArgument(fmt::format("tenant '{}': weight {} is outside (0, 1e6]", t.name(), t.weight()));
  }
  if (t.borrow_limit() < -1)
    return InvalidArgument(fmt::format("tenant '{}': borrow limit {} (use -1 for none)", t.name(), t.borrow_limit()));
  const v1::TenantQuota& q = t.quota();
  if (t.guaranteed_gpus_size() > kMaxQuotaEntries || q.max_gpus_size() > kMaxQuotaEntries) {
    return InvalidArgument(fmt::format("tenant '{}': at most {} models per map", t.name(), kMaxQuotaEntries));
  }
  auto check_models = [&](const auto& map, const char* what) -> Status {
    for (const auto& [model, n] : map) {
      if (model.empty() || model.size() > 128)
        return InvalidArgument(fmt::format("tenant '{}': {} has a bad model name", t.name(), what));
      if (n < 0 || n > 1'000'000)
        return InvalidArgument(
            fmt::format("tenant '{}': {} '{}' = {} is outside 0..1000000", t.name(), what, model, n));
    }
    return Status::Ok();
  };
  DROVER_RETURN_IF_ERROR(check_models(t.guaranteed_gpus(), "guarantee"));
  DROVER_RETURN_IF_ERROR(check_models(q.max_gpus(), "max-gpus"));
  // -1 is "no limit" for the two the server gives a default (0 takes it).
  if (q.max_pending_jobs() < -1 || q.max_array_tasks() < -1 || q.max_array_tasks() > kMaxArrayTasks) {
    return InvalidArgument(fmt::format(
        "tenant '{}': max_pending_jobs and max_array_tasks are -1 (no limit), 0 (the server's default) or a "
        "limit (max_array_tasks at most {})",
        t.name(), kMaxArrayTasks));
  }
  if (q.max_gpu_memory_bytes() < 0 || q.max_runtime_seconds() < 0 || q.max_gpus_per_user() < 0 ||
      q.max_cpu_millis() < 0 || q.period_seconds() < 0 || !(q.gpu_hours() >= 0) || std::isinf(q.gpu_hours())) {
    return InvalidArgument(fmt::format("tenant '{}': quotas must not be negative", t.name()));
  }
  if (q.requests_per_minute() < 0 || q.requests_per_minute() > auth::kMaxPerMinute || q.tokens_per_minute() < 0 ||
      q.tokens_per_minute() > auth::kMaxPerMinute) {
    return InvalidArgument(
        fmt::format("tenant '{}': requests_per_minute and tokens_per_minute must be 0..{} (0: no "
                    "limit)",
                    t.name(), auth::kMaxPerMinute));
  }
  if (t.mount_roots_size() > rpc::kMaxMountRoots) {
    return InvalidArgument(
        fmt::format("tenant '{}': {} mount roots, more than {}", t.name(), t.mount_roots_size(), rpc::kMaxMountRoots));
  }
  for (const std::string& root : t.mount_roots()) DROVER_RETURN_IF_ERROR(rpc::ValidateMountRoot(t.name(), root));
  sched::TenantInfo info;
  info.name = t.name();
  info.weight = t.weight() > 0 ? t.weight() : 1.0;
  info.guaranteed_gpus = {t.guaranteed_gpus().begin(), t.guaranteed_gpus().end()};
  info.borrow_limit = t.borrow_limit();
  info.max_gpus = {q.max_gpus().begin(), q.max_gpus().end()};
  info.max_gpu_memory_bytes = q.max_gpu_memory_bytes() > 0 ? q.max_gpu_memory_bytes() : -1;
  info.max_cpu_milli = q.max_cpu_millis() > 0 ? q.max_cpu_millis() : -1;
  return info;
}

Result<TenantBook::Map> TenantBook::Load(store::Store* store, sched::Scheduler* sched) {
  Map out;
  DROVER_ASSIGN_OR_RETURN(store::RangeResult range, store->Range(std::string(kTenantsPrefix)));
  for (const store::KeyValue& kv : range.kvs) {
    v1::Tenant t;
    if (!t.ParseFromString(kv.value) || kv.key != std::string(kTenantsPrefix) + t.name()) {
      spdlog::error("skipping unreadable tenant record '{}'", kv.key);
      continue;
    }
    auto info = ToInfo(t);
    if (!info.ok()) {
      spdlog::error("skipping tenant record '{}': {}", kv.key, info.status().message());
      continue;
    }
    DROVER_RETURN_IF_ERROR(sched->SetTenant(*info));
    out[t.name()] = std::move(t);
  }
  return out;
}

double TenantBook::GpuHoursUsed(const std::string& tenant, const v1::TenantQuota& q, int64_t now) const {
  double gpu_ns = 0;
  for (const auto& [seq, job] : *jobs_) {
    if (job.spec().tenant() == tenant) gpu_ns += GpuNsInPeriod(job, q, now);
  }
  return GpuHours(gpu_ns);
}

double TenantBook::GpuHours(double gpu_ns) { return gpu_ns / (3600.0 * kNsPerSecond); }

int64_t TenantBook::PeriodEnd(const v1::TenantQuota& q, int64_t now) {
  const int64_t period = PeriodNs(q);
  return now - now % period + period;
}

double TenantBook::GpuNsInPeriod(const v1::Job& job, const v1::TenantQuota& q, int64_t now) {
  int64_t period = PeriodNs(q);
  int64_t start = now - now % period;
  const v1::JobStatus& st = job.status();
  int64_t began = st.start_time_unix_nanos() > 0 ? st.start_time_unix_nanos() : st.bind_time_unix_nanos();
  if (began <= 0) return 0;
  int64_t ended = st.end_time_unix_nanos() > 0 ? st.end_time_unix_nanos() : (rpc::HoldsGpus(st.state()) ? now : 0);
  if (ended <= start) return 0;
  double gpus = job.spec().gpu_milli() > 0 ? job.spec().gpu_milli() / 1000.0 : job.spec().gpus();
  gpus *= std::max(1, job.spec().replicas());
  return gpus * static_cast<double>(ended - std::max(began, start));
}

namespace {

// A quota's own value, else the default: > 0 a limit, -1 none, 0 the default.
int64_t Effective(int64_t own, int64_t fallback) { return own > 0 ? own : own < 0 ? 0 : fallback; }

}  // namespace

int64_t TenantBook::MaxPendingJobs(const std::string& tenant) const {
  auto it = stored_.find(tenant);
  return Effective(it == stored_.end() ? 0 : it->second.quota().max_pending_jobs(), defaults_->max_pending_jobs);
}

int64_t TenantBook::MaxArrayTasks(const std::string& tenant) const {
  auto it = stored_.find(tenant);
  return Effective(it == stored_.end() ? 0 : it->second.quota().max_array_tasks(), defaults_->max_array_tasks);
}

int64_t TenantBook::PendingOf(const std::string& tenant) const {
  int64_t pending = 0;
  for (const auto& [seq, job] : *jobs_) {
    if (job.status().state() == v1::JOB_STATE_PENDING && job.spec().tenant() == tenant) ++pending;
  }
  return pending;
}

Status TenantBook::Admit(const v1::JobSpec& spec, int64_t count) const {
  const std::string& name = spec.tenant();
  auto it = stored_.find(name);
  const bool stored = it != stored_.end();
  // Where a refused caller learns how to go on.
  auto raise = [&](std::string_view flag, std::string_view field) {
    return stored && (field == "max_array_tasks" ? it->second.quota().max_array_tasks()
                                                 : it->second.quota().max_pending_jobs()) > 0
               ? fmt::format("tenant '{}''s quota {}", name, field)
               : fmt::format(
                     "the server's default (--{}); an admin raises it for the tenant with `drover tenants "
                     "set {} --{}`",
                     flag, name, field == "max_array_tasks" ? "max-array-tasks" : "max-pending");
  };
  if (int64_t max_array = MaxArrayTasks(name); max_array > 0 && count > max_array) {
    return ResourceExhausted(
        fmt::format("{} jobs in one submit for tenant '{}' is over its limit of {} per array or "
                    "batch, set by {}",
                    count, name, max_array, raise("default-max-array-tasks", "max_array_tasks")));
  }
  // Every pending job of the cluster (the scheduler's queue, the array
  // tasks held back and the jobs waiting for others) bounds the tenant's: only when that could pass the
  // limit are the jobs counted (a submit costs no scan of the table while
  // the cluster is far from it).
  if (int64_t max_pending = MaxPendingJobs(name); max_pending > 0) {
    const int64_t everyone = static_cast<int64_t>(sched_->pending() + jobs_->held().size() + jobs_->waiting().size());
    if (everyone + count > max_pending) {
      int64_t pending = PendingOf(name);
      if (pending + count > max_pending) {
        return ResourceExhausted(
            fmt::format("tenant '{}' has {} pending jobs; {} more would pass its limit of {}, set by {}", name, pending,
                        count, max_pending, raise("default-max-pending-jobs", "max_pending_jobs")));
      }
    }
  }
  if (!stored) return Status::Ok();
  const v1::TenantQuota& q = it->second.quota();
  int64_t now = NowNs();
  if (q.max_gpus_per_user() > 0) {
    double user_gpus = 0;
    for (const auto& [seq, job] : *jobs_) {
      if (job.spec().tenant() != name || rpc::IsTerminal(job.status().state())) continue;
      if (job.spec().owner() == spec.owner()) {
        double g = job.spec().gpu_milli() > 0 ? job.spec().gpu_milli() / 1000.0 : job.spec().gpus();
        user_gpus += g * std::max(1, job.spec().replicas());
      }
    }
    double want =
        (spec.gpu_milli() > 0 ? spec.gpu_milli() / 1000.0 : spec.gpus()) * std::max(1, spec.replicas()) * count;
    if (user_gpus + want > q.max_gpus_per_user() + 1e-9) {
      return ResourceExhausted(
          fmt::format("user '{}' of tenant '{}' holds or queues {:g} GPUs; {:g} more would pass its "
                      "limit of {}",
                      spec.owner(), name, user_gpus, want, q.max_gpus_per_user()));
    }
  }
  if (q.gpu_hours() > 0) {
    double used = GpuHoursUsed(name, q, now);
    if (used >= q.gpu_hours()) {
      int64_t period = PeriodNs(q);
      return ResourceExhausted(
          fmt::format("tenant '{}' has spent its budget of {:g} GPU-hours for this period ({:.3f} "
                      "used); new jobs are refused until the period ends in {}s",
                      name, q.gpu_hours(), used, (period - now % period) / kNsPerSecond));
    }
  }
  return Status::Ok();
}

Status TenantBook::CheckMounts(const std::string& tenant, const v1::ContainerSpec& container) const {
  if (container.mounts().empty()) return Status::Ok();
  auto it = stored_.find(tenant);
  for (const v1::Mount& m : container.mounts()) {
    const bool allowed =
        it != stored_.end() && std::any_of(it->second.mount_roots().begin(), it->second.mount_roots().end(),
                                           [&](const std::string& root) { return rpc::PathUnder(m.source(), root); });
    if (allowed) continue;
    const bool none = it == stored_.end() || it->second.mount_roots().empty();
    return PermissionDenied(fmt::format(
        "mount '{}' (to '{}') is not under a mount root of tenant '{}' ({}); an admin allows a directory with "
        "`drover tenants set {} --mount-root DIR`",
        m.source(), m.target(), tenant,
        none ? std::string("it has none") : fmt::format("its roots: {}", fmt::join(it->second.mount_roots(), ", ")),
        tenant));
  }
  return Status::Ok();
}

Result<v1::TenantStatus> TenantBook::Set(const v1::Tenant& tenant, bool create) {
  DROVER_ASSIGN_OR_RETURN(sched::TenantInfo info, ToInfo(tenant));
  bool exists = stored_.count(tenant.name()) != 0 ||
                std::any_of(configured_->begin(), configured_->end(),
                            [&](const sched::TenantInfo& t) { return t.name == tenant.name(); });
  if (create && exists) return AlreadyExists(fmt::format("tenant '{}' already exists", tenant.name()));
  if (!create && !exists) return NotFound(fmt::format("tenant '{}' not found", tenant.name()));
  DROVER_RETURN_IF_ERROR(sched_->SetTenant(info));
  stored_[tenant.name()] = tenant;
  batch_->Put(std::string(kTenantsPrefix) + tenant.name(), tenant.SerializeAsString());
  return StatusOf(tenant.name());
}

Status TenantBook::Delete(const std::string& name) {
  if (stored_.count(name) == 0) {
    return NotFound(fmt::format("tenant '{}' not found (or only configured in the config file)", name));
  }
  for (const auto& [seq, job] : *jobs_) {
    if (job.spec().tenant() == name && !rpc::IsTerminal(job.status().state())) {
      return FailedPrecondition(
          fmt::format("tenant '{}' has unfinished jobs ({} is one); cancel them first", name, job.id()));
    }
  }
  sched::TenantInfo fallback;
  fallback.name = name;
  for (const sched::TenantInfo& t : *configured_) {
    if (t.name == name) fallback = t;
  }
  DROVER_RETURN_IF_ERROR(sched_->SetTenant(fallback));
  stored_.erase(name);
  batch_->Delete(std::string(kTenantsPrefix) + name);
  return Status::Ok();
}

v1::TenantStatus TenantBook::StatusOf(const std::string& name) const {
  v1::TenantStatus t;
  t.set_name(name);
  auto stored = stored_.find(name);
  if (stored == stored_.end()) return t;
  const v1::Tenant& rec = stored->second;
  t.set_weight(rec.weight() > 0 ? rec.weight() : 1.0);
  *t.mutable_guaranteed_gpus() = rec.guaranteed_gpus();
  t.set_borrow_limit(rec.borrow_limit());
  *t.mutable_quota() = rec.quota();
  *t.mutable_mount_roots() = rec.mount_roots();
  t.set_stored(true);
  sched::Scheduler::TenantUsage u = sched_->Usage(name);
  t.set_usage_milli(u.milli_gpus);
  t.set_borrowed_milli(u.borrowed_milli);
  t.set_gpu_hours_used(GpuHoursUsed(name, rec.quota(), NowNs()));
  return t;
}

int64_t TenantBook::RuntimeLimitOf(const std::string& tenant) const {
  auto t = stored_.find(tenant);
  return t == stored_.end() ? 0 : t->second.quota().max_runtime_seconds();
}

bool TenantBook::AnyRuntimeLimit() const {
  return std::any_of(stored_.begin(), stored_.end(),
                     [](const auto& t) { return t.second.quota().max_runtime_seconds() > 0; });
}

v1::TenantQuota TenantBook::QuotaOf(const std::string& tenant) const {
  auto it = stored_.find(tenant);
  return it == stored_.end() ? v1::TenantQuota() : it->second.quota();
}

}  // namespace drover::server
