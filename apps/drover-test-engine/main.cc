// drover-test-engine: a small, fast, deterministic OpenAI-compatible engine
// for tests and benchmarks of the gateway and of deployments (a `custom`
// engine). Same prompt, same answer.
//
//   drover-test-engine --port 0 --model m [--token-delay-us N]
//       [--answer-delay-ms N] [--embed-call-us N] [--embed-input-us N]
//       [--max-running N] [--die-after-tokens N] [--never-ready | --ready-after-ms N]
//       [--fail-status 503] [--threads N] [--dim 8] [--default-max-tokens 16]
//       [--api-key K] [--guard-metrics]
//       [--prefill-us-per-token N] [--prefix-cache-tokens N] [--decode-slowdown F]
//
// Prints "listening on PORT" on stdout once it accepts connections.
//
// Endpoints: GET /health (200 once ready, else 503), GET /v1/models,
// GET /metrics (vllm:num_requests_running/waiting and
// vllm:request_queue_time_seconds, as vLLM names them, so the gateway's
// scraper reads them; with --max-running N at most N completions run at
// once, the others wait in a FIFO queue), POST /v1/chat/completions,
// /v1/completions (usage: prompt_tokens = words of the prompt,
// completion_tokens = max_tokens or the default; "stream": SSE, one token
// per event, token_delay between them, stream_options.include_usage; not
// streamed: the answer after answer_delay, dropped and counted as cancelled
// if the client closes first, as vLLM aborts a request whose client left) and
// /v1/embeddings (deterministic unit vectors, batch input; encoding_format
// float or base64; with --embed-call-us an accelerator's cost: calls run
// one at a time, each taking embed_call_us + embed_input_us per input, as a
// GPU's forward pass costs about the same for one input as for a batch).
//
// A key (DROVER_ENGINE_API_KEY, the replica's secret that the agent sets,
// or --api-key): every /v1/ request without "Authorization: Bearer <key>"
// gets 401, as vLLM's --api-key does; /health and /metrics stay open unless
// --guard-metrics (then /metrics asks for it too, as llama.cpp's server
// does). No key: it answers anyone.
//
// An engine's costs (issue 44), so that routing quality can be measured:
// with --prefill-us-per-token N the first token comes after N us per
// prompt token (word) not in its prefix cache, the prefills of all
// requests taking turns as on one accelerator; --prefix-cache-tokens N
// gives it a prefix cache of N tokens (prefix_cache.h; LRU; 0: none, every
// token computed); --decode-slowdown F makes each token's delay
// token_delay * (1 + F * (requests generating - 1)), as a batch's decode
// step grows with its size. /metrics adds vllm:prefix_cache_queries_total
// and vllm:prefix_cache_hits_total (tokens, as vLLM counts them) and
// vllm:kv_cache_usage_perc (running requests' prompt tokens over the cache).
//
// Not a model: the words are "w<n>" derived from a hash of the prompt.

#include <poll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>  // before asio: its awaitable.hpp uses std::exchange
// GCC 12 misreads Asio's recycling allocator of coroutine frames (its
// operator new and delete are a matching pair): a false positive.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "drover/common/mutex.h"
#include "prefix_cache.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using drover::Mutex;
using drover::MutexLock;
using tcp = net::ip::tcp;
using net::awaitable;
using json = nlohmann::json;

struct Config {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string model = "test-model";
  int64_t token_delay_us = 0;
  int64_t answer_delay_ms = 0;
  int64_t embed_call_us = 0;
  int64_t embed_input_us = 0;
  int64_t max_running = 0;  // 0: no limit
  int64_t die_after_tokens = -1;
  bool never_ready = false;
  int64_t ready_after_ms = 0;
  int fail_status = 0;
  int threads = 1;
  int dim = 8;
  int64_t default_max_tokens = 16;
  std::string api_key;  // empty: no key asked
  bool guard_metrics = false;
  int64_t prefill_us_per_token = 0;
  int64_t prefix_cache_tokens = 0;
  double decode_slowdown = 0;
};

Config cfg;
std::chrono::steady_clock::time_point started;
std::atomic<int64_t> outstanding{0};
std::atomic<int64_t> requests_total{0};
std::atomic<int64_t> cancelled_total{0};
std::atomic<int64_t> tokens_streamed{0};
std::atomic<int64_t> embed_calls_total{0};
std::atomic<int64_t> unauthorized_total{0};  // requests refused for their key
// When the simulated accelerator is free again (--embed-call-us).
Mutex accel_mu;
std::chrono::steady_clock::time_point accel_free;
// The prefix cache (--prefix-cache-tokens), made once the flags are read;
// when the prefill lane is free again (--prefill-us-per-token); the prompt
// tokens of the requests running now and the requests generating now.
std::unique_ptr<drover::test_engine::PrefixCacheModel> prefix_cache;
Mutex prefill_mu;
std::chrono::steady_clock::time_point prefill_free DROVER_GUARDED_BY(prefill_mu);
std::atomic<int64_t> running_prompt_tokens{0};
std::atomic<int64_t> generating{0};

// The completions' slots (--max-running) and the queue for them, as vLLM's
// scheduler has: running, waiting, and the time each request waited.
struct Waiter {
  net::any_io_executor ex;
  net::steady_timer* wake;
  bool* admitted;
};
Mutex slots_mu;
int64_t running DROVER_GUARDED_BY(slots_mu) = 0;
std::deque<Waiter> waiters DROVER_GUARDED_BY(slots_mu);
double queue_seconds_sum DROVER_GUARDED_BY(slots_mu) = 0;
int64_t queue_count DROVER_GUARDED_BY(slots_mu) = 0;

// Frees a slot: to the first waiter, else back to the pool.
void ReleaseSlot() {
  MutexLock lock(&slots_mu);
  if (waiters.empty()) {
    --running;
    return;
  }
  Waiter w = waiters.front();
  waiters.pop_front();
  net::post(w.ex, [w] {
    *w.admitted = true;
    w.wake->cancel();
  });
}

auto Await(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

uint64_t Fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

int64_t Words(std::string_view s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in) ++n;
    in = !space;
  }
  return n;
}

std::string Error(std::string_view msg, std::string_view type, std::string_view code) {
  return json{{"error", {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", code}}}}.dump();
}

std::string Head(int status, std::string_view type, int64_t len, bool keep) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " +
                  [&] {
                    auto r = bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status)));
                    return std::string(r.data(), r.size());
                  }() +
                  "\r\nContent-Type: " + std::string(type);
  if (len >= 0)
    h += "\r\nContent-Length: " + std::to_string(len);
  else
    h += "\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache";
  if (!keep) h += "\r\nConnection: close";
  return h + "\r\n\r\n";
}

// The request carries "Authorization: Bearer <cfg.api_key>" (or no key is
// asked); compared in constant time.
bool Authorized(const bhttp::request<bhttp::string_body>& req) {
  if (cfg.api_key.empty()) return true;
  const auto h = req[bhttp::field::authorization];
  const std::string want = "Bearer " + cfg.api_key;
  if (h.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(h[i] ^ want[i]);
  return diff == 0;
}

bool Ready() {
  if (cfg.never_ready) return false;
  return std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(cfg.ready_after_ms);
}

// The prompt's text: chat messages' contents or the completion prompt.
std::string PromptText(const json& req, bool chat) {
  std::string text;
  auto add = [&](const json& v) {
    if (v.is_string()) {
      text += v.get<std::string>();
      text += ' ';
    } else if (v.is_array()) {
      for (const auto& p : v) {
        if (p.is_string())
          text += p.get<std::string>() + " ";
        else if (p.is_object() && p.contains("text") && p["text"].is_string())
          text += p["text"].get<std::string>() + " ";
      }
    }
  };
  if (chat) {
    if (req.contains("messages") && req["messages"].is_array()) {
      for (const auto& m : req["messages"]) {
        if (m.is_object() && m.contains("content")) add(m["content"]);
      }
    }
  } else if (req.contains("prompt")) {
    add(req["prompt"]);
  }
  return text;
}

std::string Base64(const unsigned char* p, size_t n) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = static_cast<uint32_t>(p[i]) << 16;
    if (i + 1 < n) v |= static_cast<uint32_t>(p[i + 1]) << 8;
    if (i + 2 < n) v |= p[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::string Token(uint64_t h, int64_t i) { return "w" + std::to_string((h + static_cast<uint64_t>(i) * 7919) % 1000); }

struct Answer {
  int status = 200;
  std::string type = "application/json";
  std::string body;
  bool stream = false;
};

class Session {
 public:
  explicit Session(tcp::socket s) : stream_(std::move(s)) {}

  awaitable<void> Run() {
    beast::error_code ec;
    for (;;) {
      bhttp::request_parser<bhttp::string_body> p;
      p.body_limit(64 << 20);
      co_await bhttp::async_read(stream_, buf_, p, Await(ec));
      if (ec) break;
      auto req = p.release();
      bool keep = req.keep_alive();
      // The API's requests, not the probes' and scrapers' (/health, /metrics).
      const bool api = std::string_view(req.target().data(), req.target().size()).starts_with("/v1/");
      if (api) {
        requests_total.fetch_add(1, std::memory_order_relaxed);
        outstanding.fetch_add(1, std::memory_order_relaxed);
      }
      bool ok = co_await Handle(req, keep);
      if (api) outstanding.fetch_sub(1, std::memory_order_relaxed);
      if (!ok || !keep) break;
    }
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

 private:
  awaitable<bool> Write(std::string_view data) {
    beast::error_code ec;
    co_await net::async_write(stream_, net::buffer(data.data(), data.size()), Await(ec));
    co_return !ec;
  }
  awaitable<bool> Send(int status, std::string_view type, const std::string& body, bool keep) {
    std::string out = Head(status, type, static_cast<int64_t>(body.size()), keep) + body;
    co_return co_await Write(out);
  }
  awaitable<bool> Chunk(const std::string& data) {
    char size[24];
    int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    co_return co_await Write(std::string(size, static_cast<size_t>(n)) + data + "\r\n");
  }

  awaitable<bool> Handle(const bhttp::request<bhttp::string_body>& req, bool keep) {
    std::string path(req.target().data(), req.target().size());
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    if (path == "/health") {
      co_return co_await Send(Ready() ? 200 : 503, "text/plain", Ready() ? "ok\n" : "not ready\n", keep);
    }
    if ((path.starts_with("/v1/") || (path == "/metrics" && cfg.guard_metrics)) && !Authorized(req)) {
      unauthorized_total.fetch_add(1, std::memory_order_relaxed);
      co_return co_await Send(401, "application/json",
                              Error("invalid or missing API key", "authentication_error", "invalid_api_key"), keep);
    }
    if (path == "/metrics") {
      int64_t queued = 0, queue_n = 0;
      double queue_s = 0;
      {
        MutexLock lock(&slots_mu);
        queued = static_cast<int64_t>(waiters.size());
        queue_n = queue_count;
        queue_s = queue_seconds_sum;
      }
      const std::string label = "{model_name=\"" + cfg.model + "\"}";
      std::string m =
          "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running" + label + " " +
          std::to_string(std::max<int64_t>(0, outstanding.load() - queued)) +
          "\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting" + label + " " + std::to_string(queued) +
          "\n# TYPE vllm:request_queue_time_seconds histogram\nvllm:request_queue_time_seconds_bucket{model_name=\"" +
          cfg.model + "\",le=\"+Inf\"} " + std::to_string(queue_n) + "\nvllm:request_queue_time_seconds_sum" + label +
          " " + std::to_string(queue_s) + "\nvllm:request_queue_time_seconds_count" + label + " " +
          std::to_string(queue_n) +
          "\n# TYPE drover_test_engine_requests_total counter\ndrover_test_engine_requests_total " +
          std::to_string(requests_total.load()) +
          "\n# TYPE drover_test_engine_cancelled_total counter\ndrover_test_engine_cancelled_total " +
          std::to_string(cancelled_total.load()) +
          "\n# TYPE drover_test_engine_embedding_calls_total counter\ndrover_test_engine_embedding_calls_total " +
          std::to_string(embed_calls_total.load()) +
          "\n# TYPE drover_test_engine_unauthorized_total counter\ndrover_test_engine_unauthorized_total " +
          std::to_string(unauthorized_total.load()) + "\n";
      m += "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total" + label + " " +
           std::to_string(prefix_cache->queried()) +
           "\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total" + label + " " +
           std::to_string(prefix_cache->hits()) + "\n";
      if (cfg.prefix_cache_tokens > 0) {  // without a cache, no usage to speak of
        const double usage = std::min(
            1.0, static_cast<double>(running_prompt_tokens.load()) / static_cast<double>(cfg.prefix_cache_tokens));
        m += "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc" + label + " " + std::to_string(usage) +
             "\n";
      }
      co_return co_await Send(200, "text/plain; version=0.0.4", m, keep);
    }
    if (path == "/v1/models") {
      json models = {
          {"object", "list"},
          {"data", {{{"id", cfg.model}, {"object", "model"}, {"created", 0}, {"owned_by", "drover-test-engine"}}}}};
      std::string body = models.dump();
      co_return co_await Send(200, "application/json", body, keep);
    }
    const bool chat = path == "/v1/chat/completions";
    const bool completion = path == "/v1/completions";
    const bool embed = path == "/v1/embeddings";
    if (!chat && !completion && !embed) {
      co_return co_await Send(404, "application/json",
                              Error("unknown path " + path, "invalid_request_error", "unknown_url"), keep);
    }
    if (!Ready()) {
      co_return co_await Send(503, "application/json", Error("the engine is not ready", "server_error", "not_ready"),
                              keep);
    }
    if (cfg.fail_status != 0) {
      co_return co_await Send(cfg.fail_status, "application/json",
                              Error("failing on purpose (--fail-status)", "server_error", "test_failure"), keep);
    }
    json r = json::parse(req.body(), nullptr, false);
    if (r.is_discarded() || !r.is_object()) {
      co_return co_await Send(400, "application/json",
                              Error("the body is not a JSON object", "invalid_request_error", "invalid_json"), keep);
    }
    std::string model = r.value("model", std::string());
    if (model != cfg.model) {
      co_return co_await Send(404, "application/json",
                              Error("the model '" + model + "' does not exist (this engine serves '" + cfg.model + "')",
                                    "invalid_request_error", "model_not_found"),
                              keep);
    }
    if (embed) co_return co_await Embeddings(r, keep);
    co_await Admit();
    struct Release {
      ~Release() {
        if (cfg.max_running > 0) ReleaseSlot();
      }
    } release;
    std::string prompt = PromptText(r, chat);
    int64_t pt = Words(prompt);
    int64_t n = cfg.default_max_tokens;
    static constexpr std::array<const char*, 2> kMax = {"max_tokens", "max_completion_tokens"};
    for (const char* f : kMax) {
      if (r.contains(f) && r[f].is_number_integer()) n = std::max<int64_t>(0, r[f].get<int64_t>());
    }
    uint64_t h = Fnv(prompt);
    bool stream = r.value("stream", false);
    // Prefill: the tokens not in the prefix cache, on the one prefill lane.
    const int64_t cached = prefix_cache ? prefix_cache->Admit(prompt) : 0;
    running_prompt_tokens.fetch_add(pt);
    struct Running {
      int64_t tokens;
      ~Running() { running_prompt_tokens.fetch_sub(tokens); }
    } running_tokens{pt};
    if (cfg.prefill_us_per_token > 0 && pt > cached) {
      std::chrono::steady_clock::time_point done;
      {
        MutexLock lock(&prefill_mu);
        done = std::max(prefill_free, std::chrono::steady_clock::now()) +
               std::chrono::microseconds(cfg.prefill_us_per_token * (pt - cached));
        prefill_free = done;
      }
      if (!co_await Think(done - std::chrono::steady_clock::now())) {
        cancelled_total.fetch_add(1);
        co_return false;
      }
    }
    generating.fetch_add(1);
    struct Generating {
      ~Generating() { generating.fetch_sub(1); }
    } generating_now;
    json usage = {{"prompt_tokens", pt}, {"completion_tokens", n}, {"total_tokens", pt + n}};
    const char* object = chat ? "chat.completion" : "text_completion";
    if (!stream) {
      if (cfg.answer_delay_ms > 0 && !co_await Think(std::chrono::milliseconds(cfg.answer_delay_ms))) {
        cancelled_total.fetch_add(1);
        co_return false;
      }
      std::string text;
      for (int64_t i = 0; i < n; ++i) text += (i ? " " : "") + Token(h, i);
      json choice = {{"index", 0}, {"finish_reason", "length"}};
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      json out = {{"id", "cmpl-test"},
                  {"object", object},
                  {"created", 0},
                  {"model", cfg.model},
                  {"choices", json::array({choice})},
                  {"usage", usage}};
      co_return co_await Send(200, "application/json", out.dump(), keep);
    }
    bool include_usage = r.contains("stream_options") && r["stream_options"].is_object() &&
                         r["stream_options"].value("include_usage", false);
    if (!co_await Write(Head(200, "text/event-stream", -1, keep))) co_return false;
    const char* chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    net::steady_timer timer(stream_.get_executor());
    for (int64_t i = 0; i <= n; ++i) {
      json choice = {{"index", 0}, {"finish_reason", i == n ? json("length") : json(nullptr)}};
      std::string tok = i < n ? (i ? " " : "") + Token(h, i) : "";
      if (chat)
        choice["delta"] = i == 0 ? json{{"role", "assistant"}, {"content", tok}} : json{{"content", tok}};
      else
        choice["text"] = tok;
      json ev = {{"id", "cmpl-test"},
                 {"object", chunk_object},
                 {"created", 0},
                 {"model", cfg.model},
                 {"choices", json::array({choice})}};
      if (i > 0 && cfg.token_delay_us > 0) {
        const double batch = static_cast<double>(std::max<int64_t>(0, generating.load() - 1));
        timer.expires_after(std::chrono::microseconds(
            static_cast<int64_t>(static_cast<double>(cfg.token_delay_us) * (1 + cfg.decode_slowdown * batch))));
        beast::error_code ec;
        co_await timer.async_wait(Await(ec));
      }
      if (!co_await Chunk("data: " + ev.dump() + "\n\n")) {
        cancelled_total.fetch_add(1);
        co_return false;
      }
      if (i < n && cfg.die_after_tokens >= 0 && tokens_streamed.fetch_add(1) + 1 >= cfg.die_after_tokens) {
        std::fflush(nullptr);
        std::_Exit(3);  // an engine dying mid-stream
      }
    }
    if (include_usage) {
      json ev = {{"id", "cmpl-test"},  {"object", chunk_object},   {"created", 0},
                 {"model", cfg.model}, {"choices", json::array()}, {"usage", usage}};
      if (!co_await Chunk("data: " + ev.dump() + "\n\n")) co_return false;
    }
    if (!co_await Chunk("data: [DONE]\n\n")) co_return false;
    co_return co_await Write("0\r\n\r\n");
  }

  // Takes a slot (--max-running), waiting in the queue for one.
  awaitable<void> Admit() {
    if (cfg.max_running <= 0) co_return;
    const auto t0 = std::chrono::steady_clock::now();
    net::steady_timer wake(stream_.get_executor());
    bool admitted = false;
    {
      MutexLock lock(&slots_mu);
      if (running < cfg.max_running) {
        ++running;
        admitted = true;
      } else {
        waiters.push_back({stream_.get_executor(), &wake, &admitted});
      }
    }
    while (!admitted) {
      wake.expires_after(std::chrono::hours(24));
      beast::error_code ec;
      co_await wake.async_wait(Await(ec));
    }
    MutexLock lock(&slots_mu);
    queue_seconds_sum += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++queue_count;
  }

  // Waits `d` as a request being generated would; false if the client
  // closed its connection meanwhile (looked at every 10 ms).
  awaitable<bool> Think(std::chrono::steady_clock::duration d) {
    net::steady_timer timer(stream_.get_executor());
    const auto end = std::chrono::steady_clock::now() + d;
    for (;;) {
      pollfd p{stream_.socket().native_handle(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) co_return false;
      const auto now = std::chrono::steady_clock::now();
      if (now >= end) co_return true;
      timer.expires_after(std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(10)));
      beast::error_code ec;
      co_await timer.async_wait(Await(ec));
    }
  }

  awaitable<bool> Embeddings(const json& r, bool keep) {
    std::vector<std::string> inputs;
    const json in = r.contains("input") ? r["input"] : json();
    if (in.is_string()) {
      inputs.push_back(in.get<std::string>());
    } else if (in.is_array() && !in.empty()) {
      for (const auto& v : in) inputs.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    } else {
      co_return co_await Send(
          400, "application/json",
          Error("'input' must be a string or a non-empty array", "invalid_request_error", "invalid_input"), keep);
    }
    std::string format = r.contains("encoding_format") && r["encoding_format"].is_string()
                             ? r["encoding_format"].get<std::string>()
                             : "float";
    if (format != "float" && format != "base64") {
      co_return co_await Send(
          400, "application/json",
          Error("'encoding_format' must be float or base64", "invalid_request_error", "invalid_encoding_format"), keep);
    }
    embed_calls_total.fetch_add(1);
    if (cfg.embed_call_us > 0) {  // queue for the accelerator, then run
      std::chrono::steady_clock::time_point done;
      {
        MutexLock lock(&accel_mu);
        done = std::max(accel_free, std::chrono::steady_clock::now()) +
               std::chrono::microseconds(cfg.embed_call_us + cfg.embed_input_us * static_cast<int64_t>(inputs.size()));
        accel_free = done;
      }
      net::steady_timer timer(stream_.get_executor());
      timer.expires_at(done);
      beast::error_code ec;
      co_await timer.async_wait(Await(ec));
    }
    const bool base64 = format == "base64";
    json data = json::array();
    int64_t tokens = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      tokens += Words(inputs[i]);
      uint64_t h = Fnv(inputs[i]);
      std::vector<double> v(static_cast<size_t>(cfg.dim));
      double norm = 0;
      for (auto& x : v) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        x = static_cast<double>(h >> 11) / 9007199254740992.0 - 0.5;
        norm += x * x;
      }
      for (auto& x : v) x /= std::sqrt(norm);
      if (base64) {  // what the openai clients ask for by default: float32, little-endian
        std::vector<float> f(v.begin(), v.end());
        data.push_back(
            {{"object", "embedding"},
             {"index", i},
             {"embedding", Base64(reinterpret_cast<const unsigned char*>(f.data()), f.size() * sizeof(float))}});
      } else {
        data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", v}});
      }
    }
    json out = {{"object", "list"},
                {"data", data},
                {"model", cfg.model},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
    co_return co_await Send(200, "application/json", out.dump(), keep);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
};

awaitable<void> Serve(tcp::socket s) {
  Session session(std::move(s));
  co_await session.Run();
}

awaitable<void> Accept(tcp::acceptor& a) {
  for (;;) {
    beast::error_code ec;
    tcp::socket s = co_await a.async_accept(Await(ec));
    if (ec) continue;
    s.set_option(tcp::no_delay(true), ec);
    net::co_spawn(a.get_executor(), Serve(std::move(s)), net::detached);
  }
}

int Usage(const char* msg) {
  std::cerr << "drover-test-engine: " << msg
            << "\nusage: drover-test-engine [--host H] [--port P] [--model M] [--token-delay-us N] "
               "[--answer-delay-ms N] [--embed-call-us N] [--embed-input-us N] [--max-running N] [--die-after-tokens "
               "N] [--never-ready] [--ready-after-ms N] [--fail-status S] [--threads N] "
               "[--dim N] [--default-max-tokens N] [--api-key K] [--guard-metrics] [--prefill-us-per-token N] "
               "[--prefix-cache-tokens N] [--decode-slowdown F]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* p = std::getenv("DROVER_PORT")) cfg.port = std::atoi(p);
  if (const char* m = std::getenv("DROVER_MODEL"); m && *m) cfg.model = m;
  if (const char* k = std::getenv("DROVER_ENGINE_API_KEY"); k && *k) cfg.api_key = k;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    auto num = [&](int64_t* out) {
      const char* v = value();
      if (!v) return false;
      char* end = nullptr;
      *out = std::strtoll(v, &end, 10);
      return *end == '\0';
    };
    int64_t n = 0;
    if (a == "--host") {
      const char* v = value();
      if (!v) return Usage("--host needs a value");
      cfg.host = v;
    } else if (a == "--model") {
      const char* v = value();
      if (!v) return Usage("--model needs a value");
      cfg.model = v;
    } else if (a == "--port") {
      if (!num(&n) || n < 0 || n > 65535) return Usage("--port needs 0..65535");
      cfg.port = static_cast<int>(n);
    } else if (a == "--token-delay-us") {
      if (!num(&cfg.token_delay_us) || cfg.token_delay_us < 0) return Usage("--token-delay-us needs N >= 0");
    } else if (a == "--answer-delay-ms") {
      if (!num(&cfg.answer_delay_ms) || cfg.answer_delay_ms < 0) return Usage("--answer-delay-ms needs N >= 0");
    } else if (a == "--embed-call-us") {
      if (!num(&cfg.embed_call_us) || cfg.embed_call_us < 0) return Usage("--embed-call-us needs N >= 0");
    } else if (a == "--embed-input-us") {
      if (!num(&cfg.embed_input_us) || cfg.embed_input_us < 0) return Usage("--embed-input-us needs N >= 0");
    } else if (a == "--max-running") {
      if (!num(&cfg.max_running) || cfg.max_running < 0) return Usage("--max-running needs N >= 0");
    } else if (a == "--die-after-tokens") {
      if (!num(&cfg.die_after_tokens) || cfg.die_after_tokens < 0) return Usage("--die-after-tokens needs N >= 0");
    } else if (a == "--api-key") {
      const char* v = value();
      if (!v || !*v) return Usage("--api-key needs a value");
      cfg.api_key = v;
    } else if (a == "--prefill-us-per-token") {
      if (!num(&cfg.prefill_us_per_token) || cfg.prefill_us_per_token < 0)
        return Usage("--prefill-us-per-token needs N >= 0");
    } else if (a == "--prefix-cache-tokens") {
      if (!num(&cfg.prefix_cache_tokens) || cfg.prefix_cache_tokens < 0)
        return Usage("--prefix-cache-tokens needs N >= 0");
    } else if (a == "--decode-slowdown") {
      const char* v = value();
      char* end = nullptr;
      cfg.decode_slowdown = v ? std::strtod(v, &end) : -1;
      if (!v || *end != '\0' || !(cfg.decode_slowdown >= 0) || cfg.decode_slowdown > 100)
        return Usage("--decode-slowdown needs 0..100");
    } else if (a == "--guard-metrics") {
      cfg.guard_metrics = true;
    } else if (a == "--never-ready") {
      cfg.never_ready = true;
    } else if (a == "--ready-after-ms") {
      if (!num(&cfg.ready_after_ms) || cfg.ready_after_ms < 0) return Usage("--ready-after-ms needs N >= 0");
    } else if (a == "--fail-status") {
      if (!num(&n) || n < 400 || n > 599) return Usage("--fail-status needs 400..599");
      cfg.fail_status = static_cast<int>(n);
    } else if (a == "--threads") {
      if (!num(&n) || n < 1 || n > 64) return Usage("--threads needs 1..64");
      cfg.threads = static_cast<int>(n);
    } else if (a == "--dim") {
      if (!num(&n) || n < 1 || n > 65536) return Usage("--dim needs 1..65536");
      cfg.dim = static_cast<int>(n);
    } else if (a == "--default-max-tokens") {
      if (!num(&cfg.default_max_tokens) || cfg.default_max_tokens < 0)
        return Usage("--default-max-tokens needs N >= 0");
    } else {
      return Usage(("unknown flag " + a).c_str());
    }
  }
  // Queried and hits are counted with or without a cache (0: every token computed).
  prefix_cache = std::make_unique<drover::test_engine::PrefixCacheModel>(cfg.prefix_cache_tokens);
  started = std::chrono::steady_clock::now();
  net::io_context ioc(cfg.threads);
  beast::error_code ec;
  auto addr = net::ip::make_address(cfg.host, ec);
  if (ec) return Usage("--host must be an IP address");
  tcp::acceptor acceptor(ioc);
  tcp::endpoint ep(addr, static_cast<uint16_t>(cfg.port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    std::cerr << "drover-test-engine: cannot listen on " << cfg.host << ":" << cfg.port << ": " << ec.message() << "\n";
    return 1;
  }
  std::cout << "listening on " << acceptor.local_endpoint().port() << std::endl;
  net::co_spawn(ioc, Accept(acceptor), net::detached);
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) { ioc.stop(); });
  std::vector<std::thread> threads;
  for (int i = 1; i < cfg.threads; ++i) threads.emplace_back([&] { ioc.run(); });
  ioc.run();
  for (auto& t : threads) t.join();
  return 0;
}
