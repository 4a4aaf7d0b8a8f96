#include "gateway_role.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "drover/auth/token.h"
#include "drover/common/address.h"
#include "drover/common/config.h"
#include "drover/common/files.h"
#include "drover/common/quantity.h"
#include "drover/rpc/channel.h"
#include "drover/rpc/convert.h"
#include "drover/runtime/logging.h"
#include "drover/v1/api.grpc.pb.h"
#include "ha.h"

namespace drover::app {

struct GatewayRole::State {
  GatewayRoleOptions options;
  std::unique_ptr<gateway::Gateway> gw;
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;  // guarded by mu
  std::thread feeder;
  // The stub the feeder and the authenticator share (a gRPC stub is thread-safe).
  std::unique_ptr<v1::DeploymentService::Stub> stub;
  std::string id;
};

namespace {

std::unique_ptr<grpc::ClientContext> Deadline(std::chrono::milliseconds d) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + d);
  return ctx;
}

// A deployment's routing policy; a field left 0 (a server older than the
// field) or a policy this gateway does not know keeps the default.
gateway::RoutingPolicy PolicyFrom(const v1::RoutingSpec& spec) {
  gateway::RoutingPolicy p;
  gateway::RoutingPolicy::Kind kind;
  if (gateway::ParseRoutingKind(spec.policy(), &kind)) p.kind = kind;
  if (spec.prefix_weight() > 0) p.prefix_weight = spec.prefix_weight();
  if (spec.load_weight() > 0) p.load_weight = spec.load_weight();
  if (spec.load_bound() > 0) p.load_bound = spec.load_bound();
  return p;
}

// The routing table Endpoints describes: one route per served model of a
// tenant (names are per tenant), with its ready replicas and its policy.
std::vector<gateway::Route> RoutesFrom(const v1::EndpointsResponse& resp) {
  std::vector<gateway::Route> routes;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;  // (tenant, model, deployment) -> route
  for (const v1::ServingModel& m : resp.models()) {
    index[{m.tenant(), m.model(), m.deployment()}] = routes.size();
    routes.push_back({m.model(), m.deployment(), m.tenant(), m.scales_from_zero(), {}, PolicyFrom(m.routing())});
  }
  for (const v1::ServingEndpoint& e : resp.endpoints()) {
    auto it = index.find({e.tenant(), e.model(), e.deployment()});
    if (it == index.end()) {
      it = index.emplace(std::make_tuple(e.tenant(), e.model(), e.deployment()), routes.size()).first;
      routes.push_back({e.model(), e.deployment(), e.tenant(), false, {}});
    }
    // The replica's secret (a gateway's or admin's token gets it): sent
    // upstream in place of the client's own Authorization header.
    routes[it->second].replicas.push_back({e.replica(), e.address(), e.api_key()});
  }
  return routes;
}

// The gateway's usage rows, every one in each report: the server sums the
// gateways' for the dashboard (GET /api/v1/serving/usage).
void AddUsage(const std::vector<gateway::UsageRow>& rows, v1::ReportLoadRequest* req) {
  for (const gateway::UsageRow& r : rows) {
    v1::GatewayUsage* u = req->add_usage();
    u->set_tenant(r.tenant);
    u->set_model(r.model);
    u->set_key(r.key);
    u->set_requests(r.requests);
    u->set_errors(r.errors);
    u->set_prompt_tokens(r.prompt_tokens);
    u->set_completion_tokens(r.completion_tokens);
    u->set_latency_p50_ms(r.latency_p50_ms);
    u->set_latency_p99_ms(r.latency_p99_ms);
  }
}

void Feed(GatewayRole::State* s) {
  auto next_report = std::chrono::steady_clock::now() + s->options.report;
  bool warned = false;
  for (;;) {
    {
      std::unique_lock lock(s->mu);
      if (s->wake.wait_for(lock, s->options.refresh, [s] { return s->stopping; })) return;
    }
    v1::EndpointsResponse resp;
    auto ctx = Deadline(std::chrono::seconds(5));
    grpc::Status st = s->stub->Endpoints(ctx.get(), v1::EndpointsRequest(), &resp);
    if (st.ok()) {
      s->gw->SetRoutes(RoutesFrom(resp));
      if (warned) spdlog::info("gateway: the control plane answers again");
      warned = false;
    } else if (!warned) {
      // Keep the last routes: replicas serve while the control plane is away.
      spdlog::warn("gateway: cannot read the endpoints ({}); routing with the last ones", st.error_message());
      warned = true;
    }
    if (std::chrono::steady_clock::now() < next_report) continue;
    next_report = std::chrono::steady_clock::now() + s->options.report;
    v1::ReportLoadRequest req;
    req.set_gateway(s->id);
    for (const gateway::ModelLoad& l : s->gw->TakeLoad()) {
      v1::ModelLoad* m = req.add_models();
      m->set_model(l.model);
      m->set_tenant(l.tenant);
      m->set_outstanding(l.outstanding);
      m->set_waiting(l.waiting);
      m->set_requests(l.requests);
      m->set_engine_waiting(l.engine_waiting);
      m->set_queue_ms(l.queue_ms);
      for (const auto& [replica, n] : l.outstanding_by_replica) (*m->mutable_outstanding_by_replica())[replica] = n;
      for (const gateway::ModelLoad::ReplicaRouting& r : l.routing_by_replica) {
        v1::ReplicaRouting& out_r = (*m->mutable_routing_by_replica())[r.replica];
        out_r.set_prefix_blocks(r.prefix_blocks);
        out_r.set_prefix_hit_blocks(r.prefix_hit_blocks);
        out_r.set_engine_load(r.engine_load);
      }
    }
    AddUsage(s->gw->Usage(), &req);
    v1::ReportLoadResponse out;
    auto rctx = Deadline(std::chrono::seconds(5));
    if (grpc::Status rs = s->stub->ReportLoad(rctx.get(), req, &out); !rs.ok() && st.ok()) {
      spdlog::warn("gateway: load report refused: {}", rs.error_message());
    }
  }
}

}  // namespace

Result<std::unique_ptr<GatewayRole>> GatewayRole::Start(GatewayRoleOptions options) {
  if (!options.channel) return InvalidArgument("gateway: no channel to the control plane");
  auto s = std::make_shared<State>();
  s->options = std::move(options);
  s->stub = v1::DeploymentService::NewStub(s->options.channel());
  // The authenticator outlives nothing it captures: the gateway stops (and
  // with it every call) before the state goes.
  State* raw = s.get();
  auto authenticate = [raw](std::string_view token) -> Result<gateway::KeyInfo> {
    // Not a Drover token at all: refused here, without a call.
    DROVER_RETURN_IF_ERROR(auth::ParseToken(token).status());
    v1::ResolveKeyRequest req;
    req.set_token(std::string(token));
    v1::GatewayKey key;
    auto ctx = Deadline(std::chrono::seconds(2));
    grpc::Status st = raw->stub->ResolveKey(ctx.get(), req, &key);
    if (!st.ok()) return rpc::FromGrpc(st);
    gateway::KeyInfo info;
    info.token_id = key.token_id();
    info.name = key.name();
    info.tenant = key.tenant();
    info.admin = key.admin();
    // Inference for the roles that may run work; a viewer (or a role this
    // gateway does not know) lists models only. No role at all: a server
    // older than the field, whose keys keep working as they did.
    const std::string& role = key.role();
    info.read_only = !role.empty() && role != "user" && role != "tenant-admin" && role != "admin";
    info.key_rpm = key.key_requests_per_minute();
    info.key_tpm = key.key_tokens_per_minute();
    info.tenant_rpm = key.tenant_requests_per_minute();
    info.tenant_tpm = key.tenant_tokens_per_minute();
    return info;
  };
  auto gw = gateway::StartGateway(s->options.gateway, std::move(authenticate), nullptr);
  if (!gw.ok()) return gw.status();
  s->gw = std::move(*gw);
  s->id = s->options.id.empty() ? fmt::format("gateway-{}-{}", ::getpid(), s->gw->port()) : s->options.id;
  s->feeder = std::thread([raw] { Feed(raw); });
  return std::unique_ptr<GatewayRole>(new GatewayRole(std::move(s)));
}

GatewayRole::~GatewayRole() { Stop(); }

uint16_t GatewayRole::port() const { return state_->gw->port(); }

void GatewayRole::Stop() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (state_->feeder.joinable()) state_->feeder.join();
  state_->gw->Stop();
}

}  // namespace drover::app

namespace drover::app {
Status AddGatewayToEndpoints(const std::string& data_dir, const std::string& address, bool tls) {
  const std::string path = data_dir + "/endpoints.json";
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return Internal(path + " is not a JSON object");
  j["gateway"] = address;
  j["gateway_url"] = (tls ? "https://" : "http://") + address + "/v1";
  return WriteFileAtomic(path, j.dump() + "\n", 0600);
}

bool GatewayOff(const GatewayFlags& f) { return f.listen.empty() || f.listen == "off"; }

void AddGatewayFlags(CLI::App* cmd, GatewayFlags* f, bool standalone) {
  const std::string p = standalone ? "--" : "--gateway-";
  cmd->add_option(standalone ? "--listen" : "--gateway-listen", f->listen,
                  standalone ? "the OpenAI-compatible API's listen address"
                             : "the OpenAI-compatible gateway's listen address (docs/gateway.md; \"off\": none)")
      ->capture_default_str();
  cmd->add_option(p + "threads", f->threads, "gateway I/O threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag(p + "affinity", f->affinity,
                "gateway: requests with a \"user\" field or an x-session-id header stick to one replica");
  cmd->add_flag(p + "scrape-engine-metrics", f->scrape_engine_metrics,
                "gateway: read each replica's /metrics (vLLM, llama.cpp): route by the engines' own queues too, and "
                "report their queue time (a deployment's --target-queue)");
  cmd->add_option(
         p + "embeddings-batch", f->embeddings_batch,
         "gateway: merge concurrent embedding requests of a model arriving within this window (e.g. 2ms; 0: off)")
      ->capture_default_str();
  cmd->add_option(p + "cold-start-wait", f->cold_start_wait,
                  "gateway: how long a request for a model scaled to zero waits for a replica")
      ->capture_default_str();
  cmd->add_option(p + "max-body", f->max_body, "gateway: the largest request body")->capture_default_str();
  if (standalone) {  // up and server serve the gateway with their own --tls-cert
    cmd->add_option("--tls-cert", f->tls_cert,
                    "serve HTTPS (and wss) with this certificate (PEM: the leaf, then any intermediates)");
    cmd->add_option("--tls-key", f->tls_key, "the private key of --tls-cert (PEM)");
  }
}

Result<gateway::GatewayOptions> GatewayOptionsFrom(const GatewayFlags& f, bool insecure) {
  gateway::GatewayOptions o;
  o.listen = f.listen;
  if (o.listen.rfind(':') == std::string::npos)
    return InvalidArgument("gateway listen '" + f.listen + "' is not HOST:PORT");
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return InvalidArgument("gateway TLS needs both a certificate and its key (--tls-cert and --tls-key)");
  }
  if (!f.tls_cert.empty()) {
    auto cert = ReadTextFile(f.tls_cert);
    if (!cert.ok()) return InvalidArgument("gateway TLS certificate: " + cert.status().message());
    auto key = ReadTextFile(f.tls_key);
    if (!key.ok()) return InvalidArgument("gateway TLS key: " + key.status().message());
    o.tls_cert_pem = std::move(*cert);
    o.tls_key_pem = std::move(*key);
  }
  if (!insecure && o.tls_cert_pem.empty() && !IsLoopbackHost(HostOf(o.listen))) {
    return InvalidArgument("gateway listen " + f.listen +
                           " is beyond loopback without TLS: API keys would cross the network in the clear; give "
                           "--tls-cert and --tls-key (or put a TLS terminator in front and pass --insecure)");
  }
  o.io_threads = f.threads;
  o.affinity = f.affinity;
  o.scrape_engine_metrics = f.scrape_engine_metrics;
  auto window = ParseDurationMs(f.embeddings_batch);
  if (!window.ok()) {
    // Below a millisecond: "500us".
    if (f.embeddings_batch.ends_with("us")) {
      char* end = nullptr;
      long us = std::strtol(f.embeddings_batch.c_str(), &end, 10);
      if (end != f.embeddings_batch.c_str() + f.embeddings_batch.size() - 2 || us < 0 || us > 10'000'000) {
        return InvalidArgument("embeddings batch window '" + f.embeddings_batch + "' is not a duration (500us, 2ms)");
      }
      o.embeddings_batch_window_us = us;
    } else {
      return InvalidArgument("embeddings batch window: " + window.status().message());
    }
  } else {
    if (*window > 10'000) return InvalidArgument("embeddings batch window above 10s");
    o.embeddings_batch_window_us = *window * 1000;
  }
  auto wait = ParseDurationMs(f.cold_start_wait);
  if (!wait.ok()) return InvalidArgument("cold-start wait: " + wait.status().message());
  o.cold_start_wait_ms = *wait;
  auto body = ParseBytes(f.max_body);
  if (!body.ok() || *body < 1024 || *body > (int64_t{1} << 30)) {
    return InvalidArgument("gateway max body '" + f.max_body + "' is not 1KiB..1GiB");
  }
  o.max_body_bytes = static_cast<size_t>(*body);
  return o;
}

void AddStandaloneGatewayCommand(CLI::App& app, StandaloneGatewayFlags* f, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "gateway",
      "the OpenAI-compatible gateway apart from the servers (stateless: run several behind a load balancer)");
  AddGatewayFlags(cmd, &f->gateway, true);
  cmd->add_option("--server", f->server, "a server's gRPC address")->capture_default_str();
  cmd->add_option("--token-file", f->token_file,
                  "file holding a gateway token (drover tokens create NAME --role gateway: reads every tenant's "
                  "endpoints, resolves keys, reports load; an admin token works too); else DROVER_TOKEN");
  cmd->add_option("--ca-file", f->ca_file, "the cluster CA: talk TLS to the server")->envname("DROVER_CA_FILE");
  cmd->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")->capture_default_str();
  cmd->add_flag("--insecure", f->insecure, "allow listening beyond loopback without --tls-cert (plain HTTP)");
  cmd->add_flag("--metrics-public", f->metrics_public, "serve /metrics (usage by tenant and key) without an admin key");
  cmd->callback([f, exit_code] {
    auto fail = [exit_code](const Status& s, int code) {
      spdlog::error("{}", s.message());
      *exit_code = code;
    };
    if (Status s = runtime::InitLogging(f->log_level); !s.ok()) return fail(s, 2);
    auto options = GatewayOptionsFrom(f->gateway, f->insecure);
    if (!options.ok()) return fail(options.status(), 2);
    std::string token;
    if (!f->token_file.empty()) {
      auto text = ReadTextFile(f->token_file);
      if (!text.ok()) return fail(text.status(), 2);
      token = *text;
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
    } else if (const char* env = std::getenv("DROVER_TOKEN"); env != nullptr) {
      token = env;
    }
    if (token.empty())
      return fail(InvalidArgument("no token: give --token-file or DROVER_TOKEN (a gateway token or an admin's)"), 2);
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (!f->ca_file.empty()) {
      auto pem = ReadTextFile(f->ca_file);
      if (!pem.ok()) return fail(pem.status(), 2);
      grpc::SslCredentialsOptions o;
      o.pem_root_certs = *pem;
      creds = grpc::SslCredentials(o);
    }
    std::shared_ptr<grpc::Channel> channel = rpc::MakeChannel(f->server, token, creds);
    GatewayRoleOptions ro;
    ro.gateway = *options;
    ro.gateway.metrics_public = f->metrics_public;
    ro.channel = [channel] { return channel; };
    SignalWaiter signals;
    auto role = GatewayRole::Start(std::move(ro));
    if (!role.ok()) return fail(role.status(), 1);
    spdlog::info("gateway: OpenAI API on {}://{}:{}/v1 for the servers at {}",
                 f->gateway.tls_cert.empty() ? "http" : "https", HostOf(f->gateway.listen), (*role)->port(), f->server);
    signals.Wait();
    (*role)->Stop();
    *exit_code = 0;
  });
}

}  // namespace drover::app
