#pragma once
// Server: the control plane of one machine. Opens the store, rebuilds the
// state, starts the control loop and serves gRPC and HTTP. Used by
// `drover server` and `drover up`.
//
// Once listening it writes <data-dir>/endpoints.json with the bound
// addresses ({"grpc": "127.0.0.1:7070", "http": "127.0.0.1:8080"}), so that
// tools and tests that asked for port 0 can find it.
//
// Security (docs/security.md): on first start it creates an admin token in
// <data-dir>/admin.token (mode 0600), which the CLI finds there; on every
// start it writes a one-time dashboard login link to <data-dir>/dashboard-url
// (mode 0600). With a certificate (<data-dir>/tls/server.crt from `drover
// certs init`, or the --tls-* files) both listeners serve TLS; gRPC asks for
// an optional client certificate, which must chain to the cluster CA.

#include <grpcpp/channel.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "drover/auth/authority.h"
#include "drover/common/status.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop.h"
#include "drover/server/edge.h"
#include "drover/store/etcd/etcd_store.h"

namespace drover::server {

struct ServerOptions {
  std::string data_dir = ".drover";
  std::string grpc_listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:8080";
  // Scheduler policies and tenants (MakeControlLoopOptions).
  ControlLoopOptions control = {};
  // Host names, public metrics, rate limits (edge.h).
  SecurityOptions security = {};
  // Listening on a non-loopback address without TLS is refused unless this
  // is set (`--insecure`): tokens would cross the network in the clear.
  bool insecure = false;
  // TLS files (--tls-cert, --tls-key, --tls-ca, --tls-ca-key). When none is
  // given and <data_dir>/tls/server.crt exists, the files of `drover certs
  // init` there are used (with ca.key when present: node certificates are
  // issued at join). The CA key is optional: without it agents join with a
  // node token only.
  std::string tls_cert = {};
  std::string tls_key = {};
  std::string tls_ca = {};
  std::string tls_ca_key = {};
  // Where the state lives (store/open.h): "" is <data_dir>/drover.db;
  // "etcd://HOST:PORT,.../NAMESPACE" makes this one of several servers
  // (docs/ha.md): StartServer first campaigns for leadership and stands by
  // (not listening) until it leads; every write is then fenced by its
  // leadership. `etcd` gives the TLS files, timeout and limits of that etcd.
  std::string store = {};
  store::EtcdOptions etcd = {};
  std::chrono::milliseconds leader_ttl{1000};
  // The host clients and agents reach this server at, stored with the
  // leadership; "" is the listen host, or the machine's name when that is
  // a wildcard.
  std::string advertise_host = {};
  // The largest archive NodeService.LoadImage takes; spooled under
  // <data_dir>/image-archives.
  int64_t max_image_archive_bytes = int64_t{64} << 30;
  // Ends a standby's wait (StartServer returns kCancelled).
  const std::atomic<bool>* stop = nullptr;
  // Called once if this server loses its leadership (its lease ended, or a
  // write was refused because another leads now). By then it has stopped
  // sending to agents; the process should end or start over as a standby.
  std::function<void(const Status&)> on_leadership_lost = {};
};

class Server {
 public:
  virtual ~Server() = default;
  virtual std::string grpc_address() const = 0;
  virtual std::string http_address() const = 0;
  // The CA file clients verify this server with; "" when it serves plaintext.
  virtual std::string ca_file() const = 0;
  // Tokens for in-process agents and the live workload (`drover up`).
  virtual auth::Authority* authority() = 0;
  // The management API in this process, for the in-process gateway
  // (docs/deployments.md): api()->ResolveGatewayKey(token), and
  // api()->Endpoints / ReportLoad as GatewayPrincipal().
  virtual ApiService* api() = 0;
  // A gRPC channel into this server from its own process, carrying `token`
  // (`drover up`'s own agent: no socket between the two). Valid while the
  // server runs; Stop() ends its calls.
  virtual std::shared_ptr<grpc::Channel> InProcessChannel(const std::string& token) = 0;
  // A one-time dashboard login URL for the bootstrap admin.
  virtual Result<std::string> DashboardLoginUrl() = 0;
  // Stops serving; idempotent.
  virtual void Stop() = 0;
};

Result<std::unique_ptr<Server>> StartServer(const ServerOptions& options);

}  // namespace drover::server
