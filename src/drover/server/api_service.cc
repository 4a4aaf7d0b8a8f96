#include "drover/server/api_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <set>

#include <algorithm>
#include <chrono>
#include <thread>

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/common/version.h"
#include "drover/rpc/convert.h"

namespace drover::server {

namespace {
constexpr auto kApiTimeout = std::chrono::seconds(30);
// Job lists: the page a client gets when it names none, and the largest.
constexpr int32_t kDefaultPageSize = 500;
constexpr int32_t kMaxPageSize = 5000;
}  // namespace

template <typename T>
Result<T> Await(std::future<Result<T>> f) {
  if (f.wait_for(kApiTimeout) != std::future_status::ready) {
    return Unavailable("the control loop did not answer in time");
  }
  return f.get();
}

namespace {

// "j-1,j-2" with the jobs `own` does not hold replaced by "other": a GPU
// shows as busy without naming another tenant's job.
std::string RedactJobList(const std::string& list, const std::set<std::string>& own) {
  if (list.empty()) return list;
  std::string out;
  bool other = false;
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string id = list.substr(i, j - i);
    if (own.count(id) != 0) {
      out += (out.empty() ? "" : ",") + id;
    } else if (!other) {
      other = true;
    }
    i = j + 1;
  }
  if (other) out += (out.empty() ? "" : ",") + std::string("other");
  return out;
}

}  // namespace

Status RequireRole(const auth::Principal& who, auth::Role needed, std::string_view what) {
  if (auth::AtLeast(who.role, needed)) return Status::Ok();
  return PermissionDenied(
      fmt::format("role {} may not {} (needs {})", auth::RoleName(who.role), what, auth::RoleName(needed)));
}

void ApiService::Audit(const auth::Principal& who, std::string action, std::string target, const Status& result) {
  if (audit_ == nullptr) return;
  std::vector<auth::RefusalDigest::Summary> due;
  const bool in_full = result.ok() || refusals_.Note(who, action, result, &due);
  WriteSummaries(std::move(due));
  if (!in_full) return;
  if (Status s = audit_->Append(who, std::move(action), std::move(target), result); !s.ok()) {
    spdlog::error("audit entry not written: {}", s.ToString());
  }
}

void ApiService::Housekeep() {
  if (authority_ != nullptr) {
    auto swept = authority_->SweepExpired();
    if (!swept.ok()) {
      spdlog::warn("sweeping expired login codes and sessions: {}", swept.status().ToString());
    } else if (swept->login_codes + swept->join_tokens + swept->sessions > 0) {
      spdlog::info("swept {} expired login codes, {} join tokens and {} sessions", swept->login_codes,
                   swept->join_tokens, swept->sessions);
    }
  }
  if (audit_ != nullptr) WriteSummaries(refusals_.Flush());
}

ApiService::~ApiService() {
  follow_pump_.Stop();
  if (audit_ != nullptr) WriteSummaries(refusals_.Flush(/*all=*/true));
}

void ApiService::WriteSummaries(std::vector<auth::RefusalDigest::Summary> due) {
  for (auth::RefusalDigest::Summary& d : due) {
    if (Status s = audit_->Append(d.who, std::move(d.action), "", d.result); !s.ok()) {
      spdlog::error("audit summary not written: {}", s.ToString());
    }
  }
}

void ApiService::ScheduleHousekeeping() {
  follow_pump_.PostAfter(kHousekeeping, [this] {
    Housekeep();
    ScheduleHousekeeping();
  });
}

Result<v1::Job> ApiService::VisibleJob(const auth::Principal& who, const std::string& id) {
  if (auto seq = ParseJobId(id); !seq.ok()) return seq.status();
  auto job = Await(loop_->GetJob(id));
  if (job.ok() && !who.CanSee(job->spec().tenant())) return NotFound(fmt::format("job '{}' not found", id));
  return job;
}

namespace {

// The spec as the caller may submit it: its tenant (the caller's unless an
// admin names another), its owner, normalized.
Status PrepareSpec(const auth::Principal& who, v1::JobSpec* spec) {
  if (spec->tenant().empty()) {
    spec->set_tenant(who.tenant);
  } else if (spec->tenant() != who.tenant && !who.IsAdmin()) {
    return PermissionDenied(fmt::format("a token of tenant '{}' may not submit jobs for tenant '{}'", who.tenant,
                                        spec->tenant().substr(0, 63)));
  }
  spec->set_owner(who.name);
  if (!spec->deployment().empty() || spec->deployment_revision() != 0) {
    return InvalidArgument("deployment is set by the server for a deployment's replicas; apply a deployment instead");
  }
  if (!spec->service().api_key().empty()) {
    return InvalidArgument(
        "service api_key is set by the server for a deployment's replicas; apply a deployment instead");
  }
  return rpc::NormalizeJobSpec(spec);
}

Status ValidateArray(const v1::ArraySpec& a) {
  if (a.first() < 0 || a.last() < a.first()) {
    return InvalidArgument(fmt::format("array indices {}-{}: need 0 <= first <= last", a.first(), a.last()));
  }
  if (a.step() < 0) return InvalidArgument(fmt::format("array step {} is negative", a.step()));
  int64_t step = std::max<int64_t>(a.step(), 1);
  // (last - first) / step + 1 without overflow.
  if ((a.last() - a.first()) / step >= kMaxArrayTasks) {
    return InvalidArgument(
        fmt::format("array {}-{}:{} has more than {} tasks", a.first(), a.last(), step, kMaxArrayTasks));
  }
  if (a.max_running() < 0) return InvalidArgument(fmt::format("array limit %{} is negative", a.max_running()));
  return Status::Ok();
}

}  // namespace

Result<v1::SubmitJobResponse> ApiService::Submit(const auth::Principal& who, v1::SubmitJobRequest req) {
  // The loop records the call in the commit that stores the job; a call it
  // did not record (refused before it, or not committed) is recorded here.
  AuditNote note{who, req.has_array() ? "jobs.submit_array" : "jobs.submit"};
  auto run = [&]() -> Result<v1::SubmitJobResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "submit jobs"));
    if (!req.has_spec()) return InvalidArgument("spec is missing");
    DROVER_RETURN_IF_ERROR(PrepareSpec(who, req.mutable_spec()));
    if (req.has_array()) {
      DROVER_RETURN_IF_ERROR(ValidateArray(req.array()));
      return Await(loop_->SubmitArray(std::move(*req.mutable_spec()), req.array(), note));
    }
    DROVER_ASSIGN_OR_RETURN(v1::Job job, Await(loop_->Submit(std::move(*req.mutable_spec()), note)));
    v1::SubmitJobResponse resp;
    *resp.mutable_job() = std::move(job);
    return resp;
  };
  auto r = run();
  if (!note.recorded->load()) {
    std::string target = !r.ok() ? "" : r->array_id().empty() ? r->job().id() : r->array_id();
    Audit(who, note.action, target, r.status());
  }
  return r;
}

Result<v1::SubmitJobsResponse> ApiService::SubmitBatch(const auth::Principal& who, v1::SubmitJobsRequest req) {
  AuditNote note{who, "jobs.submit_batch"};  // as in Submit
  auto run = [&]() -> Result<v1::SubmitJobsResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "submit jobs"));
    if (req.specs_size() == 0 || req.specs_size() > kMaxArrayTasks) {
      return InvalidArgument(fmt::format("a batch holds 1 to {} jobs, not {}", kMaxArrayTasks, req.specs_size()));
    }
    std::vector<v1::JobSpec> specs;
    specs.reserve(static_cast<size_t>(req.specs_size()));
    for (int i = 0; i < req.specs_size(); ++i) {
      if (Status s = PrepareSpec(who, req.mutable_specs(i)); !s.ok()) {
        return Status(s.code(), fmt::format("job {}: {}", i, s.message()));
      }
      specs.push_back(std::move(*req.mutable_specs(i)));
    }
    DROVER_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, Await(loop_->SubmitBatch(std::move(specs), note)));
    v1::SubmitJobsResponse resp;
    for (v1::Job& j : jobs) *resp.add_jobs() = std::move(j);
    return resp;
  };
  auto r = run();
  if (!note.recorded->load()) {
    std::string target = r.ok() && r->jobs_size() > 0 ? r->jobs(0).id() + ".." + r->jobs(r->jobs_size() - 1).id() : "";
    Audit(who, note.action, target, r.status());
  }
  return r;
}

Result<v1::CancelArrayResponse> ApiService::CancelArray(const auth::Principal& who, const v1::CancelArrayRequest& req) {
  auto run = [&]() -> Result<v1::CancelArrayResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "cancel jobs"));
    DROVER_ASSIGN_OR_RETURN(uint64_t first, ParseArrayId(req.array_id()));
    // The array is its first task's: another tenant's is "not found" too.
    auto task = VisibleJob(who, FormatJobId(first));
    if (!task.ok() || task->array().array_id() != req.array_id()) {
      return NotFound(fmt::format("array '{}' not found", req.array_id()));
    }
    DROVER_ASSIGN_OR_RETURN(int64_t n, Await(loop_->CancelArray(req.array_id())));
    v1::CancelArrayResponse resp;
    resp.set_cancelled(n);
    return resp;
  };
  return Audited(who, "jobs.cancel_array", req.array_id().substr(0, 64), run());
}

Result<std::vector<v1::Job>> ApiService::Watch(const auth::Principal& who, const v1::WatchJobsRequest& req,
                                               JobWatch::Callback on_change, uint64_t* subscription) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "watch jobs"));
  if (watch_ == nullptr) return Unimplemented("this server does not push job changes");
  constexpr int kMaxWatchedIds = 1000;
  if (req.ids_size() > kMaxWatchedIds) {
    return InvalidArgument(fmt::format("a watch names at most {} jobs (watch an array instead)", kMaxWatchedIds));
  }
  JobWatch::Filter filter;
  for (const std::string& id : req.ids()) {
    DROVER_RETURN_IF_ERROR(ParseJobId(id).status());
    filter.ids.insert(id);
  }
  if (!req.array_id().empty()) {
    DROVER_RETURN_IF_ERROR(ParseArrayId(req.array_id()).status());
    filter.array_id = req.array_id();
  }
  if (!who.IsAdmin()) filter.tenant = who.tenant;
  // Subscribed before reading: a change committed in between is an event.
  *subscription = watch_->Add(filter, std::move(on_change));
  auto current = [&]() -> Result<std::vector<v1::Job>> {
    std::vector<v1::Job> out;
    for (const std::string& id : filter.ids) {
      DROVER_ASSIGN_OR_RETURN(v1::Job job, VisibleJob(who, id));
      out.push_back(std::move(job));
    }
    if (!filter.array_id.empty()) {
      v1::ListJobsRequest lr;
      lr.set_array_id(filter.array_id);
      lr.set_tenant(filter.tenant);
      DROVER_ASSIGN_OR_RETURN(std::vector<v1::Job> tasks, Await(loop_->ListJobs(lr)));
      if (tasks.empty()) return NotFound(fmt::format("array '{}' not found", filter.array_id));
      for (v1::Job& t : tasks) out.push_back(std::move(t));
    }
    return out;
  }();
  if (!current.ok()) {
    watch_->Remove(*subscription);
    *subscription = 0;
  }
  return current;
}

void ApiService::Unwatch(uint64_t subscription) {
  if (watch_ != nullptr && subscription != 0) watch_->Remove(subscription);
}

Result<v1::Job> ApiService::GetJob(const auth::Principal& who, const v1::GetJobRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read jobs"));
  return VisibleJob(who, req.id());
}

Result<v1::ListJobsResponse> ApiService::ListJobs(const auth::Principal& who, const v1::ListJobsRequest& in) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "list jobs"));
  v1::ListJobsRequest req = in;
  if (!v1::JobState_IsValid(req.state())) {
    return InvalidArgument(fmt::format("job state {} is unknown", static_cast<int>(req.state())));
  }
  if (!req.tenant().empty()) DROVER_RETURN_IF_ERROR(ValidateName("tenant", req.tenant()));
  if (!req.array_id().empty()) DROVER_RETURN_IF_ERROR(ParseArrayId(req.array_id()).status());
  if (!req.node().empty()) DROVER_RETURN_IF_ERROR(ValidateName("node", req.node()));
  if (req.ended_after_unix_nanos() < 0 || req.ended_before_unix_nanos() < 0) {
    return InvalidArgument("ended_after and ended_before are unix nanoseconds, not negative");
  }
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return InvalidArgument(
        fmt::format("page_size {} is outside 1..{} (0: {})", req.page_size(), kMaxPageSize, kDefaultPageSize));
  }
  if (req.page_size() == 0) req.set_page_size(kDefaultPageSize);
  if (!who.IsAdmin()) {
    if (req.tenant().empty()) req.set_tenant(who.tenant);
    if (req.tenant() != who.tenant) {
      return PermissionDenied(fmt::format("a token of tenant '{}' may list only its own tenant's jobs", who.tenant));
    }
  }
  return Await(loop_->ListJobsPage(req));
}

Result<v1::Job> ApiService::CancelJob(const auth::Principal& who, const v1::CancelJobRequest& req) {
  auto run = [&]() -> Result<v1::Job> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kUser, "cancel jobs"));
    DROVER_RETURN_IF_ERROR(VisibleJob(who, req.id()).status());
    return Await(loop_->Cancel(req.id()));
  };
  return Audited(who, "jobs.cancel", req.id().substr(0, 64), run());
}

std::set<std::string> ApiService::OwnJobIds(const auth::Principal& who) {
  std::set<std::string> own;
  v1::ListJobsRequest lr;
  lr.set_tenant(who.tenant);
  if (auto jobs = Await(loop_->ListJobs(lr)); jobs.ok()) {
    for (const v1::Job& j : *jobs) {
      if (!rpc::IsTerminal(j.status().state())) own.insert(j.id());
    }
  }
  return own;
}

void ApiService::Redact(const auth::Principal& who, v1::Node* node, const std::set<std::string>& own) {
  if (who.IsAdmin()) return;
  for (v1::Gpu& g : *node->mutable_gpus()) {
    g.set_job_id(RedactJobList(g.job_id(), own));
    g.set_tenant(RedactJobList(g.tenant(), {who.tenant}));
    for (v1::GpuProcess& p : *g.mutable_telemetry()->mutable_processes()) {
      if (!p.job_id().empty() && own.count(p.job_id()) == 0) p.set_job_id("other");
    }
  }
}

Result<v1::ListNodesResponse> ApiService::ListNodes(const auth::Principal& who, const v1::ListNodesRequest&) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "list nodes"));
  DROVER_ASSIGN_OR_RETURN(std::vector<v1::Node> nodes, Await(loop_->ListNodes()));
  std::set<std::string> own = who.IsAdmin() ? std::set<std::string>() : OwnJobIds(who);
  v1::ListNodesResponse resp;
  for (v1::Node& n : nodes) {
    Redact(who, &n, own);
    *resp.add_nodes() = std::move(n);
  }
  return resp;
}

Result<v1::Node> ApiService::GetNode(const auth::Principal& who, const v1::GetNodeRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read nodes"));
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.name()));
  DROVER_ASSIGN_OR_RETURN(v1::Node node, Await(loop_->GetNode(req.name())));
  if (!who.IsAdmin()) Redact(who, &node, OwnJobIds(who));
  return node;
}

Result<v1::Node> ApiService::Drain(const auth::Principal& who, const v1::DrainNodeRequest& req, bool drained) {
  auto run = [&]() -> Result<v1::Node> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, drained ? "drain nodes" : "undrain nodes"));
    DROVER_RETURN_IF_ERROR(ValidateNodeName(req.name()));
    if (req.requeue() && !drained) return InvalidArgument("requeue goes with a drain, not an undrain");
    return Await(loop_->SetDrained(req.name(), drained, req.requeue()));
  };
  return Audited(who, drained ? "nodes.drain" : "nodes.undrain", req.name().substr(0, 64), run());
}

Result<v1::InjectFaultResponse> ApiService::InjectFault(const auth::Principal& who, const v1::InjectFaultRequest& req) {
  auto run = [&]() -> Result<v1::InjectFaultResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "inject faults"));
    DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node()));
    DROVER_RETURN_IF_ERROR(Await(loop_->InjectFault(req.node(), req.gpu_index(), req.fault())).status());
    return v1::InjectFaultResponse();
  };
  return Audited(who, "nodes.fault", fmt::format("{}/{}", req.node().substr(0, 64), req.gpu_index()), run());
}

Result<v1::Fleet> ApiService::Fleet(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read the fleet"));
  DROVER_ASSIGN_OR_RETURN(v1::Fleet fleet, Await(loop_->Fleet()));
  if (!who.IsAdmin()) {
    std::set<std::string> own = OwnJobIds(who);
    for (v1::FleetNode& n : *fleet.mutable_nodes()) {
      for (v1::FleetGpu& g : *n.mutable_gpus()) g.set_job_id(RedactJobList(g.job_id(), own));
    }
  }
  return fleet;
}

metrics::LabelMask ApiService::MetricsMask(const auth::Principal& who) {
  if (who.IsAdmin()) return nullptr;
  // Read once per scrape, before the render: the mask runs per series.
  auto own =
      std::make_shared<const std::set<std::string>>(who.tenant.empty() ? std::set<std::string>() : OwnJobIds(who));
  const std::set<std::string> tenant = who.tenant.empty() ? std::set<std::string>() : std::set<std::string>{who.tenant};
  return [own, tenant](std::string_view label, const std::string& value) -> std::string {
    // GPU series name the jobs ("j-1,j-2") and tenants ("a,b") on a GPU.
    if (label == "job_id") return RedactJobList(value, *own);
    if (label == "tenant") return RedactJobList(value, tenant);
    return value;
  };
}

Result<v1::SchedulerStats> ApiService::SchedulerStats(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read scheduler statistics"));
  return Await(loop_->SchedulerStats());
}

Result<v1::ListTenantsResponse> ApiService::ListTenants(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "list tenants"));
  DROVER_ASSIGN_OR_RETURN(v1::ListTenantsResponse all, Await(loop_->ListTenants()));
  if (who.IsAdmin()) return all;
  v1::ListTenantsResponse mine;
  for (v1::TenantStatus& t : *all.mutable_tenants()) {
    if (t.name() == who.tenant) *mine.add_tenants() = std::move(t);
  }
  return mine;
}

Result<v1::TenantStatus> ApiService::SetTenant(const auth::Principal& who, const v1::SetTenantRequest& req) {
  auto run = [&]() -> Result<v1::TenantStatus> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "change tenants"));
    return Await(loop_->SetTenant(req.tenant(), req.create()));
  };
  return Audited(who, req.create() ? "tenants.create" : "tenants.set", req.tenant().name().substr(0, 64), run());
}

Result<v1::DeleteTenantResponse> ApiService::DeleteTenant(const auth::Principal& who,
                                                          const v1::DeleteTenantRequest& req) {
  auto run = [&]() -> Result<v1::DeleteTenantResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "delete tenants"));
    DROVER_RETURN_IF_ERROR(ValidateName("tenant", req.name()));
    DROVER_RETURN_IF_ERROR(Await(loop_->DeleteTenant(req.name())).status());
    return v1::DeleteTenantResponse();
  };
  return Audited(who, "tenants.delete", req.name().substr(0, 64), run());
}

Result<v1::GpuHistory> ApiService::GpuHistory(const auth::Principal& who, const v1::GpuHistoryRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read GPU history"));
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node()));
  return Await(loop_->GpuHistory(req.node(), req.gpu_index()));
}

v1::VersionResponse ApiService::Version() const {
  v1::VersionResponse v;
  v.set_version(kVersion);
  v.set_git_commit(kGitCommit);
  return v;
}

Status CheckLogReplica(const v1::Job& job, int replica) {
  const int replicas = std::max(1, job.spec().replicas());
  if (replica >= 0 && replica < replicas) return Status::Ok();
  return InvalidArgument(fmt::format("job {} has {} replica{}: replica {} is not one (0..{})", job.id(), replicas,
                                     replicas == 1 ? "" : "s", replica, replicas - 1));
}

Result<std::shared_ptr<LogFollow>> ApiService::FollowLogs(const auth::Principal& who, const v1::LogsRequest& req,
                                                          LogFollow::Send send, LogFollow::Done done) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "read logs"));
  DROVER_ASSIGN_OR_RETURN(v1::Job job, VisibleJob(who, req.id()));
  if (req.offset() < 0) return InvalidArgument(fmt::format("offset {} is negative", req.offset()));
  DROVER_RETURN_IF_ERROR(CheckLogReplica(job, req.replica()));
  auto follow = LogFollow::Start(logs_, watch_, &follow_pump_, std::move(job), req.offset(), req.follow(),
                                 std::move(send), std::move(done), req.replica());
  if (req.follow()) {
    // Read again after subscribing: a change in between is not missed.
    auto now = VisibleJob(who, req.id());
    if (now.ok()) follow->Update(*now);
  }
  return follow;
}

}  // namespace drover::server

namespace drover::server {
namespace {

v1::TokenInfo ToProto(const auth::TokenInfo& t) {
  v1::TokenInfo out;
  out.set_id(t.id);
  out.set_name(t.name);
  out.set_tenant(t.tenant);
  out.set_role(std::string(auth::RoleName(t.role)));
  out.set_node(t.node);
  out.set_created_by(t.created_by);
  out.set_created_unix_nanos(t.created_ns);
  out.set_expires_unix_nanos(t.expires_ns);
  out.set_revoked(t.revoked);
  out.set_requests_per_minute(t.requests_per_minute);
  out.set_tokens_per_minute(t.tokens_per_minute);
  return out;
}

Result<Duration> ParseTtl(const std::string& text, Duration fallback) {
  if (text.empty()) return fallback;
  DROVER_ASSIGN_OR_RETURN(int64_t ms, ParseDurationMs(text));
  if (ms <= 0) return InvalidArgument(fmt::format("ttl '{}' must be positive", text.substr(0, 32)));
  return Duration(std::chrono::milliseconds(ms));
}

}  // namespace

v1::Principal ApiService::WhoAmI(const auth::Principal& who) const {
  v1::Principal p;
  p.set_token_id(who.token_id);
  p.set_name(who.name);
  p.set_tenant(who.tenant);
  p.set_role(std::string(auth::RoleName(who.role)));
  p.set_node(who.node);
  return p;
}

Result<v1::CreateTokenResponse> ApiService::CreateToken(const auth::Principal& who, const v1::CreateTokenRequest& req) {
  auto run = [&]() -> Result<v1::CreateTokenResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kTenantAdmin, "create tokens"));
    auth::CreateTokenRequest cr;
    cr.name = req.name();
    cr.tenant = req.tenant().empty() ? who.tenant : req.tenant();
    DROVER_ASSIGN_OR_RETURN(cr.role, auth::ParseRole(req.role().empty() ? "user" : req.role()));
    if (cr.role == auth::Role::kNode) return InvalidArgument("node tokens come from join tokens (drover join-token)");
    DROVER_ASSIGN_OR_RETURN(cr.ttl, ParseTtl(req.ttl(), Duration(0)));
    cr.requests_per_minute = req.requests_per_minute();
    cr.tokens_per_minute = req.tokens_per_minute();
    DROVER_ASSIGN_OR_RETURN(auto created, authority_->CreateToken(who, cr));
    v1::CreateTokenResponse resp;
    *resp.mutable_info() = ToProto(created.first);
    resp.set_token(std::move(created.second));
    return resp;
  };
  auto r = run();
  Audit(who, "tokens.create",
        r.ok() ? r->info().id() + " " + r->info().role() + "@" + r->info().tenant() : req.name().substr(0, 64),
        r.status());
  return r;
}

Result<v1::ListTokensResponse> ApiService::ListTokens(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "list tokens"));
  DROVER_ASSIGN_OR_RETURN(std::vector<auth::TokenInfo> tokens, authority_->ListTokens(who));
  v1::ListTokensResponse resp;
  for (const auth::TokenInfo& t : tokens) *resp.add_tokens() = ToProto(t);
  return resp;
}

Result<v1::TokenInfo> ApiService::RevokeToken(const auth::Principal& who, const v1::RevokeTokenRequest& req) {
  auto run = [&]() -> Result<v1::TokenInfo> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "revoke tokens"));
    DROVER_ASSIGN_OR_RETURN(auth::TokenInfo t, authority_->RevokeToken(who, req.id()));
    return ToProto(t);
  };
  return Audited(who, "tokens.revoke", req.id().substr(0, 64), run());
}

Result<v1::CreateLoginCodeResponse> ApiService::CreateLoginCode(const auth::Principal& who) {
  auto run = [&]() -> Result<v1::CreateLoginCodeResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kViewer, "open dashboard sessions"));
    DROVER_ASSIGN_OR_RETURN(std::string code, authority_->CreateLoginCode(who));
    v1::CreateLoginCodeResponse resp;
    resp.set_url(http_base_ + "/ui/#code=" + code);
    resp.set_code(std::move(code));
    return resp;
  };
  return Audited(who, "session.code", "", run());
}

Result<v1::CreateJoinTokenResponse> ApiService::CreateJoinToken(const auth::Principal& who,
                                                                const v1::CreateJoinTokenRequest& req) {
  auto run = [&]() -> Result<v1::CreateJoinTokenResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "create join tokens"));
    DROVER_ASSIGN_OR_RETURN(Duration ttl, ParseTtl(req.ttl(), std::chrono::hours(1)));
    DROVER_ASSIGN_OR_RETURN(std::string code, authority_->CreateJoinToken(who, req.node(), ttl));
    v1::CreateJoinTokenResponse resp;
    resp.set_join_token(std::move(code));
    return resp;
  };
  return Audited(who, "nodes.join-token", req.node().substr(0, 64), run());
}

Result<v1::ListAuditResponse> ApiService::ListAudit(const auth::Principal& who, const v1::ListAuditRequest& req) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "read the audit log"));
  if (req.limit() < 0) return InvalidArgument("limit is negative");
  DROVER_ASSIGN_OR_RETURN(std::vector<auth::AuditEntry> entries, audit_->List(req.since_unix_nanos(), req.limit()));
  v1::ListAuditResponse resp;
  for (const auth::AuditEntry& e : entries) {
    v1::AuditEntry* out = resp.add_entries();
    out->set_seq(e.seq);
    out->set_time_unix_nanos(e.time_ns);
    out->set_who(e.who);
    out->set_token_id(e.token_id);
    out->set_tenant(e.tenant);
    out->set_role(e.role);
    out->set_action(e.action);
    out->set_target(e.target);
    out->set_result(e.result);
    out->set_source(e.source);
    out->set_prev_hash(e.prev);
    out->set_hash(e.hash);
  }
  return resp;
}

Result<v1::VerifyAuditResponse> ApiService::VerifyAudit(const auth::Principal& who) {
  DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "verify the audit log"));
  DROVER_ASSIGN_OR_RETURN(auth::AuditVerdict v, audit_->Verify());
  v1::VerifyAuditResponse resp;
  resp.set_ok(v.ok);
  resp.set_entries(v.entries);
  resp.set_head_hash(v.head);
  resp.set_bad_seq(v.bad_seq);
  resp.set_reason(v.reason);
  return resp;
}

}  // namespace drover::server
