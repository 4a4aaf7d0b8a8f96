// AgentService: Join, Register and the Session stream of every agent.
//
// Sessions run on gRPC's callback API: a session is a reactor whose reads
// and writes complete on gRPC's own small thread pool, so a thousand agents
// cost a thousand reactors, not two thousand threads (the synchronous API
// held one thread per stream, plus a writer thread per session).

#include <fmt/format.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <deque>
#include <map>
#include <mutex>
#include <optional>

#include "drover/auth/certs.h"
#include "drover/common/mutex.h"
#include "drover/rpc/container.h"
#include "drover/rpc/convert.h"
#include "drover/server/grpc_services.h"
#include "drover/v1/agent.grpc.pb.h"

namespace drover::server {
namespace {

// Who is on the other end of a call, whichever API the call uses.
using CallContext = grpc::ServerContextBase;

// The per-node work the session's reads hand to the server, and the checks
// they need (AgentServiceImpl implements it).
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual Result<std::string> NodeOf(CallContext* ctx, const std::string& claimed, const char* action) = 0;
  virtual ControlLoop* loop() = 0;
  virtual LogStore* logs() = 0;
  virtual void AuditRefusedLog(CallContext* ctx, const std::string& node, const std::string& job_id) = 0;
  virtual void ImageLoaded(const std::string& node, const v1::ImageLoaded& loaded) = 0;
};

// One agent's Session: reads go to the control loop as they arrive; the
// down direction sends the latest desired set, the newest heartbeat ack,
// relayed fault injections and image pulls, one write at a time. Only the newest unsent
// desired set matters (level-triggered), and the newest ack acknowledges
// every earlier heartbeat, so neither queues up behind a slow agent.
//
// Lifetime: the reactor keeps itself alive (self_) until gRPC calls
// OnDone; the control loop may hold it longer as the node's sink, and then
// its sends are no-ops.
//
// Thread-safety: reactions run on gRPC's threads one at a time per
// direction; the AgentSink methods may be called from any thread. The
// down direction's state is under mu_.
class SessionReactor final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>, public AgentSink {
 public:
  // The reactor keeps itself alive until OnDone.
  static SessionReactor* Start(grpc::CallbackServerContext* ctx, SessionHost* host) {
    auto r = std::shared_ptr<SessionReactor>(new SessionReactor(ctx, host));
    {
      MutexLock lock(&r->mu_);  // not yet shared: for the analysis
      r->self_ = r;
    }
    r->StartRead(&r->in_);
    return r.get();
  }

  // ---- AgentSink (any thread) ----

  void SendDesired(const v1::DesiredWorkloads& desired) override {
    MutexLock lock(&mu_);
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
    WriteNextLocked();
  }

  void SendInjectFault(const v1::InjectFault& fault) override {
    MutexLock lock(&mu_);
    if (faults_.size() < kMaxQueuedFaults) faults_.push_back(fault);
    WriteNextLocked();
  }

  void SendPullImage(const v1::PullImage& pull) override {
    MutexLock lock(&mu_);
    if (pulls_.size() < kMaxQueuedPulls) pulls_.push_back(pull);
    WriteNextLocked();
  }

  void SendHeartbeatAck(const v1::HeartbeatAck& ack) override {
    MutexLock lock(&mu_);
    ack_ = ack;
    WriteNextLocked();
  }

  void Reset() override {
    MutexLock lock(&mu_);
    if (!done_) ctx_->TryCancel();  // the context goes with the call
  }

  // ---- reactions (gRPC's threads) ----

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(ctx_->IsCancelled() ? grpc::Status(grpc::StatusCode::CANCELLED, "session cancelled") : grpc::Status::OK);
      return;
    }
    if (node_.empty()) {
      Open();  // reads go on once the control loop has opened the session
      return;
    }
    Dispatch();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) broken_ = true;  // the read side sees the end too
    WriteNextLocked();
  }

  void OnDone() override {
    std::shared_ptr<SessionReactor> keep;
    {
      MutexLock lock(&mu_);
      done_ = true;
      keep = std::move(self_);
    }
    // `keep` goes here: the last reference unless the loop still holds the sink.
  }

 private:
  SessionReactor(grpc::CallbackServerContext* ctx, SessionHost* host) : ctx_(ctx), host_(host) {}

  // The first message: a hello from the node the credential names. The
  // control loop answers on its own thread; this reaction does not wait for
  // it (gRPC has a few threads for every session's reactions).
  void Open() {
    if (!in_.has_hello()) {
      End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first session message must be a hello"));
      return;
    }
    auto authed = host_->NodeOf(ctx_, in_.hello().node_name(), "agent.session");
    if (!authed.ok()) {
      End(rpc::ToGrpc(authed.status()));
      return;
    }
    std::shared_ptr<SessionReactor> self = Self();
    host_->loop()->SessionOpened(*authed, self, [self, node = *authed](Result<Done> r) {
      if (!r.ok()) {
        self->End(rpc::ToGrpc(r.status()));
        return;
      }
      self->node_ = node;  // before the next read: StartRead below orders it
      {
        MutexLock lock(&self->mu_);
        self->open_ = true;
        self->WriteNextLocked();  // what the loop sent while it opened the session
      }
      self->StartRead(&self->in_);
    });
  }

  void Dispatch() {
    ControlLoop* loop = host_->loop();
    if (in_.has_heartbeat()) {
      if (Status s = rpc::ValidateHeartbeat(node_, sched::kMaxGpusPerNode, in_.heartbeat()); !s.ok()) {
        spdlog::warn("{}; ignoring its GPU and peer reports", s.message());
        in_.mutable_heartbeat()->clear_gpus();
        in_.mutable_heartbeat()->clear_peers();
      }
      if (Status s = rpc::ValidateNodeImages(node_, in_.heartbeat().images()); !s.ok()) {
        spdlog::warn("{}; keeping the images it reported before", s.message());
        in_.mutable_heartbeat()->clear_images();
        in_.mutable_heartbeat()->set_images_changed(false);
      }
      loop->Heartbeat(node_, std::move(*in_.mutable_heartbeat()), Self());
    } else if (in_.has_status()) {
      // The loop applies a status only to jobs bound to `node`.
      loop->HandleStatus(node_, std::move(*in_.mutable_status()));
    } else if (in_.has_image_loaded()) {
      host_->ImageLoaded(node_, in_.image_loaded());
    } else if (in_.has_log()) {
      const v1::LogData& log = in_.log();
      auto ref = rpc::ParseWorkloadId(log.workload_id().empty() ? log.job_id() : log.workload_id());
      int latest = ref.ok() && ref->job_id == log.job_id() ? LatestSent(log.job_id()) : -1;
      if (latest >= 0 && ref->attempt < latest) return;  // an older attempt's last words
      if (latest < 0 || ref->attempt != latest) {
        if (refused_logs_++ == 0) host_->AuditRefusedLog(ctx_, node_, log.job_id());
        return;
      }
      // Written here, before any later status of the same job reaches the
      // loop: a job's output is complete once the job is seen to end.
      if (Status s = host_->logs()->Write(LogStore::LogId(log.job_id(), ref->attempt, ref->replica), log.offset(),
                                             log.data());
          !s.ok()) {
        spdlog::warn("node '{}' sent a log chunk that was not stored: {}", node_, s.ToString());
      }
    }
  }

  std::shared_ptr<SessionReactor> Self() {
    MutexLock lock(&mu_);
    return self_;
  }

  // The newest attempt of `job_id` this session was told to run (-1: none).
  // Only its output may be written: an older attempt's is dropped.
  int LatestSent(const std::string& job_id) {
    MutexLock lock(&mu_);
    auto it = sent_attempt_.find(job_id);
    return it == sent_attempt_.end() ? -1 : it->second;
  }

  // The read side ended: the loop forgets the session, and the stream
  // finishes once no write is in flight (Finish may not overtake one).
  void End(grpc::Status status) {
    if (!node_.empty()) host_->loop()->SessionClosed(node_, this);
    MutexLock lock(&mu_);
    ending_ = true;
    status_ = std::move(status);
    WriteNextLocked();
  }

  void WriteNextLocked() DROVER_REQUIRES(mu_) {
    if (writing_ || finished_ || done_) return;
    if (ending_) {
      finished_ = true;
      Finish(status_);
      return;
    }
    if (broken_ || !open_) return;  // a broken stream finishes when its read side ends
    out_.Clear();
    if (ack_.has_value()) {
      // First: an agent that waits too long for it fences its jobs.
      *out_.mutable_heartbeat_ack() = std::move(*ack_);
      ack_.reset();
    } else if (pending_.has_value()) {
      *out_.mutable_desired() = std::move(*pending_);
      pending_.reset();
    } else if (!faults_.empty()) {
      *out_.mutable_inject_fault() = std::move(faults_.front());
      faults_.pop_front();
    } else if (!pulls_.empty()) {
      *out_.mutable_pull_image() = std::move(pulls_.front());
      pulls_.pop_front();
    } else {
      return;
    }
    writing_ = true;
    StartWrite(&out_);
  }

  static constexpr size_t kMaxRememberedJobs = 1 << 20;
  static constexpr size_t kMaxQueuedFaults = 64;
  static constexpr size_t kMaxQueuedPulls = 64;

  grpc::CallbackServerContext* const ctx_;
  SessionHost* const host_;
  // Owned by the read side (one reaction at a time).
  v1::AgentMessage in_;
  std::string node_;  // set once the session opened
  int64_t refused_logs_ = 0;

  Mutex mu_;
  std::shared_ptr<SessionReactor> self_ DROVER_GUARDED_BY(mu_);  // until OnDone
  v1::ServerMessage out_ DROVER_GUARDED_BY(mu_);                 // the write in flight
  std::optional<v1::DesiredWorkloads> pending_ DROVER_GUARDED_BY(mu_);
  std::deque<v1::InjectFault> faults_ DROVER_GUARDED_BY(mu_);
  std::deque<v1::PullImage> pulls_ DROVER_GUARDED_BY(mu_);
  std::optional<v1::HeartbeatAck> ack_ DROVER_GUARDED_BY(mu_);
  std::map<std::string, int> sent_attempt_ DROVER_GUARDED_BY(mu_);  // job id -> newest attempt sent
  grpc::Status status_ DROVER_GUARDED_BY(mu_);                      // what Finish says
  bool open_ = false, writing_ = false, broken_ = false, ending_ = false, finished_ = false, done_ = false;
};

// The agent protocol. Join needs only a join token; Register and Session
// need a node credential, and the node they act as is the credential's: a
// name in a message that differs is refused (and audited), never believed.
// The credential is the verified client certificate of a TLS peer when it
// presented one (it wins over any token), else the node token.
class AgentServiceImpl final : public v1::AgentService::WithCallbackMethod_Session<v1::AgentService::Service>,
                               public SessionHost {
 public:
  AgentServiceImpl(ControlLoop* loop, LogStore* logs, ApiService* api, Edge* edge, auth::Authority* authority,
                   const auth::ServerTls* tls)
      : loop_(loop), logs_(logs), api_(api), edge_(edge), authority_(authority), tls_(tls) {}

  using v1::AgentService::WithCallbackMethod_Session<v1::AgentService::Service>::Session;  // the sync one: never called
  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>* Session(grpc::CallbackServerContext* ctx) override {
    return SessionReactor::Start(ctx, this);
  }

  ControlLoop* loop() override { return loop_; }
  LogStore* logs() override { return logs_; }

  void AuditRefusedLog(CallContext* ctx, const std::string& node, const std::string& job_id) override {
    Status refused = PermissionDenied(fmt::format("node '{}' is not running job '{}'", node, job_id.substr(0, 64)));
    spdlog::warn("{}; its log chunks are dropped", refused.message());
    api_->Audit(NodePrincipal(ctx, node), "agent.log", job_id.substr(0, 64), refused);
  }

  void ImageLoaded(const std::string& node, const v1::ImageLoaded& loaded) override { api_->ImageLoaded(node, loaded); }

  // An archive's bytes for a node told to load it, from the offset asked
  // for, in chunks well under the message limit.
  grpc::Status FetchImageArchive(grpc::ServerContext* ctx, const v1::FetchImageArchiveRequest* req,
                                 grpc::ServerWriter<v1::ImageArchiveChunk>* writer) override {
    auto node = NodeOf(ctx, req->node_name(), "agent.fetch-image-archive");
    if (!node.ok()) return rpc::ToGrpc(node.status());
    auto archive = api_->OpenImageArchive(*node, req->load_id());
    if (!archive.ok()) return rpc::ToGrpc(archive.status());
    const auto& [path, size] = *archive;
    if (req->offset() < 0 || req->offset() > size) {
      return rpc::ToGrpc(OutOfRange(fmt::format("offset {} is outside the archive's {} bytes", req->offset(), size)));
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rpc::ToGrpc(NotFound("the archive is gone"));
    constexpr size_t kChunk = 1 << 20;
    v1::ImageArchiveChunk chunk;
    grpc::Status result = grpc::Status::OK;
    for (int64_t at = req->offset(); at < size && !ctx->IsCancelled();) {
      std::string* data = chunk.mutable_data();
      data->resize(static_cast<size_t>(std::min<int64_t>(kChunk, size - at)));
      ssize_t n = ::pread(fd, data->data(), data->size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        result = rpc::ToGrpc(Unavailable(fmt::format("cannot read the archive at {}: {}", at,
                                                     n < 0 ? std::strerror(errno) : "it is shorter than it was")));
        break;
      }
      data->resize(static_cast<size_t>(n));
      at += n;
      if (!writer->Write(chunk)) break;  // the node went away
    }
    ::close(fd);
    return result;
  }

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinResponse* resp) override {
    auth::Principal who;
    who.name = req->node_name().substr(0, 63);
    who.source = ctx->peer();
    Duration retry{0};
    // A certificate is issued only over TLS, by a server holding the CA
    // key. The request is checked before the join token is spent, so that
    // a malformed one does not burn it.
    const bool issue = !req->csr_pem().empty() && tls_ != nullptr && tls_->can_issue();
    Status csr = issue ? auth::ParseCsrPem(req->csr_pem()).status() : Status::Ok();
    Result<std::string> token =
        csr.ok() ? authority_->Join(req->join_token(), req->node_name()) : Result<std::string>(csr);
    std::string certificate;
    if (token.ok() && issue) {
      auto id = auth::ParseToken(*token);
      auto cert = id.ok() ? auth::IssueNodeCertificate(*tls_, req->csr_pem(), req->node_name(), id->id,
                                                       ToUnixNanos(SystemClock::Get()->Now()) / 1'000'000'000)
                          : Result<std::string>(id.status());
      if (cert.ok()) {
        certificate = std::move(*cert);
      } else {
        spdlog::error("node '{}' joined but its certificate could not be issued: {}", who.name,
                      cert.status().message());
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

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
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
    resp->set_leader_epoch(loop_->leader_epoch());
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

 private:
  static auth::Principal NodePrincipal(CallContext* ctx, const std::string& node) {
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
  std::optional<Result<auth::Principal>> CertificateNode(CallContext* ctx) const {
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
  Result<std::string> NodeOf(CallContext* ctx, const std::string& claimed, const char* action) override {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    std::string value = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    std::optional<Result<auth::Principal>> by_cert = CertificateNode(ctx);
    Result<auth::Principal> who =
        by_cert.has_value() ? *by_cert
        : value.empty()
            ? Result<auth::Principal>(Unauthenticated("an agent needs a node credential: join with --join-token"))
            : edge_->AuthenticateBearer(value, ctx->peer());
    const char* credential = by_cert.has_value() ? "certificate" : "credential";
    Status refused;
    if (!who.ok()) {
      refused = who.status();
    } else if (who->role != auth::Role::kNode) {
      refused = PermissionDenied(fmt::format("token '{}' is not a node credential", who->name));
    } else if (who->node != claimed) {
      refused = PermissionDenied(
          fmt::format("the {} of node '{}' cannot act as node '{}'", credential, who->node, claimed.substr(0, 63)));
    } else if (by_cert.has_value() && !value.empty()) {
      // A token sent beside a certificate must be the same node's.
      auto token = edge_->AuthenticateBearer(value, ctx->peer());
      if (!token.ok() || token->role != auth::Role::kNode || token->node != who->node) {
        refused =
            PermissionDenied(fmt::format("the token sent with node '{}''s certificate is not that node's", who->node));
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

std::unique_ptr<grpc::Service> MakeAgentService(ControlLoop* loop, LogStore* logs, ApiService* api, Edge* edge,
                                                auth::Authority* authority, const auth::ServerTls* tls) {
  return std::make_unique<AgentServiceImpl>(loop, logs, api, edge, authority, tls);
}

}  // namespace drover::server
