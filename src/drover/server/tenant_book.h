#pragma once
// TenantBook: the tenants as data. It owns the stored tenants (records under
// /tenants/<name> that override the configuration's tenants: section,
// changed at run time), tells the scheduler their weights, guarantees and
// caps, and checks their admission quotas (pending jobs, GPUs per user, a
// GPU-hour budget per period) at submission. The GPU and GPU-memory caps
// are the scheduler's (sched::TenantInfo): a job that would cross one
// waits, with the reason. The runtime limit is enforced through the job
// lifecycle (ControlLoop::EnforceRuntimeLimits).
//
// Not thread-safe: owned by the control loop, on its thread.

#include <map>
#include <string>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/sched/scheduler.h"
#include "drover/server/batch.h"
#include "drover/server/job_table.h"
#include "drover/store/store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// The admission quotas of a tenant whose record sets none (a tenant's
// max_pending_jobs or max_array_tasks of 0), so that a new tenant is
// bounded before an admin thinks of it; 0 here: no limit. The server's
// flags set them (scheduler_options.cc: 10000 pending jobs, 1001 tasks per
// submit, as Slurm's MaxJobCount and MaxArraySize); a loop built without
// them (tests, the simulator) has none.
struct TenantDefaults {
  int64_t max_pending_jobs = 0;
  int64_t max_array_tasks = 0;
};
inline constexpr int64_t kDefaultMaxPendingJobs = 10'000;
inline constexpr int64_t kDefaultMaxArrayTasks = 1'001;

class TenantBook {
 public:
  using Map = std::map<std::string, v1::Tenant>;  // stored tenants, by name

  TenantBook(const std::vector<sched::TenantInfo>* configured, const TenantDefaults* defaults, sched::Scheduler* sched,
             Batch* batch, const JobTable* jobs, Clock* clock)
      : configured_(configured), defaults_(defaults), sched_(sched), batch_(batch), jobs_(jobs), clock_(clock) {}

  // A stored tenant as the scheduler takes it; kInvalidArgument for a bad one.
  static Result<sched::TenantInfo> ToInfo(const v1::Tenant& t);
  // The stored tenants of `store`, set in `sched` (a fresh scheduler).
  static Result<Map> Load(store::Store* store, sched::Scheduler* sched);
  void Replace(Map stored) { stored_ = std::move(stored); }
  const Map& stored() const { return stored_; }

  // kResourceExhausted when `count` more jobs like `spec`, in one submit,
  // would pass an admission quota of its tenant (its own, or the defaults).
  Status Admit(const v1::JobSpec& spec, int64_t count = 1) const;
  // kPermissionDenied, naming the mount and the tenant, when a mount of
  // `container` is not under one of `tenant`'s mount roots (a tenant only
  // configured, or stored without roots, has none: no mounts at all).
  Status CheckMounts(const std::string& tenant, const v1::ContainerSpec& container) const;
  // The limits that apply to `tenant`: its quota's, else the defaults'
  // (0: none).
  int64_t MaxPendingJobs(const std::string& tenant) const;
  int64_t MaxArrayTasks(const std::string& tenant) const;
  // A tenant's runtime limit in seconds (0: none), and whether any has one.
  int64_t RuntimeLimitOf(const std::string& tenant) const;
  bool AnyRuntimeLimit() const;
  // The stored quota of a tenant (empty for one only configured or unknown).
  v1::TenantQuota QuotaOf(const std::string& tenant) const;

  // Stores `tenant` (kAlreadyExists with `create` when it exists, kNotFound
  // without it when it does not) and tells the scheduler.
  Result<v1::TenantStatus> Set(const v1::Tenant& tenant, bool create);
  // Forgets a stored tenant without unfinished jobs; its configured
  // settings, if any, apply again.
  Status Delete(const std::string& name);
  v1::TenantStatus StatusOf(const std::string& name) const;

  double GpuHoursUsed(const std::string& tenant, const v1::TenantQuota& q, int64_t now) const;
  // GPU-nanoseconds `job` used in the quota's period that holds `now`.
  static double GpuNsInPeriod(const v1::Job& job, const v1::TenantQuota& q, int64_t now);
  static double GpuHours(double gpu_ns);
  // When the quota's budget period that holds `now` ends (unix nanoseconds).
  static int64_t PeriodEnd(const v1::TenantQuota& q, int64_t now);

 private:
  int64_t NowNs() const { return ToUnixNanos(clock_->Now()); }

  // Pending jobs of `tenant` (a scan of the live jobs).
  int64_t PendingOf(const std::string& tenant) const;

  const std::vector<sched::TenantInfo>* configured_;
  const TenantDefaults* defaults_;
  sched::Scheduler* sched_;
  Batch* batch_;
  const JobTable* jobs_;
  Clock* clock_;
  Map stored_;
};

}  // namespace drover::server
