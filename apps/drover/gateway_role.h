#pragma once
// The gateway as a role (docs/gateway.md): the OpenAI-compatible proxy of
// drover/gateway fed by a control plane over DeploymentService. The same
// code runs inside `drover up` and `drover server` (over the server's
// in-process channel) and as `drover gateway` on a machine of its own (over
// gRPC to the servers, several behind any load balancer).
//
// A feeder thread keeps the gateway's routes in step with
// DeploymentService.Endpoints (every refresh period), sends what the
// gateway saw to DeploymentService.ReportLoad (every report period: the
// auto-scaler's input), and the gateway asks DeploymentService.ResolveKey
// for an API key it has not seen (it caches the answer for about a second,
// so a revoked key stops working within that).
//
// Thread-safety: Start and Stop from one thread; the rest from any.

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "drover/common/status.h"
#include "drover/gateway/gateway.h"

namespace drover::app {

struct GatewayRoleOptions {
  gateway::GatewayOptions gateway;
  // A channel to the control plane carrying a token that may read every
  // deployment, resolve keys and report load (an admin's).
  std::function<std::shared_ptr<grpc::Channel>()> channel;
  std::chrono::milliseconds refresh{250};
  std::chrono::milliseconds report{1000};
  // Names this gateway in load reports; "" makes one from the pid and port.
  std::string id;
};

class GatewayRole {
 public:
  static Result<std::unique_ptr<GatewayRole>> Start(GatewayRoleOptions options);
  ~GatewayRole();
  GatewayRole(const GatewayRole&) = delete;
  GatewayRole& operator=(const GatewayRole&) = delete;

  uint16_t port() const;
  void Stop();

  struct State;

 private:
  explicit GatewayRole(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// The gateway's flags, shared by `up`, `server` and `gateway`.
struct GatewayFlags {
  std::string listen = "127.0.0.1:7080";  // "" or "off": no gateway (up, server)
  int threads = 2;
  bool affinity = false;
  bool scrape_engine_metrics = false;
  std::string embeddings_batch = "0";  // a window, e.g. 2ms
  std::string cold_start_wait = "2m";
  std::string max_body = "4MiB";
  // Serve TLS with this certificate and key (PEM files): `drover gateway
  // --tls-cert/--tls-key`; for `up` and `server`, the server's own when it
  // serves TLS. Both empty: plaintext.
  std::string tls_cert;
  std::string tls_key;
  bool listen_given = false;  // the flag was given (else a busy default port is not fatal)
};
// `standalone`: the flags of `drover gateway` (its --listen); otherwise
// --gateway-listen and --gateway-* beside a server's flags.
void AddGatewayFlags(CLI::App* cmd, GatewayFlags* f, bool standalone);
// The options the flags ask for (it reads the TLS files). A listen address
// beyond loopback needs TLS or `insecure`: without TLS, keys would cross
// the network in the clear.
Result<gateway::GatewayOptions> GatewayOptionsFrom(const GatewayFlags& f, bool insecure);
// Whether the flags turn the gateway off.
bool GatewayOff(const GatewayFlags& f);

// Adds "gateway": ADDRESS (host:port) and "gateway_url": the API's base URL
// (http://ADDRESS/v1, or https:// with `tls`) to <data_dir>/endpoints.json
// (written by the server when it serves), where clients and tests find it.
Status AddGatewayToEndpoints(const std::string& data_dir, const std::string& address, bool tls);

// `drover gateway`: a gateway apart from the servers, until SIGINT/SIGTERM.
struct StandaloneGatewayFlags {
  GatewayFlags gateway;
  std::string server = "127.0.0.1:7070";
  std::string token_file;  // else DROVER_TOKEN
  std::string ca_file;     // TLS to the server
  std::string log_level = "info";
  bool insecure = false;
  bool metrics_public = false;
};
void AddStandaloneGatewayCommand(CLI::App& app, StandaloneGatewayFlags* f, int* exit_code);

}  // namespace drover::app
