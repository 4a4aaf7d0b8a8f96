// ApiService's deployment calls (docs/deployments.md): the caller's role
// and tenant are checked here, the spec is normalized here, and the
// control loop keeps the replicas.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/api_service.h"
#include "drover/server/deployments.h"

namespace drover::server {
namespace {

constexpr auto kTimeout = std::chrono::seconds(30);

template <typename T>
Result<T> Wait(std::future<Result<T>> f) {
  if (f.wait_for(kTimeout) != std::future_status::ready) return Unavailable("the control loop did not answer in time");
  return f.get();
}

constexpr int kMaxLoadModels = 1000;
constexpr int kMaxLoadReplicas = 1024;
constexpr int64_t kMaxLoadCount = 1'000'000'000;
constexpr int kMaxUsageRows = 10'000;
constexpr int64_t kMaxUsageCount = int64_t{1} << 53;  // exact in a JSON number
constexpr double kMaxLatencyMs = 1e9;
constexpr size_t kMaxUsageGateways = 256;

Status ValidateLoadReport(const v1::ReportLoadRequest& req) {
  const std::string& g = req.gateway();
  if (g.empty() || g.size() > 128 || !std::all_of(g.begin(), g.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return InvalidArgument("gateway must be an id of 1-128 printable characters without spaces");
  }
  if (req.models_size() > kMaxLoadModels) {
    return InvalidArgument(
        fmt::format("a load report names at most {} models, not {}", kMaxLoadModels, req.models_size()));
  }
  for (const v1::ModelLoad& m : req.models()) {
    DROVER_RETURN_IF_ERROR(rpc::ValidateModelName("model", m.model()));
    if (!m.tenant().empty()) DROVER_RETURN_IF_ERROR(ValidateName("tenant", m.tenant()));
    for (int64_t v : {m.outstanding(), m.waiting(), m.requests()}) {
      if (v < 0 || v > kMaxLoadCount) {
        return InvalidArgument(fmt::format("model '{}': counts must be 0..{}", m.model(), kMaxLoadCount));
      }
    }
    if (m.engine_waiting() < -1 || m.engine_waiting() > kMaxLoadCount) {
      return InvalidArgument(fmt::format("model '{}': engine_waiting must be -1..{}", m.model(), kMaxLoadCount));
    }
    if (!std::isfinite(m.queue_ms()) || m.queue_ms() < -1 || m.queue_ms() > 1e9) {
      return InvalidArgument(fmt::format("model '{}': queue_ms must be -1 (not known) or 0..1e9", m.model()));
    }
    if (m.outstanding_by_replica_size() > kMaxLoadReplicas) {
      return InvalidArgument(fmt::format("model '{}': at most {} replicas", m.model(), kMaxLoadReplicas));
    }
    for (const auto& [replica, n] : m.outstanding_by_replica()) {
      DROVER_RETURN_IF_ERROR(ParseJobId(replica).status());
      if (n < 0 || n > kMaxLoadCount) {
        return InvalidArgument(fmt::format("model '{}': counts must be 0..{}", m.model(), kMaxLoadCount));
      }
    }
    if (m.routing_by_replica_size() > kMaxLoadReplicas) {
      return InvalidArgument(fmt::format("model '{}': at most {} replicas", m.model(), kMaxLoadReplicas));
    }
    for (const auto& [replica, r] : m.routing_by_replica()) {
      DROVER_RETURN_IF_ERROR(ParseJobId(replica).status());
      // Since the gateway started: blocks may pass kMaxLoadCount, never INT64_MAX / 2 (LoadOf sums them).
      if (r.prefix_blocks() < 0 || r.prefix_hit_blocks() < 0 || r.prefix_hit_blocks() > r.prefix_blocks() ||
          r.prefix_blocks() > INT64_MAX / 1024 || r.engine_load() < -1 || r.engine_load() > kMaxLoadCount) {
        return InvalidArgument(fmt::format(
            "model '{}': replica '{}': prefix blocks must be 0.., hit blocks at most those, engine_load -1..{}",
            m.model(), replica, kMaxLoadCount));
      }
    }
  }
  if (req.usage_size() > kMaxUsageRows) {
    return InvalidArgument(
        fmt::format("a load report carries at most {} usage rows, not {}", kMaxUsageRows, req.usage_size()));
  }
  for (const v1::GatewayUsage& u : req.usage()) {
    // Names as the gateway saw them (a tenant, a model a client asked for,
    // a token id): bounded and printable, not checked against what exists.
    for (const std::string* text : {&u.tenant(), &u.model(), &u.key()}) {
      if (text->size() > 256 ||
          !std::all_of(text->begin(), text->end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
        return InvalidArgument("usage rows name tenants, models and keys of at most 256 printable characters");
      }
    }
    for (int64_t v : {u.requests(), u.errors(), u.prompt_tokens(), u.completion_tokens()}) {
      if (v < 0 || v > kMaxUsageCount) {
        return InvalidArgument(fmt::format("usage of model '{}': counts must be 0..2^53", u.model().substr(0, 64)));
      }
    }
    for (double ms : {u.latency_p50_ms(), u.latency_p99_ms()}) {
      if (!std::isfinite(ms) || ms > kMaxLatencyMs) {
        return InvalidArgument(
            fmt::format("usage of model '{}': latencies must be finite, at most 1e9 ms", u.model().substr(0, 64)));
      }
    }
  }
  return Status::Ok();
}

// What only a gateway (or an admin) may call.
Status RequireGatewayOrAdmin(const auth::Principal& who, std::string_view what) {
  if (who.role == auth::Role::kGateway || who.IsAdmin()) return Status::Ok();
  return PermissionDenied(fmt::format("role {} may not {} (needs gateway or admin)", auth::RoleName(who.role), what));
}

// The tenant whose deployment `name` a request names: the caller's own
// unless an admin names another (`tenant`). A non-admin naming another
// tenant finds nothing.
Result<std::string> DeploymentTenant(const auth::Principal& who, const std::string& tenant, const std::string& name) {
  DROVER_RETURN_IF_ERROR(ValidateName("deployment name", name));
  if (tenant.empty() || tenant == who.tenant) return who.tenant;
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", tenant));
  // Not "permission denied": the answer must read as for a name nobody has.
  if (!who.IsAdmin()) return NotFound(fmt::format("deployment '{}' not found", name));
  return tenant;
}

}  // namespace

auth::Principal GatewayPrincipal() {
  auth::Principal p;
  p.name = "gateway";
  p.tenant = "default";
  p.role = auth::Role::kGateway;
  p.source = "in-process";
  return p;
}

Result<v1::Deployment> ApiService::ApplyDeployment(const auth::Principal& who, v1::ApplyDeploymentRequest req) {
  auto run = [&]() -> Result<v1::Deployment> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "apply deployments"));
    if (!req.has_spec()) return InvalidArgument("spec is missing");
    v1::DeploymentSpec* spec = req.mutable_spec();
    if (spec->tenant().empty()) {
      spec->set_tenant(who.tenant);
    } else if (spec->tenant() != who.tenant && !who.IsAdmin()) {
      return PermissionDenied(fmt::format("a token of tenant '{}' may not deploy for tenant '{}'", who.tenant,
                                          spec->tenant().substr(0, 63)));
    }
    spec->set_owner(who.name.empty() ? "drover" : who.name);
    DROVER_RETURN_IF_ERROR(NormalizeDeploymentSpec(spec, loop_->deployment_options()));
    // The name is looked up in spec->tenant() only (the caller's, or an
    // admin's choice): another tenant's deployment of the name is neither
    // "already exists" to a create nor found by a replace.
    return Wait(loop_->ApplyDeployment(std::move(*spec), req.replace()));
  };
  std::string target =
      fmt::format("{}/{}", (req.spec().tenant().empty() ? who.tenant : req.spec().tenant()).substr(0, 63),
                  req.spec().name().substr(0, 64));
  return Audited(who, "deployments.apply", target, run());
}

Result<v1::Deployment> ApiService::GetDeployment(const auth::Principal& who, const v1::GetDeploymentRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read deployments"));
  DROVER_ASSIGN_OR_RETURN(std::string tenant, DeploymentTenant(who, req.tenant(), req.name()));
  auto d = Wait(loop_->GetDeployment(tenant, req.name()));
  if (d.ok() && !who.CanSee(d->spec().tenant())) return NotFound(fmt::format("deployment '{}' not found", req.name()));
  return d;
}

Result<v1::ListDeploymentsResponse> ApiService::ListDeployments(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "list deployments"));
  DROVER_ASSIGN_OR_RETURN(std::vector<v1::Deployment> all, Wait(loop_->ListDeployments()));
  v1::ListDeploymentsResponse resp;
  for (v1::Deployment& d : all) {
    if (who.CanSee(d.spec().tenant())) *resp.add_deployments() = std::move(d);
  }
  return resp;
}

Result<v1::Deployment> ApiService::ScaleDeployment(const auth::Principal& who, const v1::ScaleDeploymentRequest& req) {
  auto run = [&]() -> Result<v1::Deployment> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "scale deployments"));
    if (req.replicas() < 0 || req.replicas() > kMaxDeploymentReplicas) {
      return InvalidArgument(fmt::format("replicas {} is outside 0..{}", req.replicas(), kMaxDeploymentReplicas));
    }
    DROVER_ASSIGN_OR_RETURN(std::string tenant, DeploymentTenant(who, req.tenant(), req.name()));
    if (!who.CanChange(tenant)) return NotFound(fmt::format("deployment '{}' not found", req.name()));
    return Wait(loop_->ScaleDeployment(tenant, req.name(), req.replicas()));
  };
  const std::string& tenant = req.tenant().empty() ? who.tenant : req.tenant();
  return Audited(who, "deployments.scale",
                 fmt::format("{}/{} {}", tenant.substr(0, 63), req.name().substr(0, 64), req.replicas()), run());
}

Result<v1::Deployment> ApiService::DeleteDeployment(const auth::Principal& who,
                                                    const v1::DeleteDeploymentRequest& req) {
  auto run = [&]() -> Result<v1::Deployment> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "delete deployments"));
    DROVER_ASSIGN_OR_RETURN(std::string tenant, DeploymentTenant(who, req.tenant(), req.name()));
    if (!who.CanChange(tenant)) return NotFound(fmt::format("deployment '{}' not found", req.name()));
    return Wait(loop_->DeleteDeployment(tenant, req.name()));
  };
  const std::string& tenant = req.tenant().empty() ? who.tenant : req.tenant();
  return Audited(who, "deployments.delete", fmt::format("{}/{}", tenant.substr(0, 63), req.name().substr(0, 64)),
                 run());
}

Result<v1::EndpointsResponse> ApiService::Endpoints(const auth::Principal& who) {
  const bool gateway = who.role == auth::Role::kGateway;
  if (!gateway) DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read serving endpoints"));
  DROVER_ASSIGN_OR_RETURN(v1::EndpointsResponse all, Wait(loop_->ServingEndpoints()));
  if (who.IsAdmin() || gateway) return all;  // a gateway routes every tenant's models
  v1::EndpointsResponse out;
  for (v1::ServingModel& m : *all.mutable_models()) {
    if (who.CanSee(m.tenant())) *out.add_models() = std::move(m);
  }
  // A replica's secret is the gateways' (and admins'): a user who reads
  // where its replicas are still cannot call them past the gateway.
  for (v1::ServingEndpoint& e : *all.mutable_endpoints()) {
    e.clear_api_key();
    if (who.CanSee(e.tenant())) *out.add_endpoints() = std::move(e);
  }
  return out;
}

Result<v1::ReportLoadResponse> ApiService::ReportLoad(const auth::Principal& who, const v1::ReportLoadRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireGatewayOrAdmin(who, "report gateway load"));
  DROVER_RETURN_IF_ERROR(ValidateLoadReport(req));
  DROVER_RETURN_IF_ERROR(Wait(loop_->ReportLoad(req)).status());
  MutexLock lock(&usage_mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(gateway_usage_, [&](const auto& e) { return now - e.second.at > kUsageStale; });
  if (gateway_usage_.size() >= kMaxUsageGateways && !gateway_usage_.contains(req.gateway())) {
    return ResourceExhausted(fmt::format("usage is kept for {} gateways at most", kMaxUsageGateways));
  }
  GatewayReport& r = gateway_usage_[req.gateway()];
  r.at = now;
  r.rows.assign(req.usage().begin(), req.usage().end());
  return v1::ReportLoadResponse();
}

Result<std::string> ApiService::ServingUsage(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read serving usage"));
  struct Sum {
    int64_t requests = 0, errors = 0, prompt = 0, completion = 0;
    double p50_weighted = 0;  // latency_p50_ms x requests, over the gateways that have one
    int64_t p50_requests = 0;
    double p99 = -1;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Sum> sums;
  int gateways = 0;
  {
    MutexLock lock(&usage_mu_);
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(gateway_usage_, [&](const auto& e) { return now - e.second.at > kUsageStale; });
    gateways = static_cast<int>(gateway_usage_.size());
    for (const auto& [id, report] : gateway_usage_) {
      for (const v1::GatewayUsage& u : report.rows) {
        if (!who.IsAdmin() && u.tenant() != who.tenant) continue;
        Sum& s = sums[{u.tenant(), u.model(), u.key()}];
        s.requests += u.requests();
        s.errors += u.errors();
        s.prompt += u.prompt_tokens();
        s.completion += u.completion_tokens();
        if (u.latency_p50_ms() >= 0 && u.requests() > 0) {
          s.p50_weighted += u.latency_p50_ms() * static_cast<double>(u.requests());
          s.p50_requests += u.requests();
        }
        s.p99 = std::max(s.p99, u.latency_p99_ms());
      }
    }
  }
  // Percentiles do not add up: the median is the gateways' medians weighed
  // by their requests, the p99 the highest gateway's (one gateway: its own).
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [k, s] : sums) {
    nlohmann::json row = {{"tenant", std::get<0>(k)},         {"model", std::get<1>(k)}, {"key", std::get<2>(k)},
                          {"requests", s.requests},           {"errors", s.errors},      {"prompt_tokens", s.prompt},
                          {"completion_tokens", s.completion}};
    if (s.p50_requests > 0) row["latency_p50_ms"] = s.p50_weighted / static_cast<double>(s.p50_requests);
    if (s.p99 >= 0) row["latency_p99_ms"] = s.p99;
    rows.push_back(std::move(row));
  }
  return nlohmann::json{{"usage", std::move(rows)}, {"gateways", gateways}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<v1::GatewayKey> ApiService::ResolveKey(const auth::Principal& who, const v1::ResolveKeyRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireGatewayOrAdmin(who, "resolve gateway keys"));
  return ResolveGatewayKey(req.token());
}

Result<v1::GatewayKey> ApiService::ResolveGatewayKey(std::string_view token) {
  if (authority_ == nullptr) return Unimplemented("this server has no authority to check keys");
  DROVER_ASSIGN_OR_RETURN(auth::TokenInfo t, authority_->AuthenticateToken(token));
  if (t.role == auth::Role::kNode || t.role == auth::Role::kGateway) {
    return PermissionDenied(fmt::format("a {} token is not an API key", auth::RoleName(t.role)));
  }
  v1::GatewayKey key;
  key.set_token_id(t.id);
  key.set_name(t.name);
  key.set_tenant(t.tenant);
  key.set_admin(t.role == auth::Role::kAdmin);
  key.set_role(std::string(auth::RoleName(t.role)));
  key.set_key_requests_per_minute(t.requests_per_minute);
  key.set_key_tokens_per_minute(t.tokens_per_minute);
  DROVER_ASSIGN_OR_RETURN(v1::TenantQuota q, Wait(loop_->TenantQuotaOf(t.tenant)));
  key.set_tenant_requests_per_minute(q.requests_per_minute());
  key.set_tenant_tokens_per_minute(q.tokens_per_minute());
  return key;
}

}  // namespace drover::server
