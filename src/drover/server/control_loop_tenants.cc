// The tenant commands of the control loop; the tenants are the tenant
// book's (tenant_book.h). The runtime limit is checked every second.

#include <fmt/format.h>

#include "drover/server/control_loop.h"

namespace drover::server {

void ControlLoop::EnforceRuntimeLimits() {
  // Jobs with a time limit of their own are checked whatever their tenant.
  if (!tenants_.AnyRuntimeLimit() && !lifecycle_.table().AnyTimeLimit()) return;
  lifecycle_.EnforceRuntimeLimits([this](const std::string& tenant) { return tenants_.RuntimeLimitOf(tenant); },
                                  NowNs());
}

std::future<Result<Done>> ControlLoop::CheckLimits() {
  return Call<Done>([this]() -> Result<Done> {
    EnforceRuntimeLimits();
    return Done{};
  });
}

void ControlLoop::ScheduleLimitChecks() {
  loop_.PostAfter(std::chrono::seconds(1), [this] {
    if (EnsureRecovered().ok()) EnforceRuntimeLimits();
    ScheduleLimitChecks();
  });
}

std::future<Result<v1::TenantStatus>> ControlLoop::SetTenant(v1::Tenant tenant, bool create) {
  return Call<v1::TenantStatus>([this, tenant = std::move(tenant), create]() -> Result<v1::TenantStatus> {
    DROVER_ASSIGN_OR_RETURN(v1::TenantStatus status, tenants_.Set(tenant, create));
    tenants_changed_ = true;
    return status;
  });
}

std::future<Result<Done>> ControlLoop::DeleteTenant(std::string name) {
  return Call<Done>([this, name = std::move(name)]() -> Result<Done> {
    DROVER_RETURN_IF_ERROR(tenants_.Delete(name));
    tenants_changed_ = true;
    return Done{};
  });
}

std::future<Result<v1::TenantQuota>> ControlLoop::TenantQuotaOf(std::string tenant) {
  return Call<v1::TenantQuota>(
      [this, tenant = std::move(tenant)]() -> Result<v1::TenantQuota> { return tenants_.QuotaOf(tenant); });
}

}  // namespace drover::server
