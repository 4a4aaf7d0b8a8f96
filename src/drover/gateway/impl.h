#pragma once
// The gateway's implementation class (private): gateway.cc has the server
// and connections, proxy.cc the proxy path, batching.cc embeddings batching
// and scrape.cc the engine metrics scraper.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "drover/common/mutex.h"
#include "drover/gateway/gateway.h"
#include "drover/gateway/io.h"
#include "drover/gateway/limits.h"
#include "drover/gateway/routing.h"

namespace drover::gateway {

// What the metrics collector reads; shared with it, so it outlives the
// gateway if the registry does.
struct SharedState {
  SharedState(metrics::HistogramFamily* latency, metrics::HistogramFamily* first_token) : meter(latency, first_token) {}
  Meter meter;
  Mutex routes_mu;
  std::shared_ptr<const RouteTable> routes DROVER_GUARDED_BY(routes_mu);  // never null
  std::atomic<uint64_t> routes_version{1};
};

struct EmbeddingsBatch;

// One io thread: its io_context, listener and idle upstream connections.
// Everything here but `ioc` is touched only on the worker's thread.
struct Worker {
  Worker(int i, uint64_t seed) : index(i), rng(seed) {}
  ~Worker() {
    idle.clear();
    acceptor.reset();
  }
  const int index;
  FastRng rng;
  std::optional<tcp::acceptor> acceptor;
  std::unordered_map<std::string, std::vector<std::unique_ptr<UpConn>>> idle;  // by address
  std::shared_ptr<const RouteTable> table;
  uint64_t table_version = 0;
  std::unordered_map<std::string, UsageCell*> cells;  // tenant \0 model \0 key
  std::vector<net::steady_timer*> cold_waiters;
  std::unordered_set<TimedSocket*> timed;  // every socket with a deadline
  std::thread thread;
  // Last: destroyed first, so that the coroutine frames it destroys may
  // still touch the members above.
  net::io_context ioc{1};
};

// Threads that run the authenticator's calls for keys not in the cache.
inline constexpr int kAuthThreads = 4;

class GatewayImpl final : public Gateway {
 public:
  GatewayImpl(GatewayOptions options, Authenticator authenticator, metrics::Registry* registry);
  ~GatewayImpl() override { Stop(); }
  Status Start();

  uint16_t port() const override { return port_; }
  void SetRoutes(std::vector<Route> routes) override;
  std::vector<ModelLoad> TakeLoad() override;
  std::vector<UsageRow> Usage() const override { return shared_->meter.Rows(); }
  std::string UsageJson() const override { return shared_->meter.Json(); }
  void Stop() override;

  // --- used by the connection code (gateway.cc) ---
  awaitable<void> Accept(Worker* w);
  // Closes the sockets of `w` past their deadline, every kSweepPeriodMs.
  awaitable<void> Sweep(Worker* w);
  // A TLS connection: the handshake (within header_timeout_ms), then
  // ServeOn over TLS. A plaintext one goes to ServeOn directly.
  awaitable<void> ServeTls(Worker* w, std::shared_ptr<struct Conn> c);
  // The requests of one connection; `s` is its socket or its TLS stream.
  template <typename Stream>
  awaitable<void> ServeOn(Worker* w, std::shared_ptr<struct Conn> c, Stream& s);
  template <typename Stream>
  awaitable<void> ServeWebSocket(Worker* w, std::shared_ptr<struct Conn> c, Stream& s,
                                 bhttp::request<bhttp::string_body> req);
  awaitable<void> Handle(Worker* w, const bhttp::request<bhttp::string_body>& req, Sink& sink);

  // --- the proxy path (proxy.cc) ---
  // One OpenAI call: authenticate, parse, limit, route, forward, meter.
  awaitable<void> Proxy(Worker* w, std::string_view path, std::string_view authorization, std::string_view session_id,
                        std::string_view body, Sink& sink, bool force_stream);
  enum class Outcome { kDone, kRetry };
  // One attempt on one replica; kRetry when nothing reached the client.
  awaitable<Outcome> Forward(Worker* w, Replica& r, std::string_view path, std::string_view body, bool strip_usage,
                             Sink& sink, CallResult& res, std::string* why);
  // A whole answer over max_upstream_body_bytes: 502
  // upstream_response_too_large to the client, and no retry.
  awaitable<Outcome> AnswerTooLarge(const Replica& r, Sink& sink, CallResult& res);
  // Forward with retries on other replicas, then an error if all failed.
  // For a model that scales from zero, when every replica failed before a
  // byte went out (the routes were stale: it had just scaled down), waits
  // once, as a cold start does, for one not tried (`waited` stops a second).
  awaitable<void> Route(Worker* w, const ModelEntry& entry, std::string_view path, std::string_view body,
                        bool strip_usage, const PickInput& pick, Sink& sink, CallResult& res, bool waited = false);
  // The salt of `tenant`'s prefix hashes: this gateway's secret mixed with
  // the tenant, so that no tenant's prompt hashes match another's.
  uint64_t TenantSalt(std::string_view tenant) const { return Hash64(tenant) ^ prefix_secret_; }
  Status BodyTooLarge() const;  // 413 with the limit
  static Status ReadOnlyKey();  // 403: a viewer's key asked for inference
  awaitable<bool> SendError(Sink& sink, const Status& st, std::string_view param = {}, int64_t retry_after_s = 0);
  // The key of an Authorization header, or null with *err set. A key not
  // in the cache is asked of the authenticator on auth_pool_, not on this
  // io thread: its call to the control plane may block.
  awaitable<std::shared_ptr<const AuthEntry>> Authenticate(std::string_view authorization, Status* err);
  awaitable<std::shared_ptr<const AuthEntry>> LookupKey(std::string token);  // on auth_pool_
  std::shared_ptr<const RouteTable> Table(Worker* w);
  UsageCell* CellFor(Worker* w, const std::string& tenant, const std::string& model, const std::string& key);
  // Waits (bounded by cold_start_wait_ms) until the route `route_key`
  // (RouteKey) has a replica whose id is not in `dead`; null if the client
  // left meanwhile.
  awaitable<std::shared_ptr<const RouteTable>> WaitForReplica(Worker* w, const std::string& route_key,
                                                              ModelStats& stats, Sink& sink,
                                                              const std::vector<std::string>& dead = {});
  // A client that left while its call was upstream: counted, not retried.
  // Adds the time since res.mark_ns to the call's own time.
  static void Own(CallResult& res) { res.own_ns += NowNs() - res.mark_ns; }
  void ObserveOverhead(const CallResult& res) {
    if (res.clean) counters_.overhead->Observe(static_cast<double>(res.own_ns) / 1e9);
  }
  Outcome ClientLeft(CallResult& res) {
    res.client_gone = true;
    counters_.client_cancels->Inc();  // before the in-flight count drops
    return Outcome::kDone;
  }

  // --- embeddings batching (batching.cc) ---
  awaitable<void> BatchEmbeddings(Worker* w, const ModelEntry& entry, const RequestInfo& info, Sink& sink,
                                  CallResult& res);

  // --- engine metrics (scrape.cc) ---
  awaitable<void> ScrapeLoop(Worker* w);

  const GatewayOptions& options() const { return options_; }

  struct Counters {
    metrics::Counter* retries;
    metrics::Counter* client_cancels;
    metrics::Counter* stream_errors;
    metrics::Counter* batches;
    metrics::Counter* batched_requests;
    metrics::Counter* cold_starts;
    metrics::Counter* engine_refusals;                  // 401/403 from an engine to the gateway's key
    metrics::Histogram* overhead;                       // CallResult::own_ns of clean calls
    std::map<std::string, metrics::Counter*> rejected;  // by reason, fixed at start
  };
  Counters counters_{};
  metrics::Counter* Rejected(const std::string& reason);

 private:
  const GatewayOptions options_;
  const uint64_t prefix_secret_;  // TenantSalt's, random per gateway
  AuthCache auth_;
  std::unique_ptr<net::thread_pool> auth_pool_;  // the authenticator's calls (kAuthThreads)
  std::unique_ptr<metrics::Registry> own_registry_;
  metrics::Registry* registry_;
  std::shared_ptr<SharedState> shared_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // The open embeddings batches, by route (tenant and model) and encoding
  // (batching.cc): a batch never mixes two tenants' requests.
  Mutex batches_mu_;
  std::unordered_map<std::string, std::shared_ptr<EmbeddingsBatch>> batches_ DROVER_GUARDED_BY(batches_mu_);
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
  // options_.tls_cert_pem given: every client connection is TLS with it.
  // Thread-safe (OpenSSL's SSL_CTX), shared by the workers.
  std::optional<net::ssl::context> tls_;
};

// TLS over a client's socket (the socket stays the TimedSocket's, so that
// the sweeper's deadlines and the disconnect watch work as for plaintext).
using TlsStream = net::ssl::stream<tcp::socket&>;

// A client connection, on one worker for its life.
struct Conn : std::enable_shared_from_this<Conn> {
  Conn(Worker* w, tcp::socket s) : stream(w->timed, std::move(s)) {}
  TimedSocket stream;
  beast::flat_buffer buf;
  std::optional<TlsStream> tls;  // set on a TLS gateway's connections; over stream.socket
};

}  // namespace drover::gateway
