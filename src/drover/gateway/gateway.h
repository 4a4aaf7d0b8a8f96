#pragma once
// The OpenAI-compatible gateway: an asynchronous reverse proxy in front of
// the replicas of model deployments (issue 18, docs/gateway.md).
//
//   GatewayOptions options;
//   options.listen = "0.0.0.0:8000";
//   auto gw = StartGateway(options, [&](std::string_view token) -> Result<KeyInfo> {...},
//                          &registry);
//   (*gw)->SetRoutes({{"llama", "llama-dep", "", false, {{"j-1", "10.0.0.5:31000"}}}});
//   ... every second: autoscaler.Feed((*gw)->TakeLoad());
//
// Endpoints: GET /v1/models, POST /v1/chat/completions, /v1/completions,
// /v1/embeddings, GET /v1/chat/completions/ws (WebSocket), GET /healthz,
// GET /metrics. Errors are OpenAI-shaped:
//   {"error":{"message":"...","type":"invalid_request_error","param":null,"code":"..."}}
//
// Threading: options.io_threads threads, each running its own io_context
// with its own listening socket (SO_REUSEPORT) and its own pool of
// keep-alive upstream connections; a client connection lives on one thread
// from accept to close, so the proxy path takes no lock except the sharded
// auth cache and token buckets. Every public method is thread-safe.
//
// TLS: with options.tls_cert_pem and tls_key_pem every client connection
// is TLS 1.2 or newer (https, and wss for the WebSocket); a client that
// does not handshake gets no answer. Connections to the replicas stay
// plain TCP (they are inside the cluster).
//
// Not done here: HTTP/2, request queueing beyond the cold-start wait.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/common/metrics.h"
#include "drover/common/status.h"

namespace drover::gateway {

// What the authenticator says about an API key (a token of the security
// issue). Limits are per minute; 0 means unlimited.
struct KeyInfo {
  std::string token_id;  // stable id of the key (metering label "key")
  std::string name;      // display name
  std::string tenant;    // the tenant the key belongs to
  bool admin = false;    // may use every model, whatever its tenant
  int64_t key_rpm = 0;
  int64_t key_tpm = 0;
  int64_t tenant_rpm = 0;
  int64_t tenant_tpm = 0;
  // A viewer's key: it may list models (GET /v1/models), not run inference
  // (403 permission_denied on the POST endpoints and the WebSocket).
  bool read_only = false;
};

// Maps a bearer token to its key. An Unauthenticated/PermissionDenied/
// NotFound status means a bad key (401); any other error is a 503. Called
// on a cache miss, on a small pool of the gateway's (not an io thread: it
// may block); the gateway caches answers for auth_cache_ttl_ms.
using Authenticator = std::function<Result<KeyInfo>(std::string_view token)>;

// Usage of one (tenant, model, key) since the gateway started (key: the
// key's token_id).
struct UsageRow {
  std::string tenant, model, key;
  int64_t requests = 0, errors = 0, prompt_tokens = 0, completion_tokens = 0;
  // Of the tenant's requests for the model (all its keys); < 0: none yet.
  double latency_p50_ms = -1, latency_p99_ms = -1;
};

struct Upstream {
  Upstream() = default;
  // {id, address} for a replica without a secret (Upstream{"j-1", "10.0.0.5:31000"}).
  Upstream(std::string replica, std::string where, std::string secret = {})
      : id(std::move(replica)), address(std::move(where)), api_key(std::move(secret)) {}
  std::string id;       // job id of the replica
  std::string address;  // "host:port"
  // The replica's secret (ServingEndpoint.api_key): sent upstream as
  // "Authorization: Bearer" on every request and /metrics scrape; empty:
  // no Authorization header (a replica without one). The client's own
  // Authorization header never goes upstream.
  std::string api_key;
};

// A model the gateway serves and where. `tenant` empty: every tenant may use
// it; otherwise only keys of that tenant (others get 404, as for a name
// nobody serves). Names are per tenant: routes of two tenants may share a
// model name, and each key reaches its own tenant's; an admin key reaches
// another tenant's model when that tenant alone serves the name.
// How a route's replica is picked (docs/gateway.md, "Replica choice"),
// from its deployment's spec.
struct RoutingPolicy {
  enum class Kind {
    kPrefixLoad,  // the default: expected prefix-cache hit against load, within load_bound
    kPrefix,      // the expected hit alone (no load bound): for comparison, it overloads
    kLeastLoad,   // power of two choices over load
    kAffinity,    // a request's "user" or x-session-id to one replica (rendezvous), else least-load
    kRoundRobin,
  };
  Kind kind = Kind::kPrefixLoad;
  // kPrefixLoad: a replica's score is
  //   prefix_weight * hit - load_weight * (load - least) / (load_bound + 1)
  // with hit the fraction of the prompt's blocks it holds, load its
  // requests in flight plus the engine's own queue, least the least loaded
  // replica's; a replica more than load_bound over the least is never
  // chosen for its cache.
  // Defaults chosen on bench/prefix_routing_bench (docs/performance.md):
  // bound 4 and weight 1 moved conversations off their replica too soon.
  double prefix_weight = 2.0;
  double load_weight = 1.0;
  int64_t load_bound = 12;
};
// "prefix-load", "prefix", "least-load", "affinity", "round-robin"; "" is
// the default (prefix-load). False for any other name.
bool ParseRoutingKind(std::string_view name, RoutingPolicy::Kind* kind);
const char* RoutingKindName(RoutingPolicy::Kind kind);

struct Route {
  Route() = default;
  Route(std::string served, std::string dep, std::string owner, bool from_zero, std::vector<Upstream> ready,
        RoutingPolicy policy = {})
      : model(std::move(served)),
        deployment(std::move(dep)),
        tenant(std::move(owner)),
        scales_from_zero(from_zero),
        replicas(std::move(ready)),
        routing(policy) {}
  std::string model;
  std::string deployment;
  std::string tenant;
  bool scales_from_zero = false;
  std::vector<Upstream> replicas;  // the READY replicas
  RoutingPolicy routing;
};

// Load of one model since the previous TakeLoad().
struct ModelLoad {
  std::string model;
  std::string tenant;  // the route's (served model names are per tenant)
  std::string deployment;
  int64_t outstanding = 0;  // requests in flight upstream now
  int64_t waiting = 0;      // requests waiting for a replica (cold start) now
  int64_t requests = 0;     // requests routed or waiting since the last call
  std::vector<std::pair<std::string, int64_t>> outstanding_by_replica;  // (job id, n)
  // From the engines' own metrics (scrape_engine_metrics): requests queued
  // in the replicas now (vLLM num_requests_waiting, llama.cpp
  // requests_deferred), and the mean time the requests that left the
  // engines' queues since the last call waited there (vLLM
  // request_queue_time_seconds); -1: not known.
  int64_t engine_waiting = -1;
  double queue_ms = -1;
  // Per replica, since the gateway started: prompt blocks routed there by a
  // prefix policy, of which expected held; the engine's load (-1: not known).
  struct ReplicaRouting {
    std::string replica;
    int64_t prefix_blocks = 0, prefix_hit_blocks = 0, engine_load = -1;
  };
  std::vector<ReplicaRouting> routing_by_replica;
};

struct GatewayOptions {
  std::string listen = "127.0.0.1:0";  // "host:port"; port 0 picks one
  // Serve TLS with this certificate (PEM: the leaf, then any intermediates)
  // and its private key (PEM). Both empty: plaintext. StartGateway fails
  // (InvalidArgument) on a certificate or key that is not usable.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  int io_threads = 2;
  size_t max_header_bytes = 16 << 10;         // larger: 431
  size_t max_body_bytes = 4 << 20;            // larger: 413
  size_t max_upstream_body_bytes = 64 << 20;  // a non-streamed answer larger: 502

  // Deadlines (milliseconds).
  int64_t header_timeout_ms = 10'000;     // a request's header and body
  int64_t idle_timeout_ms = 60'000;       // keep-alive between requests
  int64_t write_timeout_ms = 30'000;      // one write to a client
  int64_t connect_timeout_ms = 2'000;     // to a replica
  int64_t upstream_timeout_ms = 600'000;  // first byte, and between two stream reads

  // Other replicas tried when one fails before any byte reached the client
  // (connect refused, reset before the status line, 502/503 from it, or
  // 401/403 to the gateway's own key: a misconfigured replica, which the
  // client gets as a 502 when no other replica answers).
  int retries = 2;
  // Requests with a "user" field or an x-session-id header go to the same
  // replica while the replica set is unchanged (rendezvous hashing), for
  // every route, whatever its RoutingPolicy; a request without either is
  // routed by the route's policy.
  bool affinity = false;
  // Merge concurrent /v1/embeddings requests of one model arriving within
  // this window into one upstream call (0: off).
  int64_t embeddings_batch_window_us = 0;
  size_t embeddings_batch_max_inputs = 256;
  // A model with no ready replica and scales_from_zero: how long a request
  // waits for one (SetRoutes wakes it) before 503.
  int64_t cold_start_wait_ms = 120'000;
  // Scrape each replica's /metrics every scrape_interval_ms for the engine's
  // own queue (vLLM num_requests_running + waiting, llama.cpp
  // requests_processing + deferred) and add it to the routing score.
  bool scrape_engine_metrics = false;
  int64_t scrape_interval_ms = 1'000;

  // Authenticator answers are cached this long (failures: auth_fail_ttl_ms),
  // at most auth_cache_max_entries tokens.
  // GET /metrics (usage by tenant and key) without an admin key.
  bool metrics_public = false;

  int64_t auth_cache_ttl_ms = 1'000;
  int64_t auth_fail_ttl_ms = 200;
  size_t auth_cache_max_entries = 100'000;
  uint64_t seed = 0x9e3779b97f4a7c15ULL;  // power-of-two choices
};

class Gateway {
 public:
  virtual ~Gateway() = default;
  virtual uint16_t port() const = 0;
  // Replaces the whole routing table. Outstanding counts of replicas that
  // stay are kept; requests waiting for a cold start are woken.
  virtual void SetRoutes(std::vector<Route> routes) = 0;
  // Per route (tenant, model) of the current routes; resets the
  // `requests` counters.
  virtual std::vector<ModelLoad> TakeLoad() = 0;
  // Every (tenant, model, key) row since the gateway started, sorted.
  virtual std::vector<UsageRow> Usage() const = 0;
  // The same as {"usage":[{"tenant","model","key","requests","errors",
  //   "prompt_tokens","completion_tokens","latency_p50_ms","latency_p99_ms"}
  //   ...]}; the latencies only once there is one.
  virtual std::string UsageJson() const = 0;
  // Closes the listeners and every connection and joins the threads.
  // Idempotent; the destructor calls it.
  virtual void Stop() = 0;
};

// `registry_or_null`: where drover_gateway_* metrics go (it must outlive the
// gateway); null: a private registry, still served on /metrics.
Result<std::unique_ptr<Gateway>> StartGateway(GatewayOptions options, Authenticator authenticator,
                                              metrics::Registry* registry_or_null);

}  // namespace drover::gateway
