#include "drover/agent/connection.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "drover/auth/certs.h"
#include "drover/common/files.h"
#include "drover/common/mutex.h"
#include "drover/rpc/channel.h"
#include "drover/v1/agent.grpc.pb.h"

namespace drover::agent {
namespace {

constexpr auto kFirstBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::milliseconds(5000);
constexpr auto kCallDeadline = std::chrono::seconds(5);

int64_t MonoNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ConnectionImpl;

// One Session stream. Writes start on the agent's loop, outside gRPC's
// reactions, so the stream keeps a hold until it will write no more
// (closed_); reads are handed to the connection as they complete.
class SessionCall final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::ServerMessage> {
 public:
  explicit SessionCall(ConnectionImpl* owner) : owner_(owner) {}

  void Begin(std::shared_ptr<SessionCall> self, v1::AgentService::Stub* stub, const v1::AgentMessage& hello) {
    self_ = std::move(self);
    stub->async()->Session(&ctx_, this);
    AddHold();
    StartRead(&in_);
    Write(hello);
    StartCall();
  }

  // Any thread. False once the stream is closing.
  bool Write(const v1::AgentMessage& m) {
    size_t n = m.ByteSizeLong();
    bool overflow = false;
    {
      MutexLock lock(&mu_);
      if (closed_) return false;
      if (queued_bytes_ + n > ServerConnection::kMaxQueuedBytes) {
        overflow = true;
      } else {
        queue_.push_back(m);
        queued_bytes_ += n;
        if (!writing_) {
          writing_ = true;
          StartWrite(&queue_.front());
        }
      }
    }
    if (overflow) {
      spdlog::warn("the server has not read {} MiB of this agent's messages; resetting the session",
                   ServerConnection::kMaxQueuedBytes >> 20);
      Cancel();
      return false;
    }
    return true;
  }

  size_t queued_bytes() {
    MutexLock lock(&mu_);
    return queued_bytes_;
  }

  bool closed() {
    MutexLock lock(&mu_);
    return closed_;
  }

  // Whether the server said anything on this session.
  bool heard() const { return heard_.load(); }

  void Cancel() { ctx_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    bool release = false;
    {
      MutexLock lock(&mu_);
      queued_bytes_ -= queue_.front().ByteSizeLong();
      queue_.pop_front();
      if (!ok) closed_ = true;
      if (!closed_ && !queue_.empty()) {
        StartWrite(&queue_.front());
      } else {
        writing_ = false;
        release = ReleaseLocked();
      }
    }
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // True once: the stream will start no more writes, so the hold can go.
  bool ReleaseLocked() DROVER_REQUIRES(mu_) {
    if (!closed_ || writing_ || released_) return false;
    released_ = true;
    return true;
  }

  ConnectionImpl* const owner_;
  grpc::ClientContext ctx_;
  v1::ServerMessage in_;  // the read in flight
  std::atomic<bool> heard_{false};
  std::shared_ptr<SessionCall> self_;  // until OnDone
  Mutex mu_;
  std::deque<v1::AgentMessage> queue_ DROVER_GUARDED_BY(mu_);  // front: the write in flight
  size_t queued_bytes_ DROVER_GUARDED_BY(mu_) = 0;
  bool writing_ DROVER_GUARDED_BY(mu_) = false;
  bool closed_ DROVER_GUARDED_BY(mu_) = false;
  bool released_ DROVER_GUARDED_BY(mu_) = false;
};

// A unary call in flight (Join, Register).
template <typename Request, typename Response>
struct UnaryCall {
  std::unique_ptr<v1::AgentService::Stub> own_stub;  // a join's own channel
  grpc::ClientContext ctx;
  Request req;
  Response resp;
  int64_t sent_ns = 0;
  std::string key;  // a join's node key, for its certificate
};

// One FetchImageArchive: the chunks go to the file as they come; a server
// that sends more than the archive's size is cut off.
class ArchiveFetch final : public grpc::ClientReadReactor<v1::ImageArchiveChunk> {
 public:
  ArchiveFetch(ConnectionImpl* owner, int fd, int64_t size, std::function<void(Status)> done)
      : owner_(owner), fd_(fd), size_(size), done_(std::move(done)) {}
  ~ArchiveFetch() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void Begin(std::shared_ptr<ArchiveFetch> self, v1::AgentService::Stub* stub, v1::FetchImageArchiveRequest req) {
    self_ = std::move(self);
    req_ = std::move(req);
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
    stub->async()->FetchImageArchive(&ctx_, &req_, this);
    StartRead(&chunk_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    const std::string& data = chunk_.data();
    if (static_cast<int64_t>(data.size()) > size_ - written_) {
      error_ = fmt::format("the server sent more than the archive's {} bytes", size_);
      ctx_.TryCancel();
      return;
    }
    for (size_t at = 0; at < data.size();) {
      ssize_t n = ::write(fd_, data.data() + at, data.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error_ = fmt::format("cannot write the archive: {}", std::strerror(errno));
        ctx_.TryCancel();
        return;
      }
      at += static_cast<size_t>(n);
    }
    written_ += static_cast<int64_t>(data.size());
    StartRead(&chunk_);
  }
  void OnDone(const grpc::Status& s) override;

 private:
  ConnectionImpl* owner_;
  int fd_;
  const int64_t size_;
  int64_t written_ = 0;
  std::string error_;
  std::function<void(Status)> done_;
  std::shared_ptr<ArchiveFetch> self_;
  grpc::ClientContext ctx_;
  v1::FetchImageArchiveRequest req_;
  v1::ImageArchiveChunk chunk_;

  Status Outcome() {
    if (!error_.empty()) return Unavailable(error_);
    if (::fsync(fd_) != 0) return Unavailable(fmt::format("cannot write the archive: {}", std::strerror(errno)));
    if (written_ != size_) {
      return Unavailable(fmt::format("the server sent {} of the archive's {} bytes", written_, size_));
    }
    return Status::Ok();
  }
  friend class ConnectionImpl;
};

class ConnectionImpl final : public ServerConnection {
 public:
  ConnectionImpl(ConnectionOptions o, runtime::EventLoop* loop, ConnectionEvents e)
      : opts_(std::move(o)), events_(std::move(e)), tasks_(loop) {
    // "a:7070,b:7070,c:7070": the leader and its standbys (docs/ha.md).
    for (size_t begin = 0; begin <= opts_.server_address.size();) {
      size_t comma = std::min(opts_.server_address.find(',', begin), opts_.server_address.size());
      if (comma > begin) servers_.push_back(opts_.server_address.substr(begin, comma - begin));
      begin = comma + 1;
    }
    if (servers_.empty()) servers_.push_back(opts_.server_address);
  }
  ~ConnectionImpl() override { Stop(); }

  // The cluster CA the server is verified with: --ca-file, else the one a
  // join over TLS kept in <data_dir>/ca.crt; "" (plaintext) when neither.
  Status LoadCa() {
    std::string path = opts_.ca_file.empty() ? DataFile("ca.crt") : opts_.ca_file;
    std::error_code ec;
    if (opts_.ca_file.empty() && !std::filesystem::exists(path, ec)) return Status::Ok();
    auto pem = ReadTextFile(path);
    if (!pem.ok()) return InvalidArgument(fmt::format("the cluster CA: {}", pem.status().message()));
    auto info = auth::ParseCertPem(*pem);
    if (!info.ok() || !info->is_ca) {
      return InvalidArgument(
          fmt::format("'{}' is not a CA certificate{}", path, info.ok() ? "" : ": " + info.status().message()));
    }
    ca_pem_ = std::move(*pem);
    spdlog::info("node '{}' verifies the server with the cluster CA {} ({})", opts_.node_name, path, info->fingerprint);
    return Status::Ok();
  }

  void Begin() override {
    tasks_.Post([this] { Connect(); });
  }

  bool Send(const v1::AgentMessage& m) override { return session_ != nullptr && session_->Write(m); }
  bool connected() const override { return session_ != nullptr && !session_->closed(); }
  size_t queued_bytes() const override { return session_ == nullptr ? 0 : session_->queued_bytes(); }
  void MoveOn() override {
    if (servers_.size() < 2 || session_ == nullptr || moving_on_) return;
    moving_on_ = true;
    session_->Cancel();
  }

  void Stop() override {
    std::vector<std::function<void()>> cancels;
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
      for (auto& [key, cancel] : cancels_) cancels.push_back(cancel);
    }
    for (auto& cancel : cancels) cancel();
    {
      MutexLock lock(&mu_);
      idle_.Wait(&mu_, [this]() DROVER_REQUIRES(mu_) { return in_flight_ == 0; });
    }
    tasks_.Close();
    session_.reset();
  }

  void FetchImageArchive(const std::string& load_id, const std::string& path, int64_t size,
                         std::function<void(Status)> done) override {
    if (session_ == nullptr || !stub_) {
      done(Unavailable("the node has no session with the server"));
      return;
    }
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      done(Unavailable(fmt::format("cannot write the archive to '{}': {}", path, std::strerror(errno))));
      return;
    }
    auto fetch = std::make_shared<ArchiveFetch>(this, fd, size, std::move(done));
    if (!Track(fetch.get(), [fetch] { fetch->Cancel(); })) return;
    v1::FetchImageArchiveRequest req;
    req.set_load_id(load_id);
    req.set_node_name(opts_.node_name);
    fetch->Begin(fetch, stub_.get(), std::move(req));
  }

  // ---- from the calls (gRPC's threads) ----

  void FetchEnded(std::shared_ptr<ArchiveFetch> fetch, grpc::Status status) {
    Forget(fetch.get());
    Status result = status.ok() || !fetch->error_.empty()
                        ? fetch->Outcome()
                        : Unavailable(fmt::format("cannot fetch the archive: {}", status.error_message()));
    tasks_.Post([fetch = std::move(fetch), result]() mutable {
      auto done = std::move(fetch->done_);
      fetch.reset();  // the file is closed before the caller reads it
      done(result);
    });
    Done();
  }

  void Deliver(SessionCall* call, v1::ServerMessage m) {
    tasks_.Post([this, call, m = std::move(m)]() mutable {
      if (call == session_.get()) events_.message(std::move(m));
    });
  }

  void Ended(std::shared_ptr<SessionCall> call, grpc::Status status) {
    SessionCall* key = call.get();
    Forget(key);
    tasks_.Post([this, call = std::move(call), status] { OnSessionEnded(call.get(), status); });
    Done();
  }

 private:
  // ---- calls in flight: Stop cancels them and waits for their end ----

  // False when stopping: the call must not start.
  bool Track(const void* key, std::function<void()> cancel) {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    cancels_.emplace(key, std::move(cancel));
    ++in_flight_;
    return true;
  }
  void Forget(const void* key) {
    MutexLock lock(&mu_);
    cancels_.erase(key);
  }
  // The last thing a call's completion does: `this` may go right after.
  void Done() {
    MutexLock lock(&mu_);
    if (--in_flight_ == 0) idle_.SignalAll();
  }
  bool stopping() {
    MutexLock lock(&mu_);
    return stopping_;
  }

  // Starts a unary call, `start(ctx, request, response, done)`, with a
  // deadline and tracked for Stop; `then` gets its answer on the loop.
  template <typename Call, typename Start>
  void StartUnary(std::shared_ptr<Call> call, Start start, void (ConnectionImpl::*then)(Call&, const grpc::Status&)) {
    call->ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    if (!Track(call.get(), [call] { call->ctx.TryCancel(); })) return;
    // The call (its context holds the channel) is handed to the loop, not
    // kept by the callback: its last reference must not go on a gRPC
    // thread (rpc::HoldCallbackQueue says why).
    start(&call->ctx, &call->req, &call->resp, [this, call, then](grpc::Status s) mutable {
      Forget(call.get());
      tasks_.Post([this, call = std::move(call), then, s] { (this->*then)(*call, s); });
      Done();
    });
  }

  // ---- on the agent's loop ----

  void Connect() {
    if (stopping()) return;
    if (token_.empty()) token_ = opts_.token.empty() ? StoredToken() : opts_.token;
    if (!token_.empty()) {
      Register();
    } else if (!opts_.join_token.empty()) {
      Join();
    } else {
      spdlog::error("node '{}' has no credential: start the agent with --join-token", opts_.node_name);
      Retry(/*reset=*/false);
    }
  }

  void Retry(bool reset) {
    // Several servers (a leader and its standbys, which do not listen): a
    // failure moves on to the next one at once; the back-off grows only
    // when a whole round of them failed.
    if (!reset && servers_.size() > 1 && ++failed_in_round_ < servers_.size()) {
      tasks_.PostAfter(kFirstBackoff, [this] { Connect(); });
      return;
    }
    failed_in_round_ = 0;
    backoff_ = reset ? kFirstBackoff : std::min(backoff_ * 2, std::chrono::milliseconds(kMaxBackoff));
    tasks_.PostAfter(backoff_, [this] { Connect(); });
  }

  std::string DataFile(const char* name) const { return opts_.data_dir + "/" + name; }

  // The server to dial now; DropStub moves on to the next.
  const std::string& Server() const { return servers_[server_ % servers_.size()]; }
  void DropStub() {
    stub_.reset();
    ++server_;
  }

  // What an earlier join stored in <data_dir>/node.token.
  std::string StoredToken() const {
    std::string token;
    if (std::ifstream in(DataFile("node.token")); in) std::getline(in, token);
    return token;
  }

  // A join with the one-time join token. Over TLS (the agent knows the
  // cluster CA) it also asks for a certificate: a key made here and kept in
  // <data_dir>/node.key (0600), a CSR for it, and the certificate the
  // server returns in node.crt.
  void Join() {
    using Call = UnaryCall<v1::JoinRequest, v1::JoinResponse>;
    auto call = std::make_shared<Call>();
    std::error_code ec;
    std::filesystem::create_directories(opts_.data_dir, ec);
    call->req.set_join_token(opts_.join_token);
    call->req.set_node_name(opts_.node_name);
    if (!ca_pem_.empty()) {
      auto k = NodeKey();
      auto csr = k.ok() ? auth::MakeCsrPem(*k, opts_.node_name) : Result<std::string>(k.status());
      if (!csr.ok()) {
        spdlog::error("node '{}' cannot make a certificate request: {}", opts_.node_name, csr.status().message());
        Retry(false);
        return;
      }
      call->key = *k;
      call->req.set_csr_pem(*csr);
    }
    call->own_stub = v1::AgentService::NewStub(rpc::MakeChannel(Server(), "", ChannelCredentials(false)));
    auto* api = call->own_stub->async();
    StartUnary(
        call, [api](auto... args) { api->Join(args...); }, &ConnectionImpl::OnJoined);
  }

  void OnJoined(UnaryCall<v1::JoinRequest, v1::JoinResponse>& call, const grpc::Status& s) {
    if (!s.ok()) {
      spdlog::error("node '{}' could not join through {}: {}", opts_.node_name, Server(), s.error_message());
      ++server_;  // the next try goes to the next server (a standby does not listen)
      Retry(false);
      return;
    }
    const v1::JoinResponse& resp = call.resp;
    if (!resp.certificate_pem().empty()) {
      // Checked before it is kept: the server answered over a connection
      // verified with the CA, but a certificate for another key or CA would
      // only fail later, at every handshake.
      Status ok = auth::CheckKeyMatchesCert(call.key, resp.certificate_pem());
      if (ok.ok()) ok = auth::VerifyCertPem(resp.certificate_pem(), ca_pem_, NowUnix(), auth::Purpose::kClient);
      if (ok.ok()) ok = WriteFileAtomic(DataFile("node.crt"), resp.certificate_pem(), 0644);
      if (ok.ok() && !opts_.ca_file.empty()) ok = WriteFileAtomic(DataFile("ca.crt"), ca_pem_, 0644);
      if (!ok.ok()) {
        spdlog::error("node '{}' joined but cannot use the certificate it was issued: {}", opts_.node_name,
                      ok.message());
      } else {
        spdlog::info("node '{}' was issued a certificate, kept in {}", opts_.node_name, DataFile("node.crt"));
      }
    }
    const std::string path = DataFile("node.token");
    if (Status w = WriteFileAtomic(path, resp.node_token() + "\n", 0600); !w.ok()) {
      spdlog::error("node '{}' joined but cannot keep its credential: {}", opts_.node_name, w.message());
    } else {
      spdlog::info("node '{}' joined; its credential is in {}", opts_.node_name, path);
    }
    token_ = resp.node_token();
    Connect();
  }

  // This node's private key: the one in <data_dir>/node.key, else a new one
  // written there (0600) first, so that a certificate issued for it is never
  // without its key.
  Result<std::string> NodeKey() {
    const std::string path = DataFile("node.key");
    if (auto existing = ReadTextFile(path); existing.ok()) return existing;
    DROVER_ASSIGN_OR_RETURN(std::string key, auth::GenerateKeyPem());
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(path, key, 0600));
    return key;
  }

  // TLS credentials for the channel (plaintext without a CA). With
  // `client_cert`, the node's certificate when it has one that is valid
  // now: an expired or foreign one is left out (the node token still
  // authenticates), said loudly.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(bool client_cert) {
    if (ca_pem_.empty()) return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ca_pem_;
    if (client_cert) {
      auto cert = ReadTextFile(DataFile("node.crt"));
      auto key = ReadTextFile(DataFile("node.key"));
      if (cert.ok() && key.ok()) {
        Status usable = auth::CheckKeyMatchesCert(*key, *cert);
        if (usable.ok()) usable = auth::VerifyCertPem(*cert, ca_pem_, NowUnix(), auth::Purpose::kClient);
        if (usable.ok()) {
          auto info = auth::ParseCertPem(*cert);
          if (info.ok() && info->not_after_unix - NowUnix() < 30 * 24 * 3600) {
            spdlog::warn("node '{}': its certificate expires in less than 30 days (renewal: docs/security.md)",
                         opts_.node_name);
          }
          spdlog::info("node '{}' presents its certificate {}", opts_.node_name, DataFile("node.crt"));
          o.pem_private_key = std::move(*key);
          o.pem_cert_chain = std::move(*cert);
        } else {
          spdlog::error("node '{}' leaves its certificate {} out: {}; it authenticates with its node token only",
                        opts_.node_name, DataFile("node.crt"), usable.message());
        }
      }
    }
    return grpc::SslCredentials(o);
  }

  void Register() {
    // A fresh channel after a failure: the certificate is looked at again.
    if (!stub_) {
      stub_ = v1::AgentService::NewStub(opts_.channel ? opts_.channel(token_)
                                                      : rpc::MakeChannel(Server(), token_, ChannelCredentials(true)));
    }
    using Call = UnaryCall<v1::RegisterRequest, v1::RegisterResponse>;
    auto call = std::make_shared<Call>();
    call->req = events_.make_register();
    // The lease counts from the registration at the earliest: the server
    // renews it when the session opens, after this.
    call->sent_ns = MonoNanos();
    auto* api = stub_->async();
    StartUnary(
        call, [api](auto... args) { api->Register(args...); }, &ConnectionImpl::OnRegistered);
  }

  void OnRegistered(UnaryCall<v1::RegisterRequest, v1::RegisterResponse>& call, const grpc::Status& s) {
    if (!s.ok()) {
      spdlog::debug("node '{}' cannot register: {}", opts_.node_name, s.error_message());
      if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT || s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        spdlog::error("node '{}' was refused: {}", opts_.node_name, s.error_message());
      }
      DropStub();
      Retry(false);
      return;
    }
    // A server that leads an older epoch than one already seen was deposed
    // and does not know it yet (docs/ha.md): it is not followed.
    if (call.resp.leader_epoch() < highest_epoch_) {
      spdlog::warn(
          "node '{}': {} leads epoch {}, older than epoch {} seen before: a deposed leader; trying the next server",
          opts_.node_name, Server(), call.resp.leader_epoch(), highest_epoch_);
      DropStub();
      Retry(false);
      return;
    }
    highest_epoch_ = call.resp.leader_epoch();
    failed_in_round_ = 0;
    auto session = std::make_shared<SessionCall>(this);
    if (!Track(session.get(), [session] { session->Cancel(); })) return;
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name(opts_.node_name);
    session_ = session;
    session->Begin(session, stub_.get(), hello);
    events_.connected(call.resp, call.sent_ns);
  }

  void OnSessionEnded(SessionCall* call, const grpc::Status& status) {
    if (call != session_.get()) return;
    bool heard = call->heard();
    session_.reset();
    if (events_.disconnected) events_.disconnected();
    if (stopping()) return;
    spdlog::warn("node '{}' session ended: {}", opts_.node_name, status.error_message());
    // A dead or deposed leader refuses the next registration, which moves
    // on to the next server; so does a session left with MoveOn.
    const bool moved_on = std::exchange(moving_on_, false);
    if (!heard || moved_on) DropStub();
    // A session the server never answered does not reset the back-off: a
    // server that refuses every hello is not asked ten times a second.
    Retry(/*reset=*/heard && !moved_on);
  }

  const ConnectionOptions opts_;
  const ConnectionEvents events_;
  std::string ca_pem_;  // the cluster CA; "" for plaintext. Set by LoadCa, then read-only.

  Mutex mu_;
  CondVar idle_;
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  std::map<const void*, std::function<void()>> cancels_ DROVER_GUARDED_BY(mu_);  // calls in flight
  int in_flight_ DROVER_GUARDED_BY(mu_) = 0;

  // Owned by the loop.
  std::string token_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::shared_ptr<SessionCall> session_;
  std::chrono::milliseconds backoff_ = kFirstBackoff;
  std::vector<std::string> servers_;  // set by the constructor
  size_t server_ = 0;                 // which of servers_ the next stub dials
  size_t failed_in_round_ = 0;
  bool moving_on_ = false;     // MoveOn ended the session
  int64_t highest_epoch_ = 0;  // the newest leadership a registration was answered by

  runtime::LoopClient tasks_;  // last: closed (Stop) before the rest goes
};

void SessionCall::OnReadDone(bool ok) {
  if (ok) {
    heard_.store(true);
    owner_->Deliver(this, std::move(in_));
    in_.Clear();
    StartRead(&in_);
    return;
  }
  bool release = false;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    release = ReleaseLocked();
  }
  if (release) RemoveHold();
}

void ArchiveFetch::OnDone(const grpc::Status& s) {
  // `self_` may be the last reference: nothing of this is touched after.
  owner_->FetchEnded(std::move(self_), s);
}

void SessionCall::OnDone(const grpc::Status& status) {
  // `self` may be the last reference: nothing of this is touched after.
  owner_->Ended(std::move(self_), status);
}

}  // namespace

Result<std::unique_ptr<ServerConnection>> ServerConnection::Create(ConnectionOptions options, runtime::EventLoop* loop,
                                                                   ConnectionEvents events) {
  auto c = std::make_unique<ConnectionImpl>(std::move(options), loop, std::move(events));
  DROVER_RETURN_IF_ERROR(c->LoadCa());
  return std::unique_ptr<ServerConnection>(std::move(c));
}

}  // namespace drover::agent
