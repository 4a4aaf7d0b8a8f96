// The proxy path: authenticate, parse, limit, route, forward over a pooled
// keep-alive connection, stream back, meter.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "drover/common/json_depth.h"
#include "drover/gateway/impl.h"

namespace drover::gateway {
namespace {

using Ms = std::chrono::milliseconds;

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() &&
         beast::iequals(beast::string_view(s.data(), prefix.size()), beast::string_view(prefix.data(), prefix.size()));
}

// Decrements the in-flight counts of a replica and its model on scope exit.
class InFlight {
 public:
  InFlight(Replica& r, ModelStats& m) : r_(r), m_(m) {
    r_.outstanding.fetch_add(1, std::memory_order_relaxed);
    m_.outstanding.fetch_add(1, std::memory_order_relaxed);
  }
  ~InFlight() {
    r_.outstanding.fetch_sub(1, std::memory_order_relaxed);
    m_.outstanding.fetch_sub(1, std::memory_order_relaxed);
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Replica& r_;
  ModelStats& m_;
};

}  // namespace

awaitable<std::shared_ptr<const AuthEntry>> GatewayImpl::LookupKey(std::string token) {
  co_return auth_.Lookup(token, NowNs());
}

awaitable<std::shared_ptr<const AuthEntry>> GatewayImpl::Authenticate(std::string_view authorization, Status* err) {
  if (authorization.empty()) {
    Rejected("unauthenticated")->Inc();
    *err = Unauthenticated("missing API key: send the header 'Authorization: Bearer <key>'");
    co_return nullptr;
  }
  if (!StartsWithNoCase(authorization, "Bearer ")) {
    Rejected("unauthenticated")->Inc();
    *err = Unauthenticated("the Authorization header must be 'Bearer <key>'");
    co_return nullptr;
  }
  std::string_view token = authorization.substr(7);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty() || token.size() > 4096) {
    Rejected("unauthenticated")->Inc();
    *err = Unauthenticated("incorrect API key provided");
    co_return nullptr;
  }
  auto e = auth_.Cached(token, NowNs());
  if (e == nullptr) {
    // A coroutine with the token as its parameter, not a lambda with a
    // capture: GCC 12 frees a coroutine lambda's captures twice.
    e = co_await net::co_spawn(auth_pool_->get_executor(), LookupKey(std::string(token)), net::use_awaitable);
  }
  if (e->status.ok()) co_return e;
  Code c = e->status.code();
  if (c == Code::kUnauthenticated || c == Code::kPermissionDenied || c == Code::kNotFound ||
      c == Code::kInvalidArgument) {
    Rejected("unauthenticated")->Inc();
    *err = Unauthenticated("incorrect API key provided");
  } else {
    Rejected("unavailable")->Inc();
    *err = Unavailable("the key service is unavailable: " + e->status.message());
  }
  co_return nullptr;
}

Status GatewayImpl::ReadOnlyKey() {
  return PermissionDenied(
      "this key's role (viewer) may list models but not run inference: use a key of role user, tenant-admin or admin");
}

awaitable<bool> GatewayImpl::SendError(Sink& sink, const Status& st, std::string_view param, int64_t retry_after_s) {
  ErrorShape s = ShapeFor(st.code());
  std::string extra;
  if (retry_after_s > 0) extra = "retry-after: " + std::to_string(retry_after_s) + "\r\n";
  if (s.status == 401) extra += "WWW-Authenticate: Bearer\r\n";
  co_return co_await sink.Whole(s.status, "application/json", ErrorJson(st.message(), s.type, s.code, param), extra);
}

awaitable<std::shared_ptr<const RouteTable>> GatewayImpl::WaitForReplica(Worker* w, const std::string& route_key,
                                                                         ModelStats& stats, Sink& sink,
                                                                         const std::vector<std::string>& dead) {
  counters_.cold_starts->Inc();
  stats.waiting.fetch_add(1, std::memory_order_relaxed);
  const auto deadline = std::chrono::steady_clock::now() + Ms(options_.cold_start_wait_ms);
  net::steady_timer timer(w->ioc);
  w->cold_waiters.push_back(&timer);
  struct Unregister {
    Worker* w;
    net::steady_timer* t;
    ModelStats& stats;
    ~Unregister() {
      auto& v = w->cold_waiters;
      v.erase(std::remove(v.begin(), v.end(), t), v.end());
      stats.waiting.fetch_sub(1, std::memory_order_relaxed);
    }
  } unregister{w, &timer, stats};
  // A client that leaves stops the wait (and is no longer counted waiting).
  bool gone = false;
  sink.Watch([&gone, &timer] {
    gone = true;
    timer.cancel();
  });
  UnwatchAtExit unwatch{sink};
  std::shared_ptr<const RouteTable> t = Table(w);
  for (;;) {
    if (gone) {
      counters_.client_cancels->Inc();
      co_return nullptr;
    }
    auto it = t->models.find(route_key);
    if (it == t->models.end()) co_return t;
    for (const auto& r : it->second.replicas) {
      if (std::find(dead.begin(), dead.end(), r->id) == dead.end()) co_return t;
    }
    if (std::chrono::steady_clock::now() >= deadline) co_return t;
    timer.expires_at(deadline);
    beast::error_code ec;
    co_await timer.async_wait(Await(ec));  // SetRoutes cancels it
    t = Table(w);
  }
}

awaitable<void> GatewayImpl::Proxy(Worker* w, std::string_view path, std::string_view authorization,
                                   std::string_view session_id, std::string_view body, Sink& sink, bool force_stream) {
  const int64_t t0 = NowNs();
  Status err;
  auto auth = co_await Authenticate(authorization, &err);
  if (!auth) {
    co_await SendError(sink, err);
    co_return;
  }
  if (auth->info.read_only) {  // before the body is parsed: a viewer's call costs nothing more
    Rejected("forbidden")->Inc();
    co_await SendError(sink, ReadOnlyKey());
    co_return;
  }
  // Before any parser: a body of nested brackets costs a tree node per
  // byte in ParseDocument, and the engine's parser as much again.
  if (Status deep = CheckJsonDepth(body); !deep.ok()) {
    Rejected("bad_request")->Inc();
    co_await SendError(sink, deep);
    co_return;
  }
  std::string bad_param;
  auto parsed = ParseRequest(body, &bad_param);
  if (!parsed.ok()) {
    Rejected("bad_request")->Inc();
    co_await SendError(sink, parsed.status(), bad_param);
    co_return;
  }
  RequestInfo& info = *parsed;
  const bool embeddings = path == "/v1/embeddings";
  if (embeddings && info.stream) {
    Rejected("bad_request")->Inc();
    co_await SendError(sink, InvalidArgument("embeddings cannot be streamed"), "stream");
    co_return;
  }
  auto table = Table(w);
  // By (the key's tenant, model): another tenant's model of the name is as
  // missing as a name nobody serves.
  const ModelEntry* entry = FindRoute(*table, auth->info.tenant, auth->info.admin, info.model);
  if (entry == nullptr) {
    Rejected("not_found")->Inc();
    co_await SendError(sink, NotFound("the model '" + info.model + "' does not exist or you do not have access to it"),
                       "model");
    co_return;
  }
  int64_t retry_after = 0;
  if (Status s = AdmitRequest(*auth, t0, &retry_after); !s.ok()) {
    Rejected("rate_limited")->Inc();
    co_await SendError(sink, s, {}, retry_after);
    co_return;
  }
  UsageCell* cell = CellFor(w, auth->info.tenant, info.model, auth->info.token_id);
  cell->requests.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<ModelStats> stats = entry->stats;
  // The route found: after a cold-start wait, the same tenant's again.
  const std::string route_key = RouteKey(entry->route.tenant, entry->route.model);
  stats->requests.fetch_add(1, std::memory_order_relaxed);
  // The prompt's prefix, from the body as the client sent it (a rewritten
  // one is re-serialized), for the routes that route on it.
  PickInput pick;
  pick.policy = entry->route.routing;
  pick.round_robin = &stats->round_robin;
  if (!embeddings && (pick.policy.kind == RoutingPolicy::Kind::kPrefixLoad ||
                      pick.policy.kind == RoutingPolicy::Kind::kPrefix)) {
    pick.salt = TenantSalt(auth->info.tenant);
    pick.owner = Hash64(auth->info.token_id);
    pick.chain = PrefixChain(PromptOf(body), pick.salt);
  }

  // Stream: ask the engine for usage if the client did not, and hide that chunk.
  bool strip = false;
  const bool rewrite = (force_stream && !info.stream) || (!embeddings && info.stream && !info.include_usage) ||
                       (embeddings && options_.embeddings_batch_window_us > 0);
  if (rewrite) {
    if (Status s = ParseDocument(body, &info); !s.ok()) {
      co_await SendError(sink, s);
      co_return;
    }
  }
  // The body goes upstream as the client sent it (no copy) unless rewritten.
  std::string rewritten;
  bool redump = false;
  if (force_stream && !info.stream) {
    info.stream = true;
    info.doc["stream"] = true;
    redump = true;
  }
  if (info.stream && !info.include_usage) {
    info.doc["stream_options"]["include_usage"] = true;
    strip = true;
    redump = true;
  }
  if (redump) {
    rewritten = info.doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    body = rewritten;
  }

  bool waited = false;
  if (entry->replicas.empty() && entry->route.scales_from_zero) {
    waited = true;
    table = co_await WaitForReplica(w, route_key, *stats, sink);
    if (!table) co_return;  // the client left
    auto it = table->models.find(route_key);
    entry = it == table->models.end() ? nullptr : &it->second;
    if (entry == nullptr) {
      cell->errors.fetch_add(1, std::memory_order_relaxed);
      co_await SendError(sink, NotFound("the model '" + info.model + "' is no longer served"), "model");
      co_return;
    }
  }
  CallResult res;
  res.mark_ns = t0;
  res.clean = !waited;
  res.commit = [cell, auth, t0](const CallResult& r) {
    if (r.status >= 400 || r.stream_error) cell->errors.fetch_add(1, std::memory_order_relaxed);
    if (r.usage.found) {
      cell->prompt_tokens.fetch_add(r.usage.prompt_tokens, std::memory_order_relaxed);
      cell->completion_tokens.fetch_add(r.usage.completion_tokens, std::memory_order_relaxed);
      ChargeTokens(*auth, r.usage.prompt_tokens + r.usage.completion_tokens, NowNs());
    }
    cell->latency->Observe(static_cast<double>(NowNs() - t0) / 1e9);
    if (r.first_event_ns > 0) cell->first_token->Observe(static_cast<double>(r.first_event_ns - t0) / 1e9);
  };
  if (entry->replicas.empty()) {
    Rejected("unavailable")->Inc();
    std::string msg = "the model '" + info.model + "' has no ready replica";
    if (entry->route.scales_from_zero) {
      msg += " (none started within " + std::to_string(options_.cold_start_wait_ms) + " ms)";
    }
    res.status = 503;
    res.Commit();
    co_await SendError(sink, Unavailable(msg));
  } else if (embeddings && options_.embeddings_batch_window_us > 0) {
    co_await BatchEmbeddings(w, *entry, info, sink, res);
  } else {
    if (options_.affinity || pick.policy.kind == RoutingPolicy::Kind::kAffinity) {
      if (!info.user.empty())
        pick.affinity_key = Hash64(info.user);
      else if (!session_id.empty())
        pick.affinity_key = Hash64(session_id);
    }
    co_await Route(w, *entry, path, body, strip, pick, sink, res);
  }
  res.Commit();  // if no path did before its last write
}

awaitable<void> GatewayImpl::Route(Worker* w, const ModelEntry& entry, std::string_view path, std::string_view body,
                                   bool strip_usage, const PickInput& pick, Sink& sink, CallResult& res,
                                   bool waited) {
  std::vector<Replica*> tried;
  std::string why;
  for (int attempt = 0; attempt <= options_.retries; ++attempt) {
    const Pick p = ChooseReplica(entry.replicas, tried, pick, w->rng);
    Replica* r = p.replica;
    if (r == nullptr) break;
    tried.push_back(r);
    r->picks[static_cast<int>(p.reason)].fetch_add(1, std::memory_order_relaxed);
    if (!pick.chain.empty()) {
      // What it will hold once it has the prompt: the next request with
      // this prefix (even one arriving meanwhile) goes there too.
      r->prefixes.Insert(pick.salt, pick.owner, pick.chain);
      r->prefix_blocks.fetch_add(static_cast<int64_t>(pick.chain.size()), std::memory_order_relaxed);
      r->prefix_hit_blocks.fetch_add(static_cast<int64_t>(p.hit_blocks), std::memory_order_relaxed);
    }
    if (attempt > 0) {
      counters_.retries->Inc();
      res.clean = false;
    }
    Outcome o;
    {
      InFlight in_flight(*r, *entry.stats);
      o = co_await Forward(w, *r, path, body, strip_usage, sink, res, &why);
    }
    if (o == Outcome::kDone) co_return;
    // It never got the prompt: its cache is no reason to go back there.
    if (!pick.chain.empty()) r->prefixes.Erase(pick.salt, pick.chain);
  }
  if (entry.route.scales_from_zero && !waited) {
    std::vector<std::string> dead;
    for (const Replica* r : tried) dead.push_back(r->id);
    const std::string key = RouteKey(entry.route.tenant, entry.route.model);
    std::shared_ptr<const RouteTable> fresh = co_await WaitForReplica(w, key, *entry.stats, sink, dead);
    if (!fresh) {
      res.client_gone = true;
      co_return;
    }
    auto it = fresh->models.find(key);
    if (it != fresh->models.end() && !it->second.replicas.empty()) {
      PickInput again = pick;
      again.policy = it->second.route.routing;
      co_await Route(w, it->second, path, body, strip_usage, again, sink, res, true);
      co_return;
    }
  }
  res.status = 502;
  res.Commit();
  co_await SendError(sink, Status(Code::kAborted, "no replica of model '" + entry.route.model + "' answered (" +
                                                      std::to_string(tried.size()) + " tried; last: " + why + ")"));
}

awaitable<GatewayImpl::Outcome> GatewayImpl::AnswerTooLarge(const Replica& r, Sink& sink, CallResult& res) {
  sink.Unwatch();
  res.status = 502;
  res.clean = false;
  res.Commit();
  const std::string message = "the answer of replica '" + r.id + "' is larger than the gateway's limit of " +
                              std::to_string(options_.max_upstream_body_bytes) +
                              " bytes for a whole (non-streamed) answer: ask for fewer or shorter results, or stream";
  res.client_gone = !co_await sink.Whole(502, "application/json",
                                         ErrorJson(message, "server_error", "upstream_response_too_large"), {});
  co_return Outcome::kDone;
}

awaitable<GatewayImpl::Outcome> GatewayImpl::Forward(Worker* w, Replica& r, std::string_view path,
                                                     std::string_view body, bool strip_usage, Sink& sink,
                                                     CallResult& res, std::string* why) {
  beast::error_code ec;
  for (int round = 0; round < 2; ++round) {
    // A pooled connection may have been closed by the engine meanwhile; a
    // failure before the status line on one is tried again on a new one.
    std::unique_ptr<UpConn> up;
    bool reused = false;
    if (auto p = w->idle.find(r.address); p != w->idle.end() && !p->second.empty()) {
      up = std::move(p->second.back());
      p->second.pop_back();
      reused = true;
    } else {
      up = std::make_unique<UpConn>(w->timed, w->ioc.get_executor());
      up->s.ExpiresAfterMs(options_.connect_timeout_ms);
      co_await up->s.socket.async_connect(r.endpoint, Await(ec));
      if (ec) {
        *why = "replica '" + r.id + "' at " + r.address + ": connect: " + ec.message();
        co_return Outcome::kRetry;
      }
      up->s.socket.set_option(tcp::no_delay(true), ec);
      up->s.socket.non_blocking(true, ec);  // for WriteAll's first try
    }
    std::string head;
    head.reserve(128);
    head += "POST ";
    head += path;
    head += " HTTP/1.1\r\nHost: ";
    head += r.address;
    head += "\r\nContent-Type: application/json\r\nContent-Length: ";
    head += std::to_string(body.size());
    head += "\r\n";
    head += r.authorization;  // the replica's secret; never the client's header
    head += "\r\n";
    std::array<net::const_buffer, 2> bufs{net::buffer(head), net::buffer(body.data(), body.size())};
    Own(res);  // up to the write: the system call and what it wakes are the hop's
    up->s.ExpiresAfterMs(options_.write_timeout_ms);
    co_await WriteAll(up->s.socket, bufs, ec);
    if (ec) {
      res.clean = false;
      if (reused) continue;
      *why = "replica '" + r.id + "': sending the request: " + ec.message();
      co_return Outcome::kRetry;
    }
    // While the replica works, a client that leaves closes the upstream
    // connection: the engine sees the request cancelled, and the
    // replica's outstanding count drops when this returns.
    bool gone = false;
    UpConn* raw = up.get();
    sink.Watch([&gone, raw] {
      gone = true;
      beast::error_code e;
      raw->s.socket.close(e);
    });
    UnwatchAtExit unwatch{sink};
    bhttp::response_parser<bhttp::empty_body> hp;
    hp.header_limit(64 << 10);
    // No limit on the header's Content-Length here (Beast's default, 8 MiB,
    // would fail the read and the call would be retried): a stream has none,
    // and a whole answer's is checked against max_upstream_body_bytes below.
    // The largest number, not boost::none: Beast 1.74 compares the length
    // with the optional, and every length is greater than none.
    hp.body_limit(std::numeric_limits<std::uint64_t>::max());
    up->s.ExpiresAfterMs(options_.upstream_timeout_ms);
    co_await bhttp::async_read_header(up->s.socket, up->buf, hp, Await(ec));
    if (gone) co_return ClientLeft(res);
    if (ec) {
      res.clean = false;
      if (reused && !up->s.timed_out) continue;
      *why = "replica '" + r.id + "': no answer: " + ec.message();
      co_return Outcome::kRetry;
    }
    const int status = static_cast<int>(hp.get().result_int());
    if (status == 502 || status == 503) {
      *why = "replica '" + r.id + "' answered " + std::to_string(status);
      co_return Outcome::kRetry;
    }
    if (status == 401 || status == 403) {
      // The engine refused the gateway's own key (the client's never goes
      // upstream): a replica started with another secret or none. Not the
      // client's fault: another replica is tried, and the client gets a 502.
      counters_.engine_refusals->Inc();
      *why = "replica '" + r.id + "' refused the gateway (" + std::to_string(status) +
             "): its engine's API key is not the replica's secret";
      co_return Outcome::kRetry;
    }
    const bool sse =
        status == 200 && SV(hp.get()[bhttp::field::content_type]).find("text/event-stream") != std::string_view::npos;
    if (!sse) {
      // A whole answer over the limit is the same on every replica: an
      // error of its own, not retried (and the connection is not reused).
      if (hp.content_length() && *hp.content_length() > options_.max_upstream_body_bytes) {
        co_return co_await AnswerTooLarge(r, sink, res);
      }
      bhttp::response_parser<bhttp::string_body> sp{std::move(hp)};
      sp.body_limit(options_.max_upstream_body_bytes);
      co_await ReadRest(up->s.socket, up->buf, sp, ec);
      if (gone) co_return ClientLeft(res);
      res.mark_ns = NowNs();
      sink.Unwatch();
      if (ec == bhttp::error::body_limit) co_return co_await AnswerTooLarge(r, sink, res);  // chunked, or no length
      if (ec) {
        *why = "replica '" + r.id + "': reading the answer: " + ec.message();
        co_return Outcome::kRetry;
      }
      const auto& resp = sp.get();
      res.status = status;
      if (status == 200) res.usage = FindUsage(resp.body());
      beast::string_view ct = resp[bhttp::field::content_type];
      bool keep = sp.keep_alive();
      res.Commit();
      Own(res);
      ObserveOverhead(res);
      bool ok = co_await sink.Whole(status, ct.empty() ? "application/json" : std::string_view(ct.data(), ct.size()),
                                    resp.body(), {});
      res.client_gone = !ok;
      if (keep) {
        up->s.Never();
        w->idle[r.address].push_back(std::move(up));
      }
      co_return Outcome::kDone;
    }

    // A stream: read as fast as the client takes it; events pass unchanged.
    bhttp::response_parser<bhttp::buffer_body> bp{std::move(hp)};
    bp.body_limit(boost::none);
    SseFilter filter(strip_usage);
    std::string out;
    std::array<char, 16384> tmp;
    bool broken = false;
    std::string fault;  // why the stream broke, when not the connection's error
    while (!bp.is_done()) {
      bp.get().body().data = tmp.data();
      bp.get().body().size = tmp.size();
      up->s.ExpiresAfterMs(options_.upstream_timeout_ms);
      co_await bhttp::async_read_some(up->s.socket, up->buf, bp, Await(ec));
      if (!sink.started()) res.mark_ns = NowNs();  // the first event's own time starts here
      if (ec == bhttp::error::need_buffer) ec = {};
      size_t n = tmp.size() - bp.get().body().size;
      out.clear();
      filter.Feed(std::string_view(tmp.data(), n), &out);
      if (filter.overflowed()) {
        fault = "an event over " + std::to_string(SseFilter::kMaxEventBytes >> 20) + " MiB";
        broken = true;
      }
      if (gone) break;
      if (!out.empty()) {
        if (!sink.started()) {
          res.first_event_ns = NowNs();
          Own(res);
          ObserveOverhead(res);
        }
        if (!co_await sink.Events(out)) {
          gone = true;
          break;
        }
      }
      if (ec || broken) {
        broken = true;
        break;
      }
    }
    sink.Unwatch();
    if (fault.empty()) fault = ec.message();
    res.status = 200;
    res.usage = filter.usage();
    if (gone) co_return ClientLeft(res);  // `up` closes: the engine sees the request cancelled
    if (broken && (!filter.saw_done() || filter.overflowed())) {
      if (!sink.started()) {
        *why = "replica '" + r.id + "' ended the stream before any event: " + fault;
        co_return Outcome::kRetry;
      }
      res.stream_error = true;
      counters_.stream_errors->Inc();
      res.Commit();
      std::string ev =
          "data: " + ErrorJson("replica '" + r.id + "' failed mid-stream: " + fault, "server_error", "upstream_error") +
          "\n\n";
      if (co_await sink.Events(ev)) co_await sink.EndStream();
      co_return Outcome::kDone;
    }
    res.Commit();
    co_await sink.EndStream();
    if (!broken && bp.keep_alive()) {
      up->s.Never();
      w->idle[r.address].push_back(std::move(up));
    }
    co_return Outcome::kDone;
  }
  *why = "replica '" + r.id + "': the connection failed twice";
  co_return Outcome::kRetry;
}

}  // namespace drover::gateway
