// The gateway's server side: io threads, listeners, client connections
// (HTTP/1.1 keep-alive and WebSocket, in plaintext or TLS), the routing
// table. The proxy path is in proxy.cc.

#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <map>
#include <random>
#include <tuple>
#include <utility>  // before asio: its awaitable.hpp uses std::exchange

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <nlohmann/json.hpp>

#include "drover/gateway/impl.h"
#include "drover/http/tls.h"

namespace drover::gateway {
namespace {

namespace ws = beast::websocket;
using Ms = std::chrono::milliseconds;

constexpr std::string_view kWsPath = "/v1/chat/completions/ws";
// How long a closing TLS connection waits for the client's close_notify
// after sending its own (most clients answer or close at once).
constexpr int64_t kTlsShutdownMs = 1'000;

template <typename Stream>
inline constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

// ReadRest (io.h) over TLS: no synchronous first try, which OpenSSL on a
// non-blocking socket cannot resume.
template <typename Parser>
awaitable<void> ReadRest(TlsStream& s, beast::flat_buffer& buf, Parser& p, beast::error_code& ec) {
  co_await bhttp::async_read(s, buf, p, Await(ec));
}

// Whether the bytes waiting on a TLS client's socket, while its answer
// streams and it has nothing to say, are the client leaving: an alert
// record (TLS 1.2's close_notify or a fatal alert) or, in TLS 1.3, where
// alerts travel encrypted as application data, a record of an alert's size
// (2 bytes + the content type byte + a 16-byte AEAD tag = 19). Anything
// else (a pipelined request, a KeyUpdate) is not: the watch ends as it does
// for plaintext bytes, and a client that then closes is seen at the next
// write.
bool TlsClientLeaving(tcp::socket& s) {
  unsigned char h[5];
  ssize_t n = ::recv(s.native_handle(), h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // closed
  if (n < static_cast<ssize_t>(sizeof h)) return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
  constexpr unsigned char kAlert = 21, kApplicationData = 23;
  const size_t length = (size_t{h[3]} << 8) | h[4];
  return h[0] == kAlert || (h[0] == kApplicationData && length == 19);
}

// Whether a plaintext WebSocket client's next frame is a close (its first
// byte, FIN and the opcode, is not masked).
bool WsCloseFrameNext(tcp::socket& s) {
  unsigned char first = 0;
  return ::recv(s.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT) == 1 && (first & 0x0f) == 0x8;
}

// What waits on a client's socket that turned readable, without taking it.
enum class Peeked { kNothing, kClosed, kData };
Peeked Peek(tcp::socket& s) {
  char byte;
  ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return Peeked::kData;
  if (n == 0) return Peeked::kClosed;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Peeked::kNothing;
  return Peeked::kClosed;  // reset, or another error: the client is gone as well
}

// Watches a client's socket while a call waits (Sink::Watch): when it turns
// readable, on_gone runs (on the io thread) if the client closed or reset
// it, or if `leaving(socket)` reads what waits there as the client leaving;
// other bytes (a pipelined request) end the watch. Stop() (or the
// destructor) ends it; the socket must outlive the watch.
//
// A readiness with nothing to read is stale, and the watch waits again:
// Asio's reactor records a socket's readable edge and completes the wait
// queued later with it, although a synchronous read (ReadRest) took those
// bytes meanwhile. That happens to the body of an `Expect: 100-continue`
// request, which arrives after the header; taking it for the client's EOF
// dropped the call and left the client waiting until the idle timeout.
class GoneWatch {
 public:
  GoneWatch() = default;
  GoneWatch(const GoneWatch&) = delete;
  GoneWatch& operator=(const GoneWatch&) = delete;
  ~GoneWatch() { Stop(); }

  void Start(tcp::socket& socket, std::function<void()> on_gone, bool (*leaving)(tcp::socket&)) {
    Stop();
    state_ = std::make_shared<State>();
    state_->socket = &socket;
    state_->on_gone = std::move(on_gone);
    state_->leaving = leaving;
    Arm(state_);
  }
  void Stop() {
    if (!state_) return;
    state_->active = false;
    tcp::socket* socket = state_->socket;
    state_.reset();
    beast::error_code ec;
    socket->cancel(ec);
  }

 private:
  // Shared by the watch and its pending wait; `active` false: stopped (the
  // socket may be gone).
  struct State {
    bool active = true;
    tcp::socket* socket = nullptr;
    std::function<void()> on_gone;
    bool (*leaving)(tcp::socket&) = nullptr;
  };
  static void Arm(const std::shared_ptr<State>& st) {
    st->socket->async_wait(tcp::socket::wait_read, [st](const beast::error_code& ec) {
      if (!st->active || ec) return;
      switch (Peek(*st->socket)) {
        case Peeked::kNothing: return Arm(st);  // stale: wait for the next edge
        case Peeked::kClosed: break;
        case Peeked::kData:
          if (st->leaving == nullptr || !st->leaving(*st->socket)) return;
          break;
      }
      st->on_gone();
    });
  }

  std::shared_ptr<State> state_;
};

std::string Head(int status, std::string_view content_type, int64_t content_length, bool keep_alive,
                 std::string_view extra) {
  std::string h;
  h.reserve(160 + extra.size());
  h += "HTTP/1.1 ";
  h += std::to_string(status);
  h += ' ';
  h += SV(bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status))));
  h += "\r\nContent-Type: ";
  h += content_type;
  if (content_length >= 0) {
    h += "\r\nContent-Length: ";
    h += std::to_string(content_length);
  } else {
    h += "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked";
  }
  if (!keep_alive) h += "\r\nConnection: close";
  h += "\r\n";
  h += extra;
  h += "\r\n";
  return h;
}

// An HTTP/1.1 client: whole answers with Content-Length, streams chunked.
// `Stream`: the client's tcp::socket, or its TlsStream.
template <typename Stream>
class HttpSink final : public Sink {
 public:
  HttpSink(std::shared_ptr<Conn> c, Stream& s, bool keep_alive, int64_t write_timeout_ms)
      : c_(std::move(c)), s_(s), keep_alive_(keep_alive), write_timeout_ms_(write_timeout_ms) {}

  bool keep_alive() const { return keep_alive_ && ok_; }

  awaitable<bool> Whole(int status, std::string_view content_type, std::string_view body,
                        std::string_view extra) override {
    started_ = true;
    std::string head = Head(status, content_type, static_cast<int64_t>(body.size()), keep_alive_, extra);
    std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(body.data(), body.size())};
    co_return co_await Write(bufs);
  }

  awaitable<bool> Events(std::string_view events) override {
    if (events.empty()) co_return ok_;
    char size[24];
    int n = std::snprintf(size, sizeof size, "%zx\r\n", events.size());
    std::string head;
    if (!started_) {
      started_ = true;
      head = Head(200, "text/event-stream", -1, keep_alive_, {});
    }
    std::array<net::const_buffer, 4> bufs{net::buffer(head), net::buffer(size, static_cast<size_t>(n)),
                                          net::buffer(events.data(), events.size()), net::buffer("\r\n", 2)};
    co_return co_await Write(bufs);
  }

  awaitable<bool> EndStream() override {
    std::string head;
    if (!started_) {
      started_ = true;
      head = Head(200, "text/event-stream", -1, keep_alive_, {});
    }
    std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer("0\r\n\r\n", 5)};
    co_return co_await Write(bufs);
  }

  void Watch(std::function<void()> on_gone) override {
    watch_.Start(c_->stream.socket, std::move(on_gone), kIsTls<Stream> ? TlsClientLeaving : nullptr);
  }
  void Unwatch() override { watch_.Stop(); }

 private:
  template <typename Buffers>
  awaitable<bool> Write(const Buffers& bufs) {
    if (!ok_) co_return false;
    beast::error_code ec;
    c_->stream.ExpiresAfterMs(write_timeout_ms_);
    if constexpr (kIsTls<Stream>) {
      // One TLS record for the lot, not one per buffer (and per syscall).
      out_.clear();
      for (const net::const_buffer& b : bufs) out_.append(static_cast<const char*>(b.data()), b.size());
      co_await net::async_write(s_, net::buffer(out_), Await(ec));
    } else {
      co_await WriteAll(s_, bufs, ec);
    }
    c_->stream.Never();
    if (ec) ok_ = false;
    co_return ok_;
  }

  struct None {};
  std::shared_ptr<Conn> c_;
  Stream& s_;
  bool keep_alive_;
  int64_t write_timeout_ms_;
  bool ok_ = true;
  [[no_unique_address]] std::conditional_t<kIsTls<Stream>, std::string, None> out_;  // TLS: what Write sends
  GoneWatch watch_;  // last: stopped before c_ (the socket) goes
};

// A WebSocket client: each SSE data payload (and "[DONE]") is one text
// message; a whole answer (an error or a non-streamed one) is one message.
template <typename WsStream>
class WsSink final : public Sink {
 public:
  explicit WsSink(WsStream& s) : ws_(s) {}
  bool ok() const { return ok_; }

  awaitable<bool> Whole(int, std::string_view, std::string_view body, std::string_view) override {
    started_ = true;
    co_return co_await Send(body);
  }
  awaitable<bool> Events(std::string_view events) override {
    started_ = true;
    std::vector<std::string_view> payloads;
    ForEachData(events, [&](std::string_view p) { payloads.push_back(p); });
    for (std::string_view p : payloads) {
      if (!co_await Send(p)) co_return false;
    }
    co_return ok_;
  }
  awaitable<bool> EndStream() override { co_return ok_; }

  // As HttpSink's, on the socket under the WebSocket (and its TLS): the
  // client closed the connection, or its next frame is a close (plain) or
  // an alert (TLS).
  void Watch(std::function<void()> on_gone) override {
    constexpr bool kTls = kIsTls<std::remove_cvref_t<decltype(ws_.next_layer())>>;
    watch_.Start(RawSocket(beast::get_lowest_layer(ws_)), std::move(on_gone),
                 kTls ? TlsClientLeaving : WsCloseFrameNext);
  }
  void Unwatch() override { watch_.Stop(); }

 private:
  static tcp::socket& RawSocket(tcp::socket& s) { return s; }
  static tcp::socket& RawSocket(beast::tcp_stream& s) { return s.socket(); }

  awaitable<bool> Send(std::string_view text) {
    if (!ok_) co_return false;
    beast::error_code ec;
    ws_.text(true);
    co_await ws_.async_write(net::buffer(text.data(), text.size()), Await(ec));
    if (ec) ok_ = false;
    co_return ok_;
  }
  WsStream& ws_;
  bool ok_ = true;
  GoneWatch watch_;
};

Result<tcp::endpoint> ParseHostPort(const std::string& s, bool resolve) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgument("address '" + s + "' is not host:port");
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(s.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) return InvalidArgument("address '" + s + "' has no valid port");
  beast::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(addr, static_cast<uint16_t>(port));
  if (!resolve) return InvalidArgument("address '" + s + "': '" + host + "' is not an IP address");
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) return Unavailable("cannot resolve '" + host + "': " + ec.message());
  return results.begin()->endpoint();
}

std::string_view PathOf(std::string_view target) {
  size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

}  // namespace

GatewayImpl::GatewayImpl(GatewayOptions options, Authenticator authenticator, metrics::Registry* registry)
    : options_(std::move(options)),
      // Secret, so that no client can craft a prompt whose hashes collide
      // with another's; no decision depends on its value.
      prefix_secret_((static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^ options_.seed),
      auth_(std::move(authenticator), options_.auth_cache_ttl_ms, options_.auth_fail_ttl_ms,
            options_.auth_cache_max_entries),
      auth_pool_(std::make_unique<net::thread_pool>(kAuthThreads)) {
  if (registry == nullptr) {
    own_registry_ = std::make_unique<metrics::Registry>();
    registry = own_registry_.get();
  }
  registry_ = registry;
}

metrics::Counter* GatewayImpl::Rejected(const std::string& reason) {
  auto it = counters_.rejected.find(reason);
  return it != counters_.rejected.end() ? it->second : counters_.rejected.at("other");
}

Status GatewayImpl::Start() {
  if (options_.io_threads < 1 || options_.io_threads > 256) {
    return InvalidArgument("gateway io_threads must be 1..256, not " + std::to_string(options_.io_threads));
  }
  auto bounds = metrics::ExponentialBuckets(0.0001, 2.5, 18);  // 100 us .. ~1.5 h
  DROVER_ASSIGN_OR_RETURN(
      metrics::HistogramFamily * latency,
      registry_->AddHistogram("drover_gateway_request_duration_seconds",
                              "Time from a request's arrival to its last byte, by tenant and model.", *bounds));
  // Round bounds: an SLO's threshold ("first token within 2 s") is one of them.
  DROVER_ASSIGN_OR_RETURN(
      metrics::HistogramFamily * first_token,
      registry_->AddHistogram("drover_gateway_time_to_first_token_seconds",
                              "Streams: time from a request's arrival to its first event written to the client, by "
                              "tenant and model.",
                              {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}));
  shared_ = std::make_shared<SharedState>(latency, first_token);
  {
    MutexLock lock(&shared_->routes_mu);  // not yet shared: for the analysis
    shared_->routes = std::make_shared<RouteTable>();
  }
  auto counter = [&](const char* name, const char* help) -> Result<metrics::Counter*> {
    DROVER_ASSIGN_OR_RETURN(metrics::CounterFamily * f, registry_->AddCounter(name, help));
    return f->With({});
  };
  DROVER_ASSIGN_OR_RETURN(counters_.retries,
                          counter("drover_gateway_upstream_retries_total",
                                  "Attempts that failed before the first byte and were tried on another replica."));
  DROVER_ASSIGN_OR_RETURN(counters_.client_cancels,
                          counter("drover_gateway_client_cancels_total",
                                  "Streams the client left mid-way (the upstream request was cancelled)."));
  DROVER_ASSIGN_OR_RETURN(counters_.stream_errors,
                          counter("drover_gateway_stream_errors_total",
                                  "Streams a replica broke after the first byte (the client got an error event)."));
  DROVER_ASSIGN_OR_RETURN(counters_.batches, counter("drover_gateway_embeddings_batches_total",
                                                     "Upstream embeddings calls that merged requests."));
  DROVER_ASSIGN_OR_RETURN(counters_.batched_requests,
                          counter("drover_gateway_embeddings_batched_requests_total",
                                  "Embeddings requests answered by a merged upstream call."));
  DROVER_ASSIGN_OR_RETURN(counters_.cold_starts,
                          counter("drover_gateway_cold_start_waits_total",
                                  "Requests that waited for a replica of a model scaled to zero."));
  DROVER_ASSIGN_OR_RETURN(counters_.engine_refusals,
                          counter("drover_gateway_engine_refusals_total",
                                  "Upstream calls an engine refused (401/403) with the replica's own secret: a "
                                  "misconfigured replica."));
  auto fine = metrics::ExponentialBuckets(0.000001, 1.5, 30);  // 1 us .. ~0.13 s
  DROVER_ASSIGN_OR_RETURN(
      metrics::HistogramFamily * overhead,
      registry_->AddHistogram("drover_gateway_overhead_seconds",
                              "The gateway's own time on a call that went to its first replica without waiting: from "
                              "the request's arrival to its upstream write, plus from the answer (a stream: its first "
                              "event) read to its write to the client, the writes' system calls not included.",
                              *fine));
  counters_.overhead = overhead->With({});
  DROVER_ASSIGN_OR_RETURN(
      metrics::CounterFamily * rejected,
      registry_->AddCounter("drover_gateway_rejected_total", "Requests refused before reaching a replica, by reason."));
  for (const char* r : {"unauthenticated", "forbidden", "rate_limited", "bad_request", "not_found", "too_large",
                        "unavailable", "other"}) {
    counters_.rejected[r] = rejected->With({{"reason", r}});
  }
  std::weak_ptr<SharedState> weak = shared_;
  registry_->AddCollector([weak](metrics::Exposition& out) {
    auto s = weak.lock();
    if (!s) return;
    s->meter.Collect(out);
    std::shared_ptr<const RouteTable> t;
    {
      MutexLock lock(&s->routes_mu);
      t = s->routes;
    }
    auto outstanding =
        out.Gauge("drover_gateway_outstanding_requests", "Requests in flight upstream, by tenant and model.");
    auto waiting = out.Gauge("drover_gateway_waiting_requests", "Requests waiting for a replica, by tenant and model.");
    auto replicas =
        out.Gauge("drover_gateway_ready_replicas", "Ready replicas the gateway routes to, by tenant and model.");
    auto per = out.Gauge("drover_gateway_replica_outstanding_requests", "Requests in flight, by replica.");
    auto engine = out.Gauge("drover_gateway_replica_engine_load",
                            "The engine's own running + waiting requests, scraped (0 if unknown), by replica.");
    auto kv = out.Gauge("drover_gateway_replica_engine_kv_usage",
                        "The engine's KV-cache usage (0..1), scraped, by replica (absent if unknown).");
    auto blocks = out.Counter("drover_gateway_replica_prefix_blocks_total",
                              "Prompt blocks (128 bytes) of the requests routed to a replica by a prefix policy.");
    auto hits = out.Counter("drover_gateway_replica_prefix_hit_blocks_total",
                            "Of those blocks, the ones the gateway expected the replica to hold in its prefix cache.");
    auto held = out.Gauge("drover_gateway_replica_prefix_cache_blocks",
                          "Prompt blocks the gateway remembers having sent to a replica (bounded).");
    auto picks = out.Counter("drover_gateway_replica_picks_total",
                             "Replicas chosen, by the route's policy and why (prefix: for its cache; load: the less "
                             "loaded of two; affinity: a session's; round_robin).");
    for (const auto& [key, e] : t->models) {
      // Served names are per tenant: the tenant tells two `llama`s apart
      // (none for a route every tenant may use).
      metrics::Labels l = {{"model", e.route.model}};
      if (!e.route.tenant.empty()) l.emplace_back("tenant", e.route.tenant);
      outstanding.Add(l, static_cast<double>(e.stats->outstanding.load()));
      waiting.Add(l, static_cast<double>(e.stats->waiting.load()));
      replicas.Add(l, static_cast<double>(e.replicas.size()));
      for (const auto& r : e.replicas) {
        metrics::Labels lr = l;
        lr.emplace_back("replica", r->id);
        per.Add(lr, static_cast<double>(r->outstanding.load()));
        engine.Add(lr, static_cast<double>(r->engine_load.load()));
        if (const int64_t k = r->engine_kv_permille.load(); k >= 0) kv.Add(lr, static_cast<double>(k) / 1000.0);
        blocks.Add(lr, static_cast<double>(r->prefix_blocks.load()));
        hits.Add(lr, static_cast<double>(r->prefix_hit_blocks.load()));
        held.Add(lr, static_cast<double>(r->prefixes.size()));
        for (int reason = 0; reason < 4; ++reason) {
          const int64_t n = r->picks[reason].load();
          if (n == 0) continue;
          metrics::Labels lp = lr;
          lp.emplace_back("policy", RoutingKindName(e.route.routing.kind));
          lp.emplace_back("reason", PickReasonName(static_cast<PickReason>(reason)));
          picks.Add(lp, static_cast<double>(n));
        }
      }
    }
  });

  if (!options_.tls_cert_pem.empty() || !options_.tls_key_pem.empty()) {
    tls_.emplace(net::ssl::context::tls_server);
    if (Status s = http::ConfigureServerContext(tls_->native_handle(), options_.tls_cert_pem, options_.tls_key_pem);
        !s.ok()) {
      return Status(s.code(), "gateway: " + s.message());
    }
  }
  DROVER_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseHostPort(options_.listen, true));
  for (int i = 0; i < options_.io_threads; ++i) {
    auto w = std::make_unique<Worker>(i, options_.seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
    beast::error_code ec;
    tcp::acceptor& a = w->acceptor.emplace(w->ioc);
    a.open(ep.protocol(), ec);
    if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
    int one = 1;
    if (!ec && ::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
      return Internal("gateway: SO_REUSEPORT: " + std::string(std::strerror(errno)));
    }
    if (!ec) a.bind(ep, ec);
    if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return Unavailable("gateway: cannot listen on " + options_.listen + ": " + ec.message());
    if (i == 0) {
      port_ = a.local_endpoint().port();
      ep.port(port_);
    }
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    Worker* wp = w.get();
    net::co_spawn(wp->ioc, Accept(wp), net::detached);
    net::co_spawn(wp->ioc, Sweep(wp), net::detached);
    if (wp->index == 0 && options_.scrape_engine_metrics) net::co_spawn(wp->ioc, ScrapeLoop(wp), net::detached);
    wp->thread = std::thread([wp] {
      std::string name = "drover-gw-" + std::to_string(wp->index);
      ::pthread_setname_np(::pthread_self(), name.c_str());
      auto guard = net::make_work_guard(wp->ioc);
      wp->ioc.run();
    });
  }
  return Status::Ok();
}

void GatewayImpl::Stop() {
  if (stopped_.exchange(true)) return;
  for (auto& w : workers_) w->ioc.stop();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  // A key lookup under way finishes (its answer is posted to a stopped io
  // context, never run) before the io contexts go.
  auth_pool_->stop();
  auth_pool_->join();
  {
    MutexLock lock(&batches_mu_);
    batches_.clear();  // their timers belong to the io contexts about to go
  }
  workers_.clear();  // closes the listeners and every connection
}

void GatewayImpl::SetRoutes(std::vector<gateway::Route> routes) {
  std::shared_ptr<const RouteTable> old;
  {
    MutexLock lock(&shared_->routes_mu);
    old = shared_->routes;
  }
  // A replica is the same while its id, address and secret are: a secret
  // that changed makes a new one (the io threads read it without a lock).
  std::map<std::tuple<std::string, std::string, std::string>, std::shared_ptr<Replica>> known;
  for (const auto& [m, e] : old->models) {
    for (const auto& r : e.replicas) known[{r->id, r->address, r->api_key}] = r;
  }
  auto table = std::make_shared<RouteTable>();
  for (auto& route : routes) {
    if (route.model.empty()) continue;
    // One route per (tenant, model): two tenants' models of one name stay
    // apart, each with its replicas and its stats.
    const std::string key = RouteKey(route.tenant, route.model);
    auto [it, fresh] = table->models.try_emplace(key);
    ModelEntry& e = it->second;
    if (fresh) {
      e.route = route;
      e.route.replicas.clear();
      auto o = old->models.find(key);
      e.stats = o != old->models.end() ? o->second.stats : std::make_shared<ModelStats>();
      table->tenants_of[route.model].push_back(route.tenant);
    }
    for (const auto& u : route.replicas) {
      auto k = known.find({u.id, u.address, u.api_key});
      std::shared_ptr<Replica> r;
      if (k != known.end()) {
        r = k->second;
      } else {
        auto ep = ParseHostPort(u.address, true);
        if (!ep.ok()) continue;  // an address that does not resolve is not routable
        r = std::make_shared<Replica>();
        r->id = u.id;
        r->address = u.address;
        r->endpoint = *ep;
        r->id_hash = Hash64(u.id + "@" + u.address);
        // A secret that would break the header line is not sent (the
        // engine then refuses the gateway, and the client gets a 502).
        const bool header_safe =
            std::all_of(u.api_key.begin(), u.api_key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
        r->api_key = u.api_key;
        if (!u.api_key.empty() && header_safe) r->authorization = "Authorization: Bearer " + u.api_key + "\r\n";
        known[{u.id, u.address, u.api_key}] = r;
      }
      if (std::find(e.replicas.begin(), e.replicas.end(), r) == e.replicas.end()) {
        e.replicas.push_back(r);
        e.route.replicas.push_back(u);
      }
    }
  }
  {
    MutexLock lock(&shared_->routes_mu);
    shared_->routes = std::move(table);
    shared_->routes_version.fetch_add(1, std::memory_order_release);
  }
  // Wake the requests waiting for a cold start: they look again.
  for (auto& w : workers_) {
    Worker* wp = w.get();
    net::post(wp->ioc, [wp] {
      for (net::steady_timer* t : wp->cold_waiters) t->cancel();
    });
  }
}

std::vector<ModelLoad> GatewayImpl::TakeLoad() {
  std::shared_ptr<const RouteTable> t;
  {
    MutexLock lock(&shared_->routes_mu);
    t = shared_->routes;
  }
  std::vector<ModelLoad> out;
  for (const auto& [key, e] : t->models) {
    ModelLoad l;
    l.model = e.route.model;
    l.tenant = e.route.tenant;
    l.deployment = e.route.deployment;
    l.outstanding = e.stats->outstanding.load();
    l.waiting = e.stats->waiting.load();
    l.requests = e.stats->requests.exchange(0);
    for (const auto& r : e.replicas) {
      l.outstanding_by_replica.emplace_back(r->id, r->outstanding.load());
      const int64_t q = r->engine_waiting.load();
      if (q >= 0) l.engine_waiting = std::max<int64_t>(l.engine_waiting, 0) + q;
      l.routing_by_replica.push_back(
          {r->id, r->prefix_blocks.load(), r->prefix_hit_blocks.load(), q >= 0 ? r->engine_load.load() : -1});
    }
    const int64_t queued = e.stats->queued.exchange(0);
    const int64_t queue_us = e.stats->queue_us.exchange(0);
    if (queued > 0) l.queue_ms = static_cast<double>(queue_us) / 1000.0 / static_cast<double>(queued);
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const ModelLoad& a, const ModelLoad& b) {
    return std::tie(a.model, a.tenant) < std::tie(b.model, b.tenant);
  });
  return out;
}

std::shared_ptr<const RouteTable> GatewayImpl::Table(Worker* w) {
  uint64_t v = shared_->routes_version.load(std::memory_order_acquire);
  if (w->table_version != v) {
    MutexLock lock(&shared_->routes_mu);
    w->table = shared_->routes;
    w->table_version = shared_->routes_version.load(std::memory_order_relaxed);
  }
  return w->table;
}

UsageCell* GatewayImpl::CellFor(Worker* w, const std::string& tenant, const std::string& model,
                                const std::string& key) {
  std::string k;
  k.reserve(tenant.size() + model.size() + key.size() + 2);
  k.append(tenant).push_back('\0');
  k.append(model).push_back('\0');
  k.append(key);
  auto it = w->cells.find(k);
  if (it != w->cells.end()) return it->second;
  UsageCell* c = shared_->meter.Cell(tenant, model, key);
  w->cells.emplace(std::move(k), c);
  return c;
}

awaitable<void> GatewayImpl::Accept(Worker* w) {
  net::steady_timer backoff(w->ioc);
  for (;;) {
    beast::error_code ec;
    tcp::socket s = co_await w->acceptor->async_accept(Await(ec));
    if (ec == net::error::operation_aborted || !w->acceptor->is_open()) co_return;
    if (ec) {  // out of descriptors and the like: breathe, then go on
      backoff.expires_after(Ms(10));
      co_await backoff.async_wait(Await(ec));
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    s.non_blocking(true, ec);  // for WriteAll's first try
    auto c = std::make_shared<Conn>(w, std::move(s));
    if (tls_) {
      c->tls.emplace(c->stream.socket, *tls_);
      net::co_spawn(w->ioc, ServeTls(w, std::move(c)), net::detached);
    } else {
      tcp::socket& plain = c->stream.socket;
      net::co_spawn(w->ioc, ServeOn(w, std::move(c), plain), net::detached);
    }
  }
}

awaitable<void> GatewayImpl::ServeTls(Worker* w, std::shared_ptr<Conn> c) {
  beast::error_code ec;
  c->stream.ExpiresAfterMs(options_.header_timeout_ms);
  co_await c->tls->async_handshake(net::ssl::stream_base::server, Await(ec));
  if (ec) {  // a plaintext client, one that distrusts the certificate, or one too slow: no answer
    c->stream.socket.close(ec);
    co_return;
  }
  TlsStream& tls = *c->tls;
  co_await ServeOn(w, std::move(c), tls);
}

awaitable<void> GatewayImpl::Sweep(Worker* w) {
  net::steady_timer timer(w->ioc);
  std::vector<TimedSocket*> late;
  for (;;) {
    timer.expires_after(Ms(kSweepPeriodMs));
    beast::error_code ec;
    co_await timer.async_wait(Await(ec));
    if (ec) co_return;
    const int64_t now = NowNs();
    late.clear();
    for (TimedSocket* t : w->timed) {
      if (t->deadline_ns < now) late.push_back(t);
    }
    for (TimedSocket* t : late) {
      t->timed_out = true;
      t->Never();
      t->socket.close(ec);
    }
  }
}

Status GatewayImpl::BodyTooLarge() const {
  return Status(Code::kOutOfRange,
                "the request body is larger than " + std::to_string(options_.max_body_bytes) + " bytes");
}

template <typename Stream>
awaitable<void> GatewayImpl::ServeOn(Worker* w, std::shared_ptr<Conn> c, Stream& s) {
  beast::error_code ec;
  bool first = true;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(std::min<size_t>(options_.max_header_bytes, UINT32_MAX)));
    parser.body_limit(options_.max_body_bytes);
    c->stream.ExpiresAfterMs(first ? options_.header_timeout_ms : options_.idle_timeout_ms);
    co_await bhttp::async_read_header(s, c->buf, parser, Await(ec));
    HttpSink<Stream> early(c, s, false, options_.write_timeout_ms);
    // A read that failed: the error to answer with (none when the peer went).
    auto refuse = [&](const beast::error_code& e) -> Status {
      if (e == bhttp::error::header_limit) return Status(Code::kOutOfRange, "the request header is too large");
      if (e == bhttp::error::body_limit) return BodyTooLarge();  // Content-Length or the body over the limit
      if (e.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
          e != bhttp::error::end_of_stream && e != bhttp::error::partial_message) {
        return InvalidArgument("malformed HTTP request: " + e.message());
      }
      return Status::Ok();
    };
    auto reject = [&](const Status& why) -> awaitable<void> {
      Rejected(why.code() == Code::kOutOfRange ? "too_large" : "bad_request")->Inc();
      co_await SendError(early, why);
    };
    if (ec) {
      if (Status why = refuse(ec); !why.ok()) co_await reject(why);
      break;
    }
    first = false;
    auto& h = parser.get();
    if (ws::is_upgrade(h)) {
      if (PathOf(SV(h.target())) == kWsPath) {
        co_await ServeWebSocket(w, c, s, parser.release());
        co_return;
      }
      co_await SendError(early, NotFound("no WebSocket endpoint at " + std::string(PathOf(SV(h.target()))) +
                                         " (it is " + std::string(kWsPath) + ")"));
      break;
    }
    if (beast::iequals(h[bhttp::field::expect], "100-continue") && !parser.is_done()) {
      if (parser.content_length() && *parser.content_length() > options_.max_body_bytes) {
        co_await reject(BodyTooLarge());
        break;
      }
      static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await net::async_write(s, net::buffer(k100.data(), k100.size()), Await(ec));
      if (ec) break;
    }
    c->stream.ExpiresAfterMs(options_.header_timeout_ms);
    co_await ReadRest(s, c->buf, parser, ec);
    if (ec) {
      if (Status why = refuse(ec); !why.ok()) co_await reject(why);
      break;
    }
    c->stream.Never();  // while the answer is being made (a stream may take minutes)
    const auto& req = parser.get();
    HttpSink<Stream> sink(c, s, req.keep_alive(), options_.write_timeout_ms);
    co_await Handle(w, req, sink);
    if (!sink.keep_alive()) break;
  }
  if constexpr (kIsTls<Stream>) {
    // close_notify, so that the client can tell the end from a cut.
    c->stream.ExpiresAfterMs(kTlsShutdownMs);
    co_await s.async_shutdown(Await(ec));
  }
  c->stream.socket.shutdown(tcp::socket::shutdown_send, ec);
  c->stream.socket.close(ec);
}

awaitable<void> GatewayImpl::Handle(Worker* w, const bhttp::request<bhttp::string_body>& req, Sink& sink) {
  std::string_view path = PathOf(SV(req.target()));
  const bool get = req.method() == bhttp::verb::get;
  if (path == "/healthz") {
    co_await sink.Whole(200, "text/plain", "ok\n", {});
    co_return;
  }
  if (path == "/metrics" && get) {
    // Usage by tenant and key is an operator's view: an admin key's, unless public.
    if (!options_.metrics_public) {
      Status err;
      auto auth = co_await Authenticate(SV(req[bhttp::field::authorization]), &err);
      if (!auth) {
        co_await SendError(sink, err);
        co_return;
      }
      if (!auth->info.admin) {
        co_await SendError(sink,
                           PermissionDenied("/metrics needs an admin key (or a gateway run with public metrics)"));
        co_return;
      }
    }
    std::string text = registry_->Render();
    co_await sink.Whole(200, "text/plain; version=0.0.4; charset=utf-8", text, {});
    co_return;
  }
  if (path == "/v1/models" || path.substr(0, 11) == "/v1/models/") {
    if (!get) {
      co_await sink.Whole(405, "application/json",
                          ErrorJson("use GET on " + std::string(path), "invalid_request_error", "method_not_allowed"),
                          "Allow: GET\r\n");
      co_return;
    }
    Status err;
    auto auth = co_await Authenticate(SV(req[bhttp::field::authorization]), &err);
    if (!auth) {
      co_await SendError(sink, err);
      co_return;
    }
    auto t = Table(w);
    nlohmann::json data = nlohmann::json::array();
    // What the key reaches (FindRoute): its tenant's models and those every
    // tenant may use, never another tenant's of the same name.
    std::vector<std::string> names;
    std::map<std::string, const ModelEntry*> reached;
    for (const auto& [key, e] : t->models) {
      const ModelEntry* r = FindRoute(*t, auth->info.tenant, auth->info.admin, e.route.model);
      if (r == &e) reached[e.route.model] = r;
    }
    for (const auto& [model, e] : reached) names.push_back(model);
    if (path.size() > 11) {  // /v1/models/{id}
      std::string id(path.substr(11));
      if (std::find(names.begin(), names.end(), id) == names.end()) {
        co_await SendError(sink, NotFound("the model '" + id + "' does not exist or you do not have access to it"),
                           "model");
        co_return;
      }
      names = {id};
    }
    for (const auto& m : names) {
      const ModelEntry& e = *reached.at(m);
      data.push_back({{"id", m},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", e.route.tenant.empty() ? std::string("drover") : e.route.tenant}});
    }
    std::string body = path.size() > 11 ? data[0].dump() : nlohmann::json{{"object", "list"}, {"data", data}}.dump();
    co_await sink.Whole(200, "application/json", body, {});
    co_return;
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/embeddings") {
    if (req.method() != bhttp::verb::post) {
      co_await sink.Whole(405, "application/json",
                          ErrorJson("use POST on " + std::string(path), "invalid_request_error", "method_not_allowed"),
                          "Allow: POST\r\n");
      co_return;
    }
    co_await Proxy(w, path, SV(req[bhttp::field::authorization]), SV(req["x-session-id"]), req.body(), sink, false);
    co_return;
  }
  Rejected("not_found")->Inc();
  co_await sink.Whole(
      404, "application/json",
      ErrorJson("unknown path " + std::string(path) +
                    " (the gateway serves /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings)",
                "invalid_request_error", "unknown_url"),
      {});
}

// The messages of one WebSocket, each a chat completion streamed back.
template <typename WsStream>
awaitable<void> ServeWebSocketOn(GatewayImpl* g, Worker* w, WsStream& wss,
                                 const bhttp::request<bhttp::string_body>& req, const std::string& authorization) {
  std::string session(req["x-session-id"]);
  wss.set_option(ws::stream_base::timeout::suggested(beast::role_type::server));
  wss.read_message_max(g->options().max_body_bytes);
  beast::error_code ec;
  co_await wss.async_accept(req, Await(ec));
  if (ec) co_return;
  for (;;) {
    beast::flat_buffer b;
    co_await wss.async_read(b, Await(ec));
    if (ec) break;
    WsSink<WsStream> sink(wss);
    co_await g->Proxy(w, "/v1/chat/completions", authorization, session, beast::buffers_to_string(b.data()), sink,
                      /*force_stream=*/true);
    if (!sink.ok()) break;
  }
  if (wss.is_open()) {
    co_await wss.async_close(ws::close_code::normal, Await(ec));
  }
}

template <typename Stream>
awaitable<void> GatewayImpl::ServeWebSocket(Worker* w, std::shared_ptr<Conn> c, Stream& s,
                                            bhttp::request<bhttp::string_body> req) {
  // The key: the Authorization header, or ?api_key= for browsers, which
  // cannot set headers on a WebSocket.
  std::string authorization(req[bhttp::field::authorization]);
  std::string_view target = SV(req.target());
  if (authorization.empty()) {
    size_t at = target.find("api_key=");
    if (at != std::string_view::npos) {
      std::string_view v = target.substr(at + 8);
      v = v.substr(0, v.find('&'));
      authorization = "Bearer " + std::string(v);
    }
  }
  Status err;
  auto auth = co_await Authenticate(authorization, &err);
  if (!auth || auth->info.read_only) {  // a viewer's key: refused before the upgrade
    if (auth) {
      Rejected("forbidden")->Inc();
      err = ReadOnlyKey();
    }
    HttpSink<Stream> sink(c, s, false, options_.write_timeout_ms);
    co_await SendError(sink, err);
    co_return;
  }
  c->stream.Never();
  if constexpr (kIsTls<Stream>) {
    // wss: the WebSocket over the connection's TLS stream, which the
    // connection (and its deadlines) keeps owning.
    ws::stream<TlsStream&> wss(s);
    co_await ServeWebSocketOn(this, w, wss, req, authorization);
  } else {
    ws::stream<beast::tcp_stream> wss(std::move(c->stream.socket));
    co_await ServeWebSocketOn(this, w, wss, req, authorization);
  }
}

Result<std::unique_ptr<Gateway>> StartGateway(GatewayOptions options, Authenticator authenticator,
                                              metrics::Registry* registry_or_null) {
  auto g = std::make_unique<GatewayImpl>(std::move(options), std::move(authenticator), registry_or_null);
  DROVER_RETURN_IF_ERROR(g->Start());
  return std::unique_ptr<Gateway>(std::move(g));
}

}  // namespace drover::gateway
