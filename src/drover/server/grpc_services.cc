#include "drover/server/grpc_services.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "drover/rpc/convert.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::server {
namespace {

using grpc::ServerContext;

template <typename T, typename Out>
grpc::Status Reply(Result<T> r, Out* out) {
  if (!r.ok()) return rpc::ToGrpc(r.status());
  *out = std::move(r).value();
  return grpc::Status::OK;
}

// Resolves the caller of a gRPC call once: the bearer token in its
// metadata, then the rate limits. Refusals carry a retry hint in the
// "retry-after-ms" trailing metadata when rate-limited.
class Gate {
 public:
  Gate(Edge* edge, ApiService* api) : edge_(edge), api_(api) {}

  // `Ctx`: grpc::ServerContext or grpc::CallbackServerContext.
  template <typename Ctx>
  Result<auth::Principal> Who(Ctx* ctx, bool state_changing, std::string_view method) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    Result<auth::Principal> who = value.empty()
                                      ? Result<auth::Principal>(Unauthenticated(
                                            "this call needs a token: set DROVER_TOKEN, run `drover login`, or pass "
                                            "the admin token in <data-dir>/admin.token"))
                                      : edge_->AuthenticateBearer(value, ctx->peer());
    Duration retry{0};
    if (!who.ok()) {
      if (!edge_->NoteFailure(ctx->peer(), &retry))
        return Limited(ctx, ResourceExhausted("too many failed authentications"), retry);
      if (state_changing) {
        auth::Principal anonymous;
        anonymous.source = ctx->peer();
        api_->Audit(anonymous, "grpc " + std::string(method), "", who.status());
      }
      return who;
    }
    if (Status s = edge_->Admit(*who, state_changing, &retry); !s.ok()) return Limited(ctx, s, retry);
    return who;
  }

 private:
  template <typename Ctx>
  static Status Limited(Ctx* ctx, Status s, Duration retry) {
    ctx->AddTrailingMetadata("retry-after-ms",
                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(retry).count() + 1));
    return s;
  }
  Edge* edge_;
  ApiService* api_;
};

// Runs `fn(who)` for an authenticated caller.
template <typename Fn>
grpc::Status Authed(Gate& gate, ServerContext* ctx, bool state_changing, std::string_view method, Fn&& fn) {
  auto who = gate.Who(ctx, state_changing, method);
  if (!who.ok()) return rpc::ToGrpc(who.status());
  return fn(*who);
}

// JobService.Watch on gRPC's callback API: no thread per watcher. While a
// write is in flight, changes wait coalesced per job (the newest state
// wins), so a slow reader costs at most one message per job it watches. A
// watch of named jobs or of an array ends (OK) once all of them ended.
class WatchReactor final : public grpc::ServerWriteReactor<v1::Job> {
 public:
  WatchReactor(ApiService* api, Result<auth::Principal> who, const v1::WatchJobsRequest& req)
      : api_(api), core_(std::make_shared<Core>()) {
    core_->reactor = this;
    core_->bounded = req.ids_size() > 0 || !req.array_id().empty();
    if (!who.ok()) {
      Finish(rpc::ToGrpc(who.status()));
      return;
    }
    auto current = api->Watch(
        *who, req, [core = core_](const v1::Job& job) { Push(core, job); }, &subscription_);
    if (!current.ok()) {
      Finish(rpc::ToGrpc(current.status()));
      return;
    }
    {
      std::lock_guard lock(core_->mu);
      for (const v1::Job& j : *current) core_->remaining.insert(j.id());
      core_->ready = true;
    }
    for (const v1::Job& j : *current) Push(core_, j);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(core_->mu);
    core_->writing = false;
    if (!ok || core_->cancelled) {
      core_->finished = true;
      lock.unlock();
      Finish(ok ? grpc::Status::CANCELLED : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the watcher went away"));
      return;
    }
    if (rpc::IsTerminal(core_->out.status().state())) core_->remaining.erase(core_->out.id());
    // Not before `remaining` is known: an event may be written first.
    if (core_->bounded && core_->ready && core_->remaining.empty()) {
      core_->finished = true;
      lock.unlock();
      Finish(grpc::Status::OK);
      return;
    }
    WriteNext(core_.get(), std::move(lock));
  }
  void OnCancel() override {
    std::unique_lock lock(core_->mu);
    core_->cancelled = true;
    if (core_->writing || core_->finished) return;  // OnWriteDone finishes
    core_->finished = true;
    lock.unlock();
    Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    {
      std::lock_guard lock(core_->mu);
      core_->reactor = nullptr;
    }
    api_->Unwatch(subscription_);
    delete this;
  }

 private:
  // What the publisher's callback shares with the reactor; it outlives a
  // reactor that is done (reactor is then null).
  struct Core {
    std::mutex mu;
    WatchReactor* reactor = nullptr;
    bool bounded = false;
    bool ready = false;  // remaining is filled
    bool writing = false, cancelled = false, finished = false;
    std::map<std::string, v1::Job> pending;  // by id, newest state
    std::deque<std::string> order;           // ids in pending, oldest first
    std::set<std::string> ended;             // ids whose end was queued
    std::set<std::string> remaining;         // bounded: ids not yet sent ended
    v1::Job out;                             // being written
  };

  static void Push(const std::shared_ptr<Core>& core, const v1::Job& job) {
    std::unique_lock lock(core->mu);
    if (core->reactor == nullptr || core->finished || core->cancelled) return;
    bool ended = rpc::IsTerminal(job.status().state());
    // A read that arrives late never undoes an end already queued.
    if (!ended && core->ended.contains(job.id())) return;
    if (ended) core->ended.insert(job.id());
    auto [it, added] = core->pending.insert_or_assign(job.id(), job);
    if (added) core->order.push_back(job.id());
    if (!core->writing) WriteNext(core.get(), std::move(lock));
  }
  // Starts the next write, if any; called with `lock` held, releases it.
  static void WriteNext(Core* core, std::unique_lock<std::mutex> lock) {
    if (core->order.empty()) return;
    std::string id = std::move(core->order.front());
    core->order.pop_front();
    auto it = core->pending.find(id);
    core->out = std::move(it->second);
    core->pending.erase(it);
    core->writing = true;
    WatchReactor* r = core->reactor;
    lock.unlock();
    r->StartWrite(&core->out);
  }

  ApiService* api_;
  std::shared_ptr<Core> core_;
  uint64_t subscription_ = 0;
};

// JobService.Logs on the callback API: a LogFollow reads and this writes,
// one chunk in flight at a time, so `logs -f` holds no thread.
class LogsReactor final : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  LogsReactor(ApiService* api, Result<auth::Principal> who, const v1::LogsRequest& req)
      : core_(std::make_shared<Core>()) {
    core_->reactor = this;
    if (!who.ok()) {
      Done(core_, who.status());
      return;
    }
    auto follow = api->FollowLogs(
        *who, req,
        [core = core_](const std::shared_ptr<LogFollow>&, v1::LogChunk chunk) {
          std::unique_lock lock(core->mu);
          if (core->reactor == nullptr || core->finished) return false;
          core->out = std::move(chunk);
          LogsReactor* r = core->reactor;
          lock.unlock();
          r->StartWrite(&core->out);
          return true;
        },
        [core = core_](const Status& s) { Done(core, s); });
    if (!follow.ok()) {
      Done(core_, follow.status());
      return;
    }
    std::lock_guard lock(core_->mu);
    core_->follow = *follow;
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<LogFollow> follow = Follower();
    if (ok) {
      if (follow) follow->Sent();
      return;
    }
    if (follow) follow->Cancel();
    Done(core_, Unavailable("the reader went away"));
  }
  void OnCancel() override {
    if (auto follow = Follower()) follow->Cancel();
    Done(core_, Status(Code::kCancelled, "cancelled"));
  }
  void OnDone() override {
    std::shared_ptr<LogFollow> follow;
    {
      std::lock_guard lock(core_->mu);
      core_->reactor = nullptr;
      follow = std::move(core_->follow);
    }
    if (follow) follow->Cancel();
    delete this;
  }

 private:
  struct Core {
    std::mutex mu;
    LogsReactor* reactor = nullptr;
    bool finished = false;
    std::shared_ptr<LogFollow> follow;
    v1::LogChunk out;  // being written
  };
  std::shared_ptr<LogFollow> Follower() {
    std::lock_guard lock(core_->mu);
    return core_->follow;
  }
  // Finishes the call once, whoever gets there first.
  static void Done(const std::shared_ptr<Core>& core, const Status& s) {
    std::unique_lock lock(core->mu);
    if (core->reactor == nullptr || core->finished) return;
    core->finished = true;
    LogsReactor* r = core->reactor;
    lock.unlock();
    r->Finish(rpc::ToGrpc(s));
  }

  std::shared_ptr<Core> core_;
};

using JobServiceBase =
    v1::JobService::WithCallbackMethod_Logs<v1::JobService::WithCallbackMethod_Watch<v1::JobService::Service>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  JobServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}

  // The synchronous Watch and Logs the bases declare (final, unimplemented)
  // stay visible; these are the callback API's.
  using JobServiceBase::Logs;
  using JobServiceBase::Watch;
  grpc::ServerWriteReactor<v1::Job>* Watch(grpc::CallbackServerContext* ctx, const v1::WatchJobsRequest* req) override {
    return new WatchReactor(api_, gate_.Who(ctx, false, "Watch"), *req);
  }
  grpc::ServerWriteReactor<v1::LogChunk>* Logs(grpc::CallbackServerContext* ctx, const v1::LogsRequest* req) override {
    return new LogsReactor(api_, gate_.Who(ctx, false, "Logs"), *req);
  }
  grpc::Status SubmitBatch(ServerContext* ctx, const v1::SubmitJobsRequest* req,
                           v1::SubmitJobsResponse* resp) override {
    return Authed(gate_, ctx, true, "SubmitBatch",
                  [&](const auth::Principal& who) { return Reply(api_->SubmitBatch(who, *req), resp); });
  }
  grpc::Status CancelArray(ServerContext* ctx, const v1::CancelArrayRequest* req,
                           v1::CancelArrayResponse* resp) override {
    return Authed(gate_, ctx, true, "CancelArray",
                  [&](const auth::Principal& who) { return Reply(api_->CancelArray(who, *req), resp); });
  }

  grpc::Status Submit(ServerContext* ctx, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    return Authed(gate_, ctx, true, "Submit",
                  [&](const auth::Principal& who) { return Reply(api_->Submit(who, *req), resp); });
  }
  grpc::Status Get(ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) override {
    return Authed(gate_, ctx, false, "Get",
                  [&](const auth::Principal& who) { return Reply(api_->GetJob(who, *req), resp); });
  }
  grpc::Status List(ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    return Authed(gate_, ctx, false, "List",
                  [&](const auth::Principal& who) { return Reply(api_->ListJobs(who, *req), resp); });
  }
  grpc::Status Cancel(ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* resp) override {
    return Authed(gate_, ctx, true, "Cancel",
                  [&](const auth::Principal& who) { return Reply(api_->CancelJob(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}

  grpc::Status List(ServerContext* ctx, const v1::ListNodesRequest* req, v1::ListNodesResponse* resp) override {
    return Authed(gate_, ctx, false, "Nodes.List",
                  [&](const auth::Principal& who) { return Reply(api_->ListNodes(who, *req), resp); });
  }
  grpc::Status Get(ServerContext* ctx, const v1::GetNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, false, "Nodes.Get",
                  [&](const auth::Principal& who) { return Reply(api_->GetNode(who, *req), resp); });
  }
  grpc::Status Drain(ServerContext* ctx, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, true, "Drain",
                  [&](const auth::Principal& who) { return Reply(api_->Drain(who, *req, true), resp); });
  }
  grpc::Status Undrain(ServerContext* ctx, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, true, "Undrain",
                  [&](const auth::Principal& who) { return Reply(api_->Drain(who, *req, false), resp); });
  }
  grpc::Status InjectFault(ServerContext* ctx, const v1::InjectFaultRequest* req,
                           v1::InjectFaultResponse* resp) override {
    return Authed(gate_, ctx, true, "InjectFault",
                  [&](const auth::Principal& who) { return Reply(api_->InjectFault(who, *req), resp); });
  }
  grpc::Status PullImage(ServerContext* ctx, const v1::PullImageRequest* req, v1::PullImageResponse* resp) override {
    return Authed(gate_, ctx, true, "PullImage",
                  [&](const auth::Principal& who) { return Reply(api_->PullImage(who, *req), resp); });
  }
  grpc::Status LoadImage(ServerContext* ctx, grpc::ServerReader<v1::LoadImageChunk>* reader,
                         v1::LoadImageResponse* resp) override {
    return Authed(gate_, ctx, true, "LoadImage", [&](const auth::Principal& who) {
      v1::LoadImageChunk first;
      if (!reader->Read(&first) || !first.has_header()) {
        return rpc::ToGrpc(InvalidArgument("the first message of a load must be its header"));
      }
      v1::LoadImageChunk next;
      ApiService::ArchiveReader read = [&](std::string* chunk) -> Result<bool> {
        if (ctx->IsCancelled()) return Aborted("the upload was cancelled");
        if (!reader->Read(&next)) return false;
        if (!next.has_data()) return InvalidArgument("a load has one header, then data only");
        *chunk = std::move(*next.mutable_data());
        return true;
      };
      // The nodes' answers are awaited as long as the caller does, at most an hour.
      auto deadline = std::min(ctx->deadline(), std::chrono::system_clock::now() + std::chrono::hours(1));
      return Reply(api_->LoadImage(who, first.header(), read, deadline), resp);
    });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status GetFleet(ServerContext* ctx, const v1::FleetRequest*, v1::Fleet* resp) override {
    return Authed(gate_, ctx, false, "GetFleet",
                  [&](const auth::Principal& who) { return Reply(api_->Fleet(who), resp); });
  }
  grpc::Status GetSchedulerStats(ServerContext* ctx, const v1::SchedulerStatsRequest*,
                                 v1::SchedulerStats* resp) override {
    return Authed(gate_, ctx, false, "GetSchedulerStats",
                  [&](const auth::Principal& who) { return Reply(api_->SchedulerStats(who), resp); });
  }
  grpc::Status ListTenants(ServerContext* ctx, const v1::ListTenantsRequest*, v1::ListTenantsResponse* resp) override {
    return Authed(gate_, ctx, false, "ListTenants",
                  [&](const auth::Principal& who) { return Reply(api_->ListTenants(who), resp); });
  }
  grpc::Status GetGpuHistory(ServerContext* ctx, const v1::GpuHistoryRequest* req, v1::GpuHistory* resp) override {
    return Authed(gate_, ctx, false, "GetGpuHistory",
                  [&](const auth::Principal& who) { return Reply(api_->GpuHistory(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class InfoServiceImpl final : public v1::InfoService::Service {
 public:
  InfoServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status Version(ServerContext* ctx, const v1::VersionRequest*, v1::VersionResponse* resp) override {
    return Authed(gate_, ctx, false, "Version", [&](const auth::Principal&) {
      *resp = api_->Version();
      return grpc::Status::OK;
    });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class AuthServiceImpl final : public v1::AuthService::Service {
 public:
  AuthServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status WhoAmI(ServerContext* ctx, const v1::WhoAmIRequest*, v1::Principal* resp) override {
    return Authed(gate_, ctx, false, "WhoAmI", [&](const auth::Principal& who) {
      *resp = api_->WhoAmI(who);
      return grpc::Status::OK;
    });
  }
  grpc::Status CreateToken(ServerContext* ctx, const v1::CreateTokenRequest* req,
                           v1::CreateTokenResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateToken",
                  [&](const auth::Principal& who) { return Reply(api_->CreateToken(who, *req), resp); });
  }
  grpc::Status ListTokens(ServerContext* ctx, const v1::ListTokensRequest*, v1::ListTokensResponse* resp) override {
    return Authed(gate_, ctx, false, "ListTokens",
                  [&](const auth::Principal& who) { return Reply(api_->ListTokens(who), resp); });
  }
  grpc::Status RevokeToken(ServerContext* ctx, const v1::RevokeTokenRequest* req, v1::TokenInfo* resp) override {
    return Authed(gate_, ctx, true, "RevokeToken",
                  [&](const auth::Principal& who) { return Reply(api_->RevokeToken(who, *req), resp); });
  }
  grpc::Status CreateLoginCode(ServerContext* ctx, const v1::CreateLoginCodeRequest*,
                               v1::CreateLoginCodeResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateLoginCode",
                  [&](const auth::Principal& who) { return Reply(api_->CreateLoginCode(who), resp); });
  }
  grpc::Status CreateJoinToken(ServerContext* ctx, const v1::CreateJoinTokenRequest* req,
                               v1::CreateJoinTokenResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateJoinToken",
                  [&](const auth::Principal& who) { return Reply(api_->CreateJoinToken(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class TenantServiceImpl final : public v1::TenantService::Service {
 public:
  TenantServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status Set(ServerContext* ctx, const v1::SetTenantRequest* req, v1::TenantStatus* resp) override {
    return Authed(gate_, ctx, true, "Tenants.Set",
                  [&](const auth::Principal& who) { return Reply(api_->SetTenant(who, *req), resp); });
  }
  grpc::Status Delete(ServerContext* ctx, const v1::DeleteTenantRequest* req, v1::DeleteTenantResponse* resp) override {
    return Authed(gate_, ctx, true, "Tenants.Delete",
                  [&](const auth::Principal& who) { return Reply(api_->DeleteTenant(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

// Deployments (api_deployments.cc): Endpoints, ReportLoad and ResolveKey
// are for gateways; a gateway reports about once a second, so ReportLoad
// is not a state change for the edge's write limiter.
class DeploymentServiceImpl final : public v1::DeploymentService::Service {
 public:
  DeploymentServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status Apply(ServerContext* ctx, const v1::ApplyDeploymentRequest* req, v1::Deployment* resp) override {
    return Authed(gate_, ctx, true, "Deployments.Apply",
                  [&](const auth::Principal& who) { return Reply(api_->ApplyDeployment(who, *req), resp); });
  }
  grpc::Status Get(ServerContext* ctx, const v1::GetDeploymentRequest* req, v1::Deployment* resp) override {
    return Authed(gate_, ctx, false, "Deployments.Get",
                  [&](const auth::Principal& who) { return Reply(api_->GetDeployment(who, *req), resp); });
  }
  grpc::Status List(ServerContext* ctx, const v1::ListDeploymentsRequest*, v1::ListDeploymentsResponse* resp) override {
    return Authed(gate_, ctx, false, "Deployments.List",
                  [&](const auth::Principal& who) { return Reply(api_->ListDeployments(who), resp); });
  }
  grpc::Status Scale(ServerContext* ctx, const v1::ScaleDeploymentRequest* req, v1::Deployment* resp) override {
    return Authed(gate_, ctx, true, "Deployments.Scale",
                  [&](const auth::Principal& who) { return Reply(api_->ScaleDeployment(who, *req), resp); });
  }
  grpc::Status Delete(ServerContext* ctx, const v1::DeleteDeploymentRequest* req, v1::Deployment* resp) override {
    return Authed(gate_, ctx, true, "Deployments.Delete",
                  [&](const auth::Principal& who) { return Reply(api_->DeleteDeployment(who, *req), resp); });
  }
  grpc::Status Endpoints(ServerContext* ctx, const v1::EndpointsRequest*, v1::EndpointsResponse* resp) override {
    return Authed(gate_, ctx, false, "Deployments.Endpoints",
                  [&](const auth::Principal& who) { return Reply(api_->Endpoints(who), resp); });
  }
  grpc::Status ReportLoad(ServerContext* ctx, const v1::ReportLoadRequest* req, v1::ReportLoadResponse* resp) override {
    return Authed(gate_, ctx, false, "Deployments.ReportLoad",
                  [&](const auth::Principal& who) { return Reply(api_->ReportLoad(who, *req), resp); });
  }
  grpc::Status ResolveKey(ServerContext* ctx, const v1::ResolveKeyRequest* req, v1::GatewayKey* resp) override {
    return Authed(gate_, ctx, false, "Deployments.ResolveKey",
                  [&](const auth::Principal& who) { return Reply(api_->ResolveKey(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class AuditServiceImpl final : public v1::AuditService::Service {
 public:
  AuditServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status List(ServerContext* ctx, const v1::ListAuditRequest* req, v1::ListAuditResponse* resp) override {
    return Authed(gate_, ctx, false, "Audit.List",
                  [&](const auth::Principal& who) { return Reply(api_->ListAudit(who, *req), resp); });
  }
  grpc::Status Verify(ServerContext* ctx, const v1::VerifyAuditRequest*, v1::VerifyAuditResponse* resp) override {
    return Authed(gate_, ctx, false, "Audit.Verify",
                  [&](const auth::Principal& who) { return Reply(api_->VerifyAudit(who), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::Service>> MakeGrpcServices(ApiService* api, ControlLoop* loop, LogStore* logs,
                                                             Edge* edge, auth::Authority* authority,
                                                             const auth::ServerTls* tls) {
  std::vector<std::unique_ptr<grpc::Service>> out;
  Gate gate(edge, api);
  out.push_back(std::make_unique<JobServiceImpl>(api, gate));
  out.push_back(std::make_unique<NodeServiceImpl>(api, gate));
  out.push_back(std::make_unique<InfoServiceImpl>(api, gate));
  out.push_back(std::make_unique<ClusterServiceImpl>(api, gate));
  out.push_back(std::make_unique<AuthServiceImpl>(api, gate));
  out.push_back(std::make_unique<AuditServiceImpl>(api, gate));
  out.push_back(std::make_unique<TenantServiceImpl>(api, gate));
  out.push_back(std::make_unique<DeploymentServiceImpl>(api, gate));
  out.push_back(MakeAgentService(loop, logs, api, edge, authority, tls));
  return out;
}

}  // namespace drover::server
