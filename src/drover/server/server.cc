#include "drover/server/server.h"
#include "drover/common/mutex.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/server_interceptor.h>

#include "drover/auth/audit.h"
#include "drover/auth/certs.h"
#include "drover/auth/cluster_ca.h"
#include "drover/common/address.h"
#include "drover/common/files.h"
#include "drover/common/metrics.h"
#include "drover/http/server.h"
#include "drover/rpc/channel.h"
#include "drover/rpc/convert.h"
#include "drover/server/api_service.h"
#include "drover/server/cluster_metrics.h"
#include "drover/server/control_loop.h"
#include "drover/server/grpc_services.h"
#include "drover/server/log_store.h"
#include "drover/server/rest.h"
#include "drover/store/etcd/etcd_store.h"
#include "drover/store/leader.h"
#include "drover/store/open.h"
#include "drover/store/sqlite/sqlite_store.h"

namespace drover::server {
namespace {

// Largest request a client may send over gRPC; bigger ones get RESOURCE_EXHAUSTED.
constexpr int kMaxGrpcMessageBytes = 4 << 20;

const char* CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

// Counts every gRPC call by method and status code as it completes.
class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(grpc::experimental::ServerRpcInfo* info, metrics::CounterFamily* calls)
      : method_(info->method()), calls_(calls) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status st = methods->GetSendStatus();
      calls_->Inc({{"method", method_}, {"code", CodeName(st.error_code())}});
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  metrics::CounterFamily* calls_;
};

class CountingInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingInterceptorFactory(metrics::CounterFamily* calls) : calls_(calls) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new CountingInterceptor(info, calls_);
  }

 private:
  metrics::CounterFamily* calls_;
};

// Without TLS, a token crosses the network in the clear: listening beyond
// loopback needs TLS, or --insecure said in so many words. (Tokens are
// required on every listener either way.)
Status CheckExposure(const ServerOptions& o, bool tls) {
  for (const std::string& listen : {o.grpc_listen, o.http_listen}) {
    if (!IsLoopbackHost(HostOf(listen)) && !tls && !o.insecure) {
      return FailedPrecondition(fmt::format(
          "refusing to listen on '{}' without TLS: tokens would cross the network in the clear; run `drover "
          "certs init --data-dir {}` (or pass --tls-cert, --tls-key and --tls-ca), listen on 127.0.0.1, or pass "
          "--insecure to accept that (docs/security.md)",
          listen, o.data_dir));
    }
  }
  return Status::Ok();
}

int64_t NowUnix() { return ToUnixNanos(SystemClock::Get()->Now()) / 1'000'000'000; }

// The TLS files to serve with: the flags, else <data_dir>/tls when `drover
// certs init` wrote a server certificate there. nullopt: plaintext.
Result<std::optional<auth::ServerTls>> LoadTls(const ServerOptions& o, std::string* ca_file) {
  bool any_flag = !o.tls_cert.empty() || !o.tls_key.empty() || !o.tls_ca.empty() || !o.tls_ca_key.empty();
  if (any_flag) {
    if (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty()) {
      return InvalidArgument("TLS needs --tls-cert, --tls-key and --tls-ca together (--tls-ca-key is optional)");
    }
    *ca_file = o.tls_ca;
    DROVER_ASSIGN_OR_RETURN(auth::ServerTls tls,
                            auth::LoadServerTls(o.tls_cert, o.tls_key, o.tls_ca, o.tls_ca_key, NowUnix()));
    return std::optional<auth::ServerTls>(std::move(tls));
  }
  auth::TlsPaths paths = auth::TlsPathsIn(o.data_dir + "/tls");
  std::error_code ec;
  if (!std::filesystem::exists(paths.server_cert, ec)) return std::optional<auth::ServerTls>();
  *ca_file = paths.ca_cert;
  std::string ca_key = std::filesystem::exists(paths.ca_key, ec) ? paths.ca_key : "";
  auto tls = auth::LoadServerTls(paths.server_cert, paths.server_key, paths.ca_cert, ca_key, NowUnix());
  if (!tls.ok()) {
    return FailedPrecondition(
        fmt::format("{} (run `drover certs init --data-dir {}` to renew)", tls.status().message(), o.data_dir));
  }
  return std::optional<auth::ServerTls>(std::move(*tls));
}

// Verifies a client certificate during the TLS handshake: optional (Join
// and token callers present none), but one that is presented must chain to
// the cluster CA, be valid now and be meant for clients. A refusal ends the
// handshake; it is logged and audited (rate-limited: a flood of bad
// handshakes must not fill the audit log). The peer's address is not known
// here; gRPC logs the failed handshake with it.
class ClientCertificateVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  ClientCertificateVerifier(std::string ca_pem, ApiService* api, Edge* edge)
      : ca_pem_(std::move(ca_pem)), api_(api), edge_(edge) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request, std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    grpc::string_ref peer = request->peer_cert();
    if (peer.empty()) {
      *sync_status = grpc::Status::OK;
      return true;
    }
    std::string pem(peer.data(), peer.size());
    Status s = auth::VerifyCertPem(pem, ca_pem_, NowUnix(), auth::Purpose::kClient);
    if (s.ok()) {
      *sync_status = grpc::Status::OK;
      return true;
    }
    auth::Principal who;
    auto info = auth::ParseCertPem(pem);
    who.name = info.ok() ? info->common_name.substr(0, 63) : "";
    who.source = "tls handshake";
    Duration retry{0};
    if (edge_->NoteFailure(who.source, &retry)) {
      spdlog::warn("refused a TLS client certificate '{}' (issuer '{}'): {}", who.name,
                   info.ok() ? info->issuer_common_name.substr(0, 63) : "", s.message());
      api_->Audit(who, "tls.handshake", who.name, s);
    }
    *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, s.message());
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string ca_pem_;
  ApiService* api_;
  Edge* edge_;
};

std::shared_ptr<grpc::ServerCredentials> GrpcTlsCredentials(const auth::ServerTls& tls, ApiService* api, Edge* edge) {
  namespace gx = grpc::experimental;
  auto provider = std::make_shared<gx::StaticDataCertificateProvider>(
      tls.ca_pem, std::vector<gx::IdentityKeyCertPair>{{tls.key_pem, tls.cert_pem}});
  gx::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  // Requested, verified by ClientCertificateVerifier (which can log and
  // audit a refusal; OpenSSL's own check could not).
  options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  options.set_certificate_verifier(
      gx::ExternalCertificateVerifier::Create<ClientCertificateVerifier>(tls.ca_pem, api, edge));
  return grpc::experimental::TlsServerCredentials(options);
}

// The data directory holds every tenant's jobs, environments and logs: its
// owner's only (docs/security.md, "Files"). Made 0700; one found open
// beyond its owner is closed, with a warning. (The roles check everything
// in it before they start a server: apps/drover/data_dir.h.)
Status MakePrivateDataDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot create data directory '{}': {}", dir, ec.message()));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Unavailable(fmt::format("cannot stat data directory '{}': {}", dir, std::strerror(errno)));
  }
  if ((st.st_mode & 077) == 0) return Status::Ok();
  const mode_t mode = st.st_mode & 07700;
  if (::chmod(dir.c_str(), mode) != 0) {
    return FailedPrecondition(fmt::format("data directory '{}' is mode {:04o} and cannot be made {:04o}: {}", dir,
                                          st.st_mode & 07777, mode, std::strerror(errno)));
  }
  spdlog::warn("data directory '{}' was mode {:04o}, open beyond its owner: made {:04o}", dir, st.st_mode & 07777,
               mode);
  return Status::Ok();
}

// Opens the configured store. An etcd that does not answer yet (starting,
// or without a quorum) is waited for, as a standby waits for the lead.
Result<std::unique_ptr<store::Store>> OpenStoreWaiting(const ServerOptions& o, const store::EtcdOptions& etcd) {
  auto last_said = std::chrono::steady_clock::time_point();
  while (true) {
    auto opened = store::OpenStore(o.store, o.data_dir + "/drover.db", etcd, SystemClock::Get());
    if (opened.ok() || !store::IsEtcdSpec(o.store) || opened.status().code() != Code::kUnavailable) return opened;
    if (o.stop != nullptr && o.stop->load()) return Status(Code::kCancelled, "stopped while waiting for etcd");
    if (std::chrono::steady_clock::now() - last_said > std::chrono::seconds(10)) {
      spdlog::warn("waiting for etcd: {}", opened.status().message());
      last_said = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// Stands by until this server leads (an etcd store). The leader key holds
// where clients reach it.
// What a standby's HTTP port answers (gRPC stays closed: agents and the CLI
// find the leader by trying their list). GET /healthz is 200 (the process
// is well; /readyz and everything else are not served here), the rest 503
// with where the leader is, so that a load balancer's readiness check
// picks the leader, and a person or script pointed at a standby is told
// where to go: the JSON error with "leader": {"grpc", "http"}, and
// X-Drover-Leader: the leader's HTTP address.
class StandbyAnswer {
 public:
  void SetLeader(std::string identity) {
    MutexLock lock(&mu_);
    leader_ = std::move(identity);
  }
  http::Response operator()(const http::Request& req) {
    if (req.path == "/healthz") return http::Response{200, "text/plain", "ok (standing by)\n"};
    std::string leader;
    {
      MutexLock lock(&mu_);
      leader = leader_;
    }
    std::map<std::string, std::string> headers{{"Retry-After", "1"}};
    auto parsed = nlohmann::json::parse(leader, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object() || parsed.value("http", "").empty()) {
      return http::Response{
          503, "application/json",
          R"({"code": 14, "status": "UNAVAILABLE", "message": "this server stands by, and no server leads yet"})"
          "\n",
          headers};
    }
    const std::string http_address = parsed.value("http", "");
    headers["X-Drover-Leader"] = http_address;
    nlohmann::json body = {{"code", 14},
                           {"status", "UNAVAILABLE"},
                           {"message", fmt::format("this server stands by; the leader is at {} (gRPC {})", http_address,
                                                   parsed.value("grpc", ""))},
                           {"leader", {{"grpc", parsed.value("grpc", "")}, {"http", http_address}}}};
    return http::Response{503, "application/json", body.dump() + "\n", headers};
  }

 private:
  Mutex mu_;
  std::string leader_;  // the leader key's value; "" when unknown
};

Result<std::unique_ptr<store::Leadership>> Campaign(store::Store* store, store::Store* data, const ServerOptions& o,
                                                    const std::function<void(const std::string&)>& standby) {
  auto port_of = [](const std::string& listen) { return listen.substr(listen.rfind(':') + 1); };
  if (port_of(o.grpc_listen) == "0" || port_of(o.http_listen) == "0") {
    return InvalidArgument(
        "with an etcd store, --grpc-listen and --listen need fixed ports: clients find the leader by them");
  }
  std::string host = o.advertise_host;
  if (host.empty()) host = HostOf(o.grpc_listen);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    host = name;
  }
  store::LeaderOptions leader;
  leader.identity = fmt::format("{{\"grpc\": \"{}:{}\", \"http\": \"{}:{}\"}}", host, port_of(o.grpc_listen), host,
                                port_of(o.http_listen));
  leader.ttl = o.leader_ttl;
  leader.on_lost = o.on_leadership_lost;
  leader.data = data;
  spdlog::info("campaigning for leadership as {}", leader.identity);
  return store::Leadership::Campaign(store, std::move(leader), o.stop, [&standby](const std::string& current) {
    standby(current);
    spdlog::info("standing by: the leader is {}", current);
  });
}

class ServerImpl final : public Server {
 public:
  ~ServerImpl() override { Stop(); }

  Status Init(const ServerOptions& o) {
    DROVER_RETURN_IF_ERROR(MakePrivateDataDir(o.data_dir));
    DROVER_ASSIGN_OR_RETURN(store_, OpenStoreWaiting(o, o.etcd));
    store::Store* store = store_.get();
    DROVER_ASSIGN_OR_RETURN(tls_, LoadTls(o, &ca_file_));
    DROVER_RETURN_IF_ERROR(CheckExposure(o, tls_.has_value()));
    if (!tls_.has_value()) ca_file_.clear();
    http::ServerOptions http_options;
    if (tls_) {
      http_options.tls_cert_pem = tls_->cert_pem;
      http_options.tls_key_pem = tls_->key_pem;
    }
    if (store::IsEtcdSpec(o.store)) {
      // The campaign and keep-alives on connections of their own, with a
      // deadline of the TTL (store/leader.h, LeaderOptions::data).
      store::EtcdOptions short_deadline = o.etcd;
      short_deadline.request_timeout =
          std::max<std::chrono::milliseconds>(o.leader_ttl, std::chrono::milliseconds(500));
      DROVER_ASSIGN_OR_RETURN(leader_store_, OpenStoreWaiting(o, short_deadline));
      // While it stands by, its HTTP port says where the leader is.
      auto answer = std::make_shared<StandbyAnswer>();
      std::unique_ptr<http::Server> standby_http;
      auto standby = [&](const std::string& leader) {
        answer->SetLeader(leader);
        if (standby_http) return;
        auto started = http::StartServer(
            o.http_listen, [answer](const http::Request& r) { return (*answer)(r); }, http_options);
        if (started.ok()) {
          standby_http = std::move(*started);
        } else {
          spdlog::warn("a standby cannot listen on {}: {}", o.http_listen, started.status().ToString());
        }
      };
      auto won = Campaign(leader_store_.get(), store, o, standby);
      if (standby_http) standby_http->Stop();  // the port is the leader's now
      standby_http.reset();
      DROVER_ASSIGN_OR_RETURN(leadership_, std::move(won));
      store = leadership_->fenced();
    }
    DROVER_ASSIGN_OR_RETURN(LogStore logs, LogStore::Open(o.data_dir + "/logs"));
    logs_ = std::make_unique<LogStore>(std::move(logs));
    DROVER_ASSIGN_OR_RETURN(archive_, store::Archive::Open(o.data_dir + "/archive.db"));
    // The store keeps the newest 10,000 audit entries; the archive the rest.
    audit_ = std::make_unique<auth::AuditLog>(store, SystemClock::Get(), archive_.get(), 10'000);
    ControlLoopOptions control = o.control;
    control.archive = archive_.get();
    control.audit = audit_.get();
    control.metrics = &metrics_;
    control.watch = &watch_;
    if (leadership_) {
      control.leading = [l = leadership_.get()] { return l->Leading(); };
      control.leader_epoch = leadership_->epoch();
    }
    loop_ = std::make_unique<ControlLoop>(store, SystemClock::Get(), control);
    DROVER_RETURN_IF_ERROR(loop_->Start());
    authority_ = std::make_unique<auth::Authority>(store, SystemClock::Get());
    edge_ = std::make_unique<Edge>(authority_.get(), SystemClock::Get(), o.security);
    admin_token_path_ = o.data_dir + "/admin.token";
    DROVER_ASSIGN_OR_RETURN(bool created, authority_->EnsureBootstrapAdmin(admin_token_path_));
    if (created) spdlog::info("created the admin token in {} (mode 0600); the CLI finds it there", admin_token_path_);
    api_ = std::make_unique<ApiService>(loop_.get(), logs_.get(), authority_.get(), audit_.get(), &watch_);
    api_->EnableImageArchives(o.data_dir + "/image-archives", o.max_image_archive_bytes);

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(
        o.grpc_listen, tls_ ? GrpcTlsCredentials(*tls_, api_.get(), edge_.get()) : grpc::InsecureServerCredentials(),
        &port);
    builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
    DROVER_ASSIGN_OR_RETURN(
        metrics::CounterFamily * grpc_calls,
        metrics_.AddCounter("drover_grpc_requests_total", "gRPC calls served, by method and status code."));
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
    interceptors.push_back(std::make_unique<CountingInterceptorFactory>(grpc_calls));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    ServerFacts facts;
    if (leadership_) facts.leader_epoch = leadership_->epoch();
    if (tls_) {
      for (const auto& [name, pem] : {std::pair{"server", &tls_->cert_pem}, std::pair{"ca", &tls_->ca_pem}}) {
        if (auto info = auth::ParseCertPem(*pem); info.ok()) {
          facts.certificate_not_after_unix.emplace_back(name, info->not_after_unix);
        }
      }
    }
    metrics_.AddCollector([loop = loop_.get(), facts](metrics::Exposition& out) { CollectCluster(loop, facts, out); });
    services_ =
        MakeGrpcServices(api_.get(), loop_.get(), logs_.get(), edge_.get(), authority_.get(), tls_ ? &*tls_ : nullptr);
    for (auto& s : services_) builder.RegisterService(s.get());
    grpc_ = builder.BuildAndStart();
    if (!grpc_ || port == 0) return Unavailable(fmt::format("cannot listen for gRPC on '{}'", o.grpc_listen));
    grpc_address_ = fmt::format("{}:{}", HostOf(o.grpc_listen), port);

    ControlLoop* loop = loop_.get();
    auto ready = [loop]() -> Status {
      auto f = loop->Barrier();
      if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return Unavailable("control loop is busy");
      return f.get().status();
    };
    streams_ = std::make_unique<RestStreams>(api_.get());
    DROVER_ASSIGN_OR_RETURN(http_, http::StartServer(o.http_listen,
                                                     MakeRestHandler({api_.get(), edge_.get(), authority_.get(), ready,
                                                                      &metrics_, streams_.get()}),
                                                     http_options));
    http_address_ = fmt::format("{}:{}", HostOf(o.http_listen), http_->port());
    std::string browse_host = HostOf(o.http_listen);
    if (browse_host == "0.0.0.0" || browse_host == "[::]" || browse_host.empty()) browse_host = "127.0.0.1";
    api_->set_http_base(fmt::format("{}://{}:{}", tls_ ? "https" : "http", browse_host, http_->port()));
    DROVER_ASSIGN_OR_RETURN(std::string login_url, DashboardLoginUrl());
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(o.data_dir + "/dashboard-url", login_url + "\n", 0600));

    // Written last and atomically: its presence means "serving".
    if (Status w =
            WriteFileAtomic(o.data_dir + "/endpoints.json",
                            fmt::format("{{\"grpc\": \"{}\", \"http\": \"{}\"}}\n", grpc_address_, http_address_), 0600,
                            /*durable=*/false);
        !w.ok()) {
      return Unavailable(fmt::format("cannot write endpoints file: {}", w.message()));
    }
    if (tls_) {
      spdlog::info("serving gRPC (TLS) on {} and HTTPS on {}; cluster CA {} ({}){}", grpc_address_, http_address_,
                   ca_file_, tls_->ca_fingerprint, tls_->can_issue() ? "; issuing node certificates at join" : "");
    } else {
      spdlog::info("serving gRPC on {} and HTTP on {}", grpc_address_, http_address_);
    }
    if (leadership_) {
      // etcd's leader elsewhere than this machine: checked now and every
      // second (store::MoveEtcdLeaderAway; docs/ha.md).
      etcd_mover_ = std::thread([this] {
        MutexLock lock(&mover_mu_);
        do {
          lock.Unlock();
          if (auto moved = store::MoveEtcdLeaderAway(store_.get()); !moved.ok()) {
            spdlog::debug("cannot move etcd's leadership away: {}", moved.status().ToString());
          }
          lock.Lock();
        } while (!mover_cv_.WaitFor(&mover_mu_, std::chrono::seconds(1),
                                    [this]() DROVER_REQUIRES(mover_mu_) { return mover_stop_; }));
      });
    }
    return Status::Ok();
  }

  auth::Authority* authority() override { return authority_.get(); }
  ApiService* api() override { return api_.get(); }

  Result<std::string> DashboardLoginUrl() override {
    std::ifstream in(admin_token_path_);
    std::string token;
    std::getline(in, token);
    DROVER_ASSIGN_OR_RETURN(auth::Principal admin, authority_->Authenticate(token));
    DROVER_ASSIGN_OR_RETURN(v1::CreateLoginCodeResponse r, api_->CreateLoginCode(admin));
    return r.url();
  }

  std::string grpc_address() const override { return grpc_address_; }
  std::shared_ptr<grpc::Channel> InProcessChannel(const std::string& token) override {
    return rpc::MakeInProcessChannel(grpc_.get(), token);
  }
  std::string http_address() const override { return http_address_; }
  std::string ca_file() const override { return ca_file_; }

  void Stop() override {
    {
      MutexLock lock(&mover_mu_);
      mover_stop_ = true;
    }
    mover_cv_.SignalAll();
    if (etcd_mover_.joinable()) etcd_mover_.join();
    if (http_) http_->Stop();
    // Long streams (agent sessions, followed logs) are cancelled after the deadline.
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (loop_) loop_->Stop();
    if (leadership_) leadership_->StepDown();  // a standby takes over now, not a TTL from now
  }

 private:
  metrics::Registry metrics_;  // outlives everything that records into it
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<store::Store> leader_store_;     // the campaign's (etcd only)
  std::unique_ptr<store::Leadership> leadership_;  // with an etcd store; everything below writes through it
  std::thread etcd_mover_;                         // while leading on etcd: keeps etcd's leader on another machine
  Mutex mover_mu_;
  CondVar mover_cv_;
  bool mover_stop_ DROVER_GUARDED_BY(mover_mu_) = false;
  std::unique_ptr<store::Archive> archive_;  // after store_: the loop (destroyed first) writes to it
  std::unique_ptr<LogStore> logs_;
  JobWatch watch_;                         // outlives the loop that publishes to it and the services that subscribe
  std::unique_ptr<auth::AuditLog> audit_;  // before loop_: the loop records into it
  std::unique_ptr<ControlLoop> loop_;
  std::unique_ptr<auth::Authority> authority_;
  std::unique_ptr<Edge> edge_;
  std::optional<auth::ServerTls> tls_;  // immutable once loaded; the services keep a pointer
  std::string ca_file_;
  std::string admin_token_path_;
  std::unique_ptr<ApiService> api_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<RestStreams> streams_;  // its streams live on http_'s connections
  std::unique_ptr<http::Server> http_;
  std::string grpc_address_;
  std::string http_address_;
};

}  // namespace

Result<std::unique_ptr<Server>> StartServer(const ServerOptions& options) {
  auto server = std::make_unique<ServerImpl>();
  DROVER_RETURN_IF_ERROR(server->Init(options));
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace drover::server
