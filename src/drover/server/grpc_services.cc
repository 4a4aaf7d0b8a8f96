#include "drover/server/grpc_services.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "drover/auth/certs.h"
#include "drover/rpc/convert.h"
#include "drover/v1/agent.grpc.pb.h"
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

  Result<auth::Principal> Who(ServerContext* ctx, bool state_changing, std::string_view method) {
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
      if (!edge_->NoteFailure(ctx->peer(), &retry)) return Limited(ctx, ResourceExhausted("too many failed authentications"), retry);
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
  static Status Limited(ServerContext* ctx, Status s, Duration retry) {
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

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}

  grpc::Status Submit(ServerContext* ctx, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    return Authed(gate_, ctx, true, "Submit", [&](const auth::Principal& who) { return Reply(api_->Submit(who, *req), resp); });
  }
  grpc::Status Get(ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) override {
    return Authed(gate_, ctx, false, "Get", [&](const auth::Principal& who) { return Reply(api_->GetJob(who, *req), resp); });
  }
  grpc::Status List(ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    return Authed(gate_, ctx, false, "List", [&](const auth::Principal& who) { return Reply(api_->ListJobs(who, *req), resp); });
  }
  grpc::Status Cancel(ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* resp) override {
    return Authed(gate_, ctx, true, "Cancel", [&](const auth::Principal& who) { return Reply(api_->CancelJob(who, *req), resp); });
  }
  grpc::Status Logs(ServerContext* ctx, const v1::LogsRequest* req, grpc::ServerWriter<v1::LogChunk>* w) override {
    return Authed(gate_, ctx, false, "Logs", [&](const auth::Principal& who) {
      return rpc::ToGrpc(api_->Logs(
          who, *req, [w](const v1::LogChunk& c) { return w->Write(c); }, [ctx] { return ctx->IsCancelled(); }));
    });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}

  grpc::Status List(ServerContext* ctx, const v1::ListNodesRequest* req, v1::ListNodesResponse* resp) override {
    return Authed(gate_, ctx, false, "Nodes.List", [&](const auth::Principal& who) { return Reply(api_->ListNodes(who, *req), resp); });
  }
  grpc::Status Get(ServerContext* ctx, const v1::GetNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, false, "Nodes.Get", [&](const auth::Principal& who) { return Reply(api_->GetNode(who, *req), resp); });
  }
  grpc::Status Drain(ServerContext* ctx, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, true, "Drain", [&](const auth::Principal& who) { return Reply(api_->Drain(who, *req, true), resp); });
  }
  grpc::Status Undrain(ServerContext* ctx, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Authed(gate_, ctx, true, "Undrain", [&](const auth::Principal& who) { return Reply(api_->Drain(who, *req, false), resp); });
  }
  grpc::Status InjectFault(ServerContext* ctx, const v1::InjectFaultRequest* req, v1::InjectFaultResponse* resp) override {
    return Authed(gate_, ctx, true, "InjectFault", [&](const auth::Principal& who) { return Reply(api_->InjectFault(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status GetFleet(ServerContext* ctx, const v1::FleetRequest*, v1::Fleet* resp) override {
    return Authed(gate_, ctx, false, "GetFleet", [&](const auth::Principal& who) { return Reply(api_->Fleet(who), resp); });
  }
  grpc::Status GetSchedulerStats(ServerContext* ctx, const v1::SchedulerStatsRequest*, v1::SchedulerStats* resp) override {
    return Authed(gate_, ctx, false, "GetSchedulerStats", [&](const auth::Principal& who) { return Reply(api_->SchedulerStats(who), resp); });
  }
  grpc::Status ListTenants(ServerContext* ctx, const v1::ListTenantsRequest*, v1::ListTenantsResponse* resp) override {
    return Authed(gate_, ctx, false, "ListTenants", [&](const auth::Principal& who) { return Reply(api_->ListTenants(who), resp); });
  }
  grpc::Status GetGpuHistory(ServerContext* ctx, const v1::GpuHistoryRequest* req, v1::GpuHistory* resp) override {
    return Authed(gate_, ctx, false, "GetGpuHistory", [&](const auth::Principal& who) { return Reply(api_->GpuHistory(who, *req), resp); });
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
  grpc::Status CreateToken(ServerContext* ctx, const v1::CreateTokenRequest* req, v1::CreateTokenResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateToken", [&](const auth::Principal& who) { return Reply(api_->CreateToken(who, *req), resp); });
  }
  grpc::Status ListTokens(ServerContext* ctx, const v1::ListTokensRequest*, v1::ListTokensResponse* resp) override {
    return Authed(gate_, ctx, false, "ListTokens", [&](const auth::Principal& who) { return Reply(api_->ListTokens(who), resp); });
  }
  grpc::Status RevokeToken(ServerContext* ctx, const v1::RevokeTokenRequest* req, v1::TokenInfo* resp) override {
    return Authed(gate_, ctx, true, "RevokeToken", [&](const auth::Principal& who) { return Reply(api_->RevokeToken(who, *req), resp); });
  }
  grpc::Status CreateLoginCode(ServerContext* ctx, const v1::CreateLoginCodeRequest*, v1::CreateLoginCodeResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateLoginCode", [&](const auth::Principal& who) { return Reply(api_->CreateLoginCode(who), resp); });
  }
  grpc::Status CreateJoinToken(ServerContext* ctx, const v1::CreateJoinTokenRequest* req,
                               v1::CreateJoinTokenResponse* resp) override {
    return Authed(gate_, ctx, true, "CreateJoinToken", [&](const auth::Principal& who) { return Reply(api_->CreateJoinToken(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class TenantServiceImpl final : public v1::TenantService::Service {
 public:
  TenantServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status Set(ServerContext* ctx, const v1::SetTenantRequest* req, v1::TenantStatus* resp) override {
    return Authed(gate_, ctx, true, "Tenants.Set", [&](const auth::Principal& who) { return Reply(api_->SetTenant(who, *req), resp); });
  }
  grpc::Status Delete(ServerContext* ctx, const v1::DeleteTenantRequest* req, v1::DeleteTenantResponse* resp) override {
    return Authed(gate_, ctx, true, "Tenants.Delete", [&](const auth::Principal& who) { return Reply(api_->DeleteTenant(who, *req), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

class AuditServiceImpl final : public v1::AuditService::Service {
 public:
  AuditServiceImpl(ApiService* api, Gate gate) : api_(api), gate_(gate) {}
  grpc::Status List(ServerContext* ctx, const v1::ListAuditRequest* req, v1::ListAuditResponse* resp) override {
    return Authed(gate_, ctx, false, "Audit.List", [&](const auth::Principal& who) { return Reply(api_->ListAudit(who, *req), resp); });
  }
  grpc::Status Verify(ServerContext* ctx, const v1::VerifyAuditRequest*, v1::VerifyAuditResponse* resp) override {
    return Authed(gate_, ctx, false, "Audit.Verify", [&](const auth::Principal& who) { return Reply(api_->VerifyAudit(who), resp); });
  }

 private:
  ApiService* api_;
  Gate gate_;
};

using SessionStream = grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>;

// The down direction of one agent session: a writer thread that sends the
// latest desired set. Only the newest unsent set matters (level-triggered).
class SessionSink final : public AgentSink {
 public:
  SessionSink(grpc::ServerContext* ctx, SessionStream* stream)
      : ctx_(ctx), stream_(stream), writer_([this] { WriteLoop(); }) {}
  ~SessionSink() override { Close(); }

  void SendDesired(const v1::DesiredWorkloads& desired) override {
    std::lock_guard lock(mu_);
    for (const v1::Workload& w : desired.workloads()) {
      auto ref = rpc::ParseWorkloadId(w.workload_id().empty() ? w.job_id() : w.workload_id());
      if (!ref.ok()) continue;
      auto it = sent_attempt_.find(w.job_id());
      if (it != sent_attempt_.end()) {
        it->second = std::max(it->second, ref->attempt);
      } else if (sent_attempt_.size() < kMaxRememberedJobs) {
        sent_attempt_.emplace(w.job_id(), ref->attempt);
      }
    }
    pending_ = desired;
    cv_.notify_one();
  }

  void SendInjectFault(const v1::InjectFault& fault) override {
    std::lock_guard lock(mu_);
    faults_.push_back(fault);
    cv_.notify_one();
  }

  void SendHeartbeatAck(const v1::HeartbeatAck& ack) override {
    std::lock_guard lock(mu_);
    ack_ = ack;  // only the newest matters: it acknowledges every earlier heartbeat
    cv_.notify_one();
  }

  void Reset() override {
    std::lock_guard lock(mu_);
    if (!closed_) ctx_->TryCancel();
  }

  // The newest attempt of `job_id` this session was told to run (-1: none).
  // Only its output may be written: an older attempt's is dropped.
  int LatestSent(const std::string& job_id) {
    std::lock_guard lock(mu_);
    auto it = sent_attempt_.find(job_id);
    return it == sent_attempt_.end() ? -1 : it->second;
  }

  // Stops the writer; after it returns the stream is never written again.
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      cv_.notify_one();
    }
    if (writer_.joinable()) writer_.join();
  }

 private:
  void WriteLoop() {
    for (;;) {
      v1::ServerMessage msg;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return closed_ || pending_.has_value() || !faults_.empty() || ack_.has_value(); });
        if (closed_) return;
        if (ack_.has_value()) {
          // First: an agent that waits too long for it fences its jobs.
          *msg.mutable_heartbeat_ack() = std::move(*ack_);
          ack_.reset();
        } else if (pending_.has_value()) {
          *msg.mutable_desired() = std::move(*pending_);
          pending_.reset();
        } else {
          *msg.mutable_inject_fault() = std::move(faults_.front());
          faults_.pop_front();
        }
      }
      if (!stream_->Write(msg)) return;
    }
  }

  grpc::ServerContext* ctx_;
  SessionStream* stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<v1::DesiredWorkloads> pending_;  // GUARDED_BY(mu_)
  std::deque<v1::InjectFault> faults_;            // GUARDED_BY(mu_)
  std::optional<v1::HeartbeatAck> ack_;           // GUARDED_BY(mu_)
  bool closed_ = false;                           // GUARDED_BY(mu_)
  static constexpr size_t kMaxRememberedJobs = 1 << 20;
  std::map<std::string, int> sent_attempt_;       // GUARDED_BY(mu_) job id -> newest attempt sent
  std::thread writer_;
};

// The agent protocol. Join needs only a join token; Register and Session
// need a node credential, and the node they act as is the credential's: a
// name in a message that differs is refused (and audited), never believed.
// The credential is the verified client certificate of a TLS peer when it
// presented one (it wins over any token), else the node token.
class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  AgentServiceImpl(ControlLoop* loop, LogStore* logs, ApiService* api, Edge* edge, auth::Authority* authority,
                   const auth::ServerTls* tls)
      : loop_(loop), logs_(logs), api_(api), edge_(edge), authority_(authority), tls_(tls) {}

  grpc::Status Join(ServerContext* ctx, const v1::JoinRequest* req, v1::JoinResponse* resp) override {
    auth::Principal who;
    who.name = req->node_name().substr(0, 63);
    who.source = ctx->peer();
    Duration retry{0};
    // A certificate is issued only over TLS, by a server holding the CA
    // key. The request is checked before the join token is spent, so that
    // a malformed one does not burn it.
    const bool issue = !req->csr_pem().empty() && tls_ != nullptr && tls_->can_issue();
    Status csr = issue ? auth::ParseCsrPem(req->csr_pem()).status() : Status::Ok();
    Result<std::string> token = csr.ok() ? authority_->Join(req->join_token(), req->node_name())
                                         : Result<std::string>(csr);
    std::string certificate;
    if (token.ok() && issue) {
      auto id = auth::ParseToken(*token);
      auto cert = id.ok() ? auth::IssueNodeCertificate(*tls_, req->csr_pem(), req->node_name(), id->id,
                                                       ToUnixNanos(SystemClock::Get()->Now()) / 1'000'000'000)
                          : Result<std::string>(id.status());
      if (cert.ok()) {
        certificate = std::move(*cert);
      } else {
        spdlog::error("node '{}' joined but its certificate could not be issued: {}", who.name, cert.status().message());
        token = Internal("the node certificate could not be issued: " + cert.status().message());
      }
    }
    if (!token.ok()) {
      if (!edge_->NoteFailure(ctx->peer(), &retry)) return rpc::ToGrpc(ResourceExhausted("too many failed joins"));
      spdlog::warn("refused a join as node '{}' from {}: {}", who.name, who.source, token.status().message());
    } else if (!certificate.empty()) {
      spdlog::info("node '{}' joined from {} and was issued a certificate", who.name, who.source);
    }
    api_->Audit(who, certificate.empty() ? "agent.join" : "agent.join+certificate", who.name, token.status());
    if (!token.ok()) return rpc::ToGrpc(token.status());
    resp->set_node_token(std::move(*token));
    if (!certificate.empty()) {
      resp->set_certificate_pem(std::move(certificate));
      resp->set_ca_pem(tls_->ca_pem);
    }
    return grpc::Status::OK;
  }

  grpc::Status Register(ServerContext* ctx, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
    auto node = NodeOf(ctx, req->node_name(), "agent.register");
    if (!node.ok()) return rpc::ToGrpc(node.status());
    if (Status s = rpc::ValidateRegister(*req); !s.ok()) return rpc::ToGrpc(s);
    auto f = loop_->RegisterNode(*req);
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control loop did not answer in time");
    }
    if (auto r = f.get(); !r.ok()) return rpc::ToGrpc(r.status());
    const LeaseOptions& lease = loop_->lease();
    resp->set_heartbeat_interval_ms(static_cast<int32_t>(lease.heartbeat_interval.count()));
    resp->set_lease_ttl_ms(static_cast<int32_t>(lease.ttl.count()));
    resp->set_fence_after_ms(static_cast<int32_t>(lease.fence_after.count()));
    resp->set_fence_grace_ms(static_cast<int32_t>(lease.fence_grace.count()));
    resp->set_gossip_cluster(loop_->gossip_cluster());
    resp->set_gossip_key(loop_->gossip_key());
    auto peers = loop_->Peers(*node);
    if (peers.wait_for(std::chrono::seconds(30)) == std::future_status::ready) {
      if (auto p = peers.get(); p.ok()) {
        for (v1::Peer& peer : p->second) *resp->add_peers() = std::move(peer);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Session(ServerContext* ctx, SessionStream* stream) override {
    v1::AgentMessage msg;
    if (!stream->Read(&msg)) return grpc::Status(grpc::StatusCode::CANCELLED, "session closed before hello");
    if (!msg.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first session message must be a hello");
    }
    auto authed = NodeOf(ctx, msg.hello().node_name(), "agent.session");
    if (!authed.ok()) return rpc::ToGrpc(authed.status());
    const std::string node = *authed;
    auto sink = std::make_shared<SessionSink>(ctx, stream);
    auto opened = loop_->SessionOpened(node, sink);
    if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      sink->Close();
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control loop did not answer in time");
    }
    if (auto r = opened.get(); !r.ok()) {
      sink->Close();
      return rpc::ToGrpc(r.status());
    }
    grpc::Status result = grpc::Status::OK;
    int64_t refused_logs = 0;
    while (stream->Read(&msg)) {
      if (msg.has_heartbeat()) {
        if (Status s = rpc::ValidateHeartbeat(node, sched::kMaxGpusPerNode, msg.heartbeat()); !s.ok()) {
          spdlog::warn("{}; ignoring its GPU and peer reports", s.message());
          msg.mutable_heartbeat()->clear_gpus();
          msg.mutable_heartbeat()->clear_peers();
        }
        loop_->Heartbeat(node, std::move(*msg.mutable_heartbeat()), sink);
      } else if (msg.has_status()) {
        // The loop applies a status only to jobs bound to `node`.
        loop_->HandleStatus(node, msg.status());
      } else if (msg.has_log()) {
        const v1::LogData& log = msg.log();
        auto ref = rpc::ParseWorkloadId(log.workload_id().empty() ? log.job_id() : log.workload_id());
        int latest = ref.ok() && ref->job_id == log.job_id() ? sink->LatestSent(log.job_id()) : -1;
        if (latest >= 0 && ref->attempt < latest) continue;  // an older attempt's last words
        if (latest < 0 || ref->attempt != latest) {
          if (refused_logs++ == 0) {
            auth::Principal who = NodePrincipal(ctx, node);
            Status refused = PermissionDenied(fmt::format("node '{}' is not running job '{}'", node,
                                                          msg.log().job_id().substr(0, 64)));
            spdlog::warn("{}; its log chunks are dropped", refused.message());
            api_->Audit(who, "agent.log", msg.log().job_id().substr(0, 64), refused);
          }
          continue;
        }
        // Written here, before any later status of the same job reaches the
        // loop: a job's output is complete once the job is seen to end.
        if (Status s = logs_->Write(LogStore::LogId(log.job_id(), ref->attempt), log.offset(), log.data()); !s.ok()) {
          spdlog::warn("node '{}' sent a log chunk that was not stored: {}", node, s.ToString());
        }
      }
    }
    if (ctx->IsCancelled()) result = grpc::Status(grpc::StatusCode::CANCELLED, "session cancelled");
    loop_->SessionClosed(node, sink.get());
    sink->Close();
    return result;
  }

 private:
  static auth::Principal NodePrincipal(ServerContext* ctx, const std::string& node) {
    auth::Principal p;
    p.name = node;
    p.node = node;
    p.role = auth::Role::kNode;
    p.source = ctx->peer();
    return p;
  }

  // The node of the peer's client certificate; nullopt when it presented
  // none (or the listener is plaintext). The handshake verified the chain
  // already; it is checked again here, where the name is used, and the node
  // token the certificate is bound to must still be valid (revocation).
  std::optional<Result<auth::Principal>> CertificateNode(ServerContext* ctx) const {
    if (tls_ == nullptr) return std::nullopt;
    std::shared_ptr<const grpc::AuthContext> auth_ctx = ctx->auth_context();
    if (!auth_ctx) return std::nullopt;
    std::vector<grpc::string_ref> pems = auth_ctx->FindPropertyValues("x509_pem_cert");
    if (pems.empty() || pems[0].empty()) return std::nullopt;
    std::string pem(pems[0].data(), pems[0].size());
    int64_t now = ToUnixNanos(SystemClock::Get()->Now()) / 1'000'000'000;
    if (Status s = auth::VerifyCertPem(pem, tls_->ca_pem, now, auth::Purpose::kClient); !s.ok()) {
      return Result<auth::Principal>(s);
    }
    auto info = auth::ParseCertPem(pem);
    if (!info.ok()) return Result<auth::Principal>(Unauthenticated(info.status().message()));
    auto id = auth::NodeIdentityOf(*info);
    if (!id.ok()) return Result<auth::Principal>(id.status());
    auto who = authority_->AuthenticateNode(id->token_id, id->node);
    if (who.ok()) who->source = ctx->peer();
    return who;
  }

  // The node the caller's credential names, when `claimed` is that node.
  Result<std::string> NodeOf(ServerContext* ctx, const std::string& claimed, const char* action) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    std::optional<Result<auth::Principal>> by_cert = CertificateNode(ctx);
    Result<auth::Principal> who = by_cert.has_value() ? *by_cert
                                  : value.empty()     ? Result<auth::Principal>(Unauthenticated(
                                                        "an agent needs a node credential: join with --join-token"))
                                                      : edge_->AuthenticateBearer(value, ctx->peer());
    const char* credential = by_cert.has_value() ? "certificate" : "credential";
    Status refused;
    if (!who.ok()) {
      refused = who.status();
    } else if (who->role != auth::Role::kNode) {
      refused = PermissionDenied(fmt::format("token '{}' is not a node credential", who->name));
    } else if (who->node != claimed) {
      refused = PermissionDenied(fmt::format("the {} of node '{}' cannot act as node '{}'", credential, who->node,
                                             claimed.substr(0, 63)));
    } else if (by_cert.has_value() && !value.empty()) {
      // A token sent beside a certificate must be the same node's.
      auto token = edge_->AuthenticateBearer(value, ctx->peer());
      if (!token.ok() || token->role != auth::Role::kNode || token->node != who->node) {
        refused = PermissionDenied(fmt::format("the token sent with node '{}''s certificate is not that node's",
                                               who->node));
      }
    }
    if (refused.ok()) return who->node;
    Duration retry{0};
    if (edge_->NoteFailure(ctx->peer(), &retry)) {
      auth::Principal p = who.ok() ? *who : auth::Principal{};
      p.source = ctx->peer();
      spdlog::warn("refused {} as node '{}' from {}: {}", action, claimed.substr(0, 63), p.source, refused.message());
      api_->Audit(p, action, claimed.substr(0, 63), refused);
    }
    return refused;
  }

  ControlLoop* loop_;
  LogStore* logs_;
  ApiService* api_;
  Edge* edge_;
  auth::Authority* authority_;
  const auth::ServerTls* tls_;  // null: plaintext
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
  out.push_back(std::make_unique<AgentServiceImpl>(loop, logs, api, edge, authority, tls));
  return out;
}

}  // namespace drover::server
