#pragma once
// ApiService: the management API, once, for every transport. The gRPC
// services and the REST/JSON mapping both call it, so the same request gets
// the same validation, the same answer and the same status code.
//
// Every call takes the Principal the edge authenticated (gRPC metadata,
// HTTP bearer token or dashboard cookie); nothing here trusts a tenant or a
// node name from a message body. Tenant walls: a non-admin sees and changes
// only its own tenant's jobs, and another tenant's job is "not found" exactly
// like a missing one. Every state-changing call is appended to the audit
// log with its result, refused ones included.
//
// Thread-safety: thread-safe; it forwards to the control loop and waits.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "drover/auth/audit.h"
#include "drover/auth/authority.h"
#include "drover/auth/refusal_digest.h"
#include "drover/common/metrics.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/server/control_loop.h"
#include "drover/server/image_archives.h"
#include "drover/server/log_follow.h"
#include "drover/server/log_store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class ApiService {
 public:
  // `watch` (optional) is where the control loop publishes job changes.
  ApiService(ControlLoop* loop, LogStore* logs, auth::Authority* authority, auth::AuditLog* audit,
             JobWatch* watch = nullptr)
      : loop_(loop), logs_(logs), authority_(authority), audit_(audit), watch_(watch), follow_pump_("log-follow") {
    follow_pump_.Start();
    ScheduleHousekeeping();
  }
  // Stops the housekeeping (before the members its tasks use go), then
  // writes the refusal summaries still open: a server that stops within a
  // window of a flood leaves its count in the audit log, not nowhere.
  ~ApiService();

  // The dashboard URL prefix for login links ("http://127.0.0.1:8080").
  void set_http_base(std::string base) { http_base_ = std::move(base); }

  // One job, or with req.array a job array.
  Result<v1::SubmitJobResponse> Submit(const auth::Principal& who, v1::SubmitJobRequest req);
  Result<v1::SubmitJobsResponse> SubmitBatch(const auth::Principal& who, v1::SubmitJobsRequest req);
  Result<v1::CancelArrayResponse> CancelArray(const auth::Principal& who, const v1::CancelArrayRequest& req);

  // Subscribes `on_change` to the jobs `req` names (see JobService.Watch),
  // then returns their current state; `*subscription` is set for Unwatch.
  // Changes committed after the subscription reach `on_change` on the
  // control loop's thread (it must not block). Jobs `who` may not see are
  // "not found"; a watch of everything sees only `who`'s tenant unless
  // `who` is an admin.
  Result<std::vector<v1::Job>> Watch(const auth::Principal& who, const v1::WatchJobsRequest& req,
                                     JobWatch::Callback on_change, uint64_t* subscription);
  void Unwatch(uint64_t subscription);
  Result<v1::Job> GetJob(const auth::Principal& who, const v1::GetJobRequest& req);
  Result<v1::ListJobsResponse> ListJobs(const auth::Principal& who, const v1::ListJobsRequest& req);
  Result<v1::Job> CancelJob(const auth::Principal& who, const v1::CancelJobRequest& req);

  Result<v1::ListNodesResponse> ListNodes(const auth::Principal& who, const v1::ListNodesRequest& req);
  Result<v1::Node> GetNode(const auth::Principal& who, const v1::GetNodeRequest& req);
  Result<v1::Node> Drain(const auth::Principal& who, const v1::DrainNodeRequest& req, bool drained);
  // Admin: a fault for a simulated GPU (kFailedPrecondition for real ones).
  Result<v1::InjectFaultResponse> InjectFault(const auth::Principal& who, const v1::InjectFaultRequest& req);
  // Admin: an image pulled into nodes' stores ahead of jobs (api_images.cc).
  Result<v1::PullImageResponse> PullImage(const auth::Principal& who, const v1::PullImageRequest& req);
  // NodeService.LoadImage: `header`, then `read` yields the archive's bytes
  // (false at the stream's end). Answers once every node named stored the
  // image or said why not, or at `deadline`.
  using ArchiveReader = std::function<Result<bool>(std::string* chunk)>;
  Result<v1::LoadImageResponse> LoadImage(const auth::Principal& who, const v1::LoadImageHeader& header,
                                          const ArchiveReader& read, std::chrono::system_clock::time_point deadline);
  // Where uploads are spooled (<data>/image-archives) and how large one may
  // be (--max-image-archive); until it is called, LoadImage is refused.
  void EnableImageArchives(std::string dir, int64_t max_bytes);
  // For a node's FetchImageArchive / ImageLoaded (ImageArchives says when).
  Result<std::pair<std::string, int64_t>> OpenImageArchive(const std::string& node, const std::string& load_id);
  void ImageLoaded(const std::string& node, const v1::ImageLoaded& loaded);

  // Dashboards.
  Result<v1::Fleet> Fleet(const auth::Principal& who);
  Result<v1::SchedulerStats> SchedulerStats(const auth::Principal& who);
  Result<v1::ListTenantsResponse> ListTenants(const auth::Principal& who);
  Result<v1::GpuHistory> GpuHistory(const auth::Principal& who, const v1::GpuHistoryRequest& req);
  // Admin: tenants as data.
  Result<v1::TenantStatus> SetTenant(const auth::Principal& who, const v1::SetTenantRequest& req);
  Result<v1::DeleteTenantResponse> DeleteTenant(const auth::Principal& who, const v1::DeleteTenantRequest& req);

  v1::VersionResponse Version() const;

  // The job's output to `send` without holding a thread (LogFollow): with
  // req.follow until the job ended and all its output was sent, else what
  // is there. Refusals (role, no such job, bad offset) come back here,
  // before anything was sent; the end goes to `done`.
  Result<std::shared_ptr<LogFollow>> FollowLogs(const auth::Principal& who, const v1::LogsRequest& req,
                                                LogFollow::Send send, LogFollow::Done done);

  // Identities and audit.
  v1::Principal WhoAmI(const auth::Principal& who) const;
  Result<v1::CreateTokenResponse> CreateToken(const auth::Principal& who, const v1::CreateTokenRequest& req);
  Result<v1::ListTokensResponse> ListTokens(const auth::Principal& who);
  Result<v1::TokenInfo> RevokeToken(const auth::Principal& who, const v1::RevokeTokenRequest& req);
  Result<v1::CreateLoginCodeResponse> CreateLoginCode(const auth::Principal& who);
  Result<v1::CreateJoinTokenResponse> CreateJoinToken(const auth::Principal& who,
                                                      const v1::CreateJoinTokenRequest& req);
  Result<v1::ListAuditResponse> ListAudit(const auth::Principal& who, const v1::ListAuditRequest& req);
  Result<v1::VerifyAuditResponse> VerifyAudit(const auth::Principal& who);

  // Deployments (api_deployments.cc; docs/deployments.md). A user applies,
  // scales and deletes deployments of its own tenant (an admin of any), a
  // viewer reads them; another tenant's deployment is "not found". Names
  // are per tenant: a request names the caller's tenant's deployment, or,
  // with its `tenant` field, an admin names another tenant's. Every change
  // is audited ("deployments.apply", ".scale", ".delete", target
  // "tenant/name").
  Result<v1::Deployment> ApplyDeployment(const auth::Principal& who, v1::ApplyDeploymentRequest req);
  Result<v1::Deployment> GetDeployment(const auth::Principal& who, const v1::GetDeploymentRequest& req);
  Result<v1::ListDeploymentsResponse> ListDeployments(const auth::Principal& who);
  Result<v1::Deployment> ScaleDeployment(const auth::Principal& who, const v1::ScaleDeploymentRequest& req);
  Result<v1::Deployment> DeleteDeployment(const auth::Principal& who, const v1::DeleteDeploymentRequest& req);
  // For gateways: the models and ready replicas `who` may see (viewer and
  // up; an admin sees every tenant's).
  Result<v1::EndpointsResponse> Endpoints(const auth::Principal& who);
  // For gateways (gateway or admin): their load per model, for
  // auto-scaling, and their usage, for ServingUsage.
  Result<v1::ReportLoadResponse> ReportLoad(const auth::Principal& who, const v1::ReportLoadRequest& req);
  // For gateways apart from the server (admin): an API key's tenant and
  // limits. kUnauthenticated for a bad, revoked or expired key.
  Result<v1::GatewayKey> ResolveKey(const auth::Principal& who, const v1::ResolveKeyRequest& req);
  // The same for the in-process gateway (no caller to check).
  Result<v1::GatewayKey> ResolveGatewayKey(std::string_view token);
  // GET /api/v1/serving/usage (viewer): the usage the gateways reported
  // here (the in-process one and any apart), summed per (tenant, model,
  // key): {"usage": [{"tenant", "model", "key", "requests", "errors",
  // "prompt_tokens", "completion_tokens", "latency_p50_ms",
  // "latency_p99_ms"}], "gateways": N}; only `who`'s tenant's rows unless
  // an admin. A gateway silent for kUsageStale drops out.
  Result<std::string> ServingUsage(const auth::Principal& who);
  static constexpr std::chrono::minutes kUsageStale{5};

  // What `who` may see of /metrics: nothing hidden (null) for an admin;
  // for anyone else (an anonymous reader of --metrics-public too) the
  // job_id and tenant labels of other tenants' series read "other", as
  // /fleet shows them (metrics::LabelMask sums the series that merge).
  metrics::LabelMask MetricsMask(const auth::Principal& who);

  // Appends an entry (for the edges: refused logins, forged node identities).
  // Refusals pass through a RefusalDigest: a flood of the same refusal is
  // its first few entries and one summary per minute.
  void Audit(const auth::Principal& who, std::string action, std::string target, const Status& result);

  // What runs every kHousekeeping (on the log-follow thread): expired login
  // codes, join tokens and sessions deleted (Authority::SweepExpired), the
  // refusal summaries of the last minute written. Public for tests.
  void Housekeep();
  static constexpr std::chrono::seconds kHousekeeping{60};

 private:
  // Ids of the unfinished jobs of `who`'s tenant; Redact hides the others'.
  std::set<std::string> OwnJobIds(const auth::Principal& who);
  static void Redact(const auth::Principal& who, v1::Node* node, const std::set<std::string>& own);
  // The job when `who` may see it; "not found" when it is missing or hidden.
  Result<v1::Job> VisibleJob(const auth::Principal& who, const std::string& id);
  template <typename T>
  Result<T> Audited(const auth::Principal& who, std::string action, std::string target, Result<T> r) {
    Audit(who, std::move(action), std::move(target), r.status());
    return r;
  }

  ControlLoop* loop_;
  LogStore* logs_;
  std::unique_ptr<ImageArchives> archives_;  // set once, by EnableImageArchives, before calls come
  auth::Authority* authority_;
  auth::AuditLog* audit_;
  JobWatch* watch_;
  std::string http_base_;
  // The last usage each gateway reported, by its id. A leaf lock: the
  // edge's, never taken on the control loop.
  struct GatewayReport {
    std::chrono::steady_clock::time_point at;
    std::vector<v1::GatewayUsage> rows;
  };
  Mutex usage_mu_;
  std::map<std::string, GatewayReport> gateway_usage_ DROVER_GUARDED_BY(usage_mu_);
  void ScheduleHousekeeping();
  // The refusals' windows run on the wall clock (they are minutes of the log).
  SystemClock wall_clock_;
  auth::RefusalDigest refusals_{&wall_clock_};
  void WriteSummaries(std::vector<auth::RefusalDigest::Summary> due);
  // Reads for every log follower (LogFollow), one thread for all of them;
  // and the housekeeping timer. Last: stopped before the members it uses go.
  runtime::EventLoop follow_pump_;
};

// kInvalidArgument unless `replica` is one of `job`'s (LogsRequest.replica).
Status CheckLogReplica(const v1::Job& job, int replica);

// The principal of a gateway in the server's own process (an internal
// admin: it sees every tenant's models and reports load).
auth::Principal GatewayPrincipal();

// What a role may call, checked before anything else. kPermissionDenied
// names the role and what it lacks.
Status RequireRole(const auth::Principal& who, auth::Role needed, std::string_view what);

}  // namespace drover::server
