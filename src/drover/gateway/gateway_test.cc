// The gateway against real drover-test-engine processes on loopback, and
// its pure parts (buckets, usage, SSE, replica choice) directly.

#include "drover/gateway/gateway.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "drover/gateway/limits.h"
#include "drover/gateway/openai.h"
#include "drover/gateway/routing.h"
#include "gateway/engine_process.h"

namespace drover::gateway {
namespace {

using testing::ChildProcess;
using testing::Conn;
using testing::Header;
using testing::Http;
using testing::HttpResponse;
using testing::WaitFor;
using json = nlohmann::json;

std::unique_ptr<ChildProcess> Engine(std::vector<std::string> extra = {}, const std::string& model = "m") {
  std::vector<std::string> argv = {TEST_ENGINE_BINARY, "--port", "0", "--model", model};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<ChildProcess>(argv);
  EXPECT_GT(p->port(), 0) << "the test engine did not start";
  return p;
}

Result<KeyInfo> Keys(std::string_view token) {
  static const std::map<std::string, KeyInfo, std::less<>> keys = {
      {"k-a", {"id-a", "key a", "a", false, 0, 0, 0, 0}},
      {"k-a2", {"id-a2", "key a2", "a", false, 0, 0, 0, 0}},
      {"k-b", {"id-b", "key b", "b", false, 0, 0, 0, 0}},
      {"k-rpm", {"id-rpm", "slow key", "c", false, 2, 0, 0, 0}},
      {"k-tpm", {"id-tpm", "token key", "d", false, 0, 0, 0, 40}},
      {"k-admin", {"id-admin", "admin", "ops", true, 0, 0, 0, 0}},
  };
  auto it = keys.find(token);
  if (it == keys.end()) return Unauthenticated("no such key");
  return it->second;
}

class GatewayTest : public ::testing::Test {
 protected:
  void Start(GatewayOptions o = {}) {
    o.listen = "127.0.0.1:0";
    auto g = StartGateway(o, Keys, &registry_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gw_ = std::move(*g);
  }
  HttpResponse Post(std::string_view path, const json& body, std::string_view key = "k-a",
                    std::string_view extra = {}) {
    std::string h = key.empty() ? "" : "Authorization: Bearer " + std::string(key) + "\r\n";
    return Http(gw_->port(), "POST", path, body.dump(), h + std::string(extra));
  }
  static json Chat(const std::string& model = "m", int max_tokens = 4) {
    return {{"model", model},
            {"max_tokens", max_tokens},
            {"messages", {{{"role", "user"}, {"content", "hello there world"}}}}};
  }
  static void ExpectError(const HttpResponse& r, int status, const std::string& type, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.raw;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["type"], type) << r.body;
    EXPECT_EQ(j["error"]["code"], code) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
  }
  int64_t Outstanding(const std::string& model) {
    for (const auto& l : gw_->TakeLoad()) {
      if (l.model == model) return l.outstanding;
    }
    return -1;
  }
  // The gateway's /metrics, as an admin reads them.
  std::string AdminMetrics() {
    return Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n").body;
  }
  // The test engine saw one request cancelled (its client, the gateway,
  // closed) and runs none now.
  static bool CancelledOnceAndIdle(const ChildProcess& engine) {
    std::string m = Http(engine.port(), "GET", "/metrics").body;
    return m.find("drover_test_engine_cancelled_total 1") != std::string::npos &&
           m.find("vllm:num_requests_running{model_name=\"m\"} 0\n") != std::string::npos;
  }
  int64_t Waiting(const std::string& model) {
    for (const auto& l : gw_->TakeLoad()) {
      if (l.model == model) return l.waiting;
    }
    return -1;
  }

  metrics::Registry registry_;
  std::unique_ptr<Gateway> gw_;
};

// A key the cache does not hold is asked of the authenticator off the io
// thread: while one lookup is stuck (a control plane that does not answer),
// the same io thread serves other keys, and the stuck request ends once the
// answer comes.
TEST(GatewayAuthTest, AStuckKeyLookupDoesNotHoldUpTheIoThread) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> once{false};
  auto keys = [&](std::string_view token) -> Result<KeyInfo> {
    if (token == "k-stuck") {
      if (!once.exchange(true)) entered.set_value();
      released.wait();
      return KeyInfo{"id-stuck", "stuck key", "a", false, 0, 0, 0, 0};
    }
    return Keys(token);
  };
  GatewayOptions o;
  o.listen = "127.0.0.1:0";
  o.io_threads = 1;
  metrics::Registry registry;
  auto g = StartGateway(o, keys, &registry);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int port = (*g)->port();
  auto stuck = std::async(std::launch::async,
                          [port] { return Http(port, "GET", "/v1/models", "", "Authorization: Bearer k-stuck\r\n"); });
  entered.get_future().wait();  // the lookup is under way, and will not return
  auto other = std::async(std::launch::async,
                          [port] { return Http(port, "GET", "/v1/models", "", "Authorization: Bearer k-a\r\n"); });
  // A guard against a hang, not a timing: a blocked io thread never answers.
  const bool answered = other.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  release.set_value();
  ASSERT_TRUE(answered) << "a request with another key waited for the stuck lookup";
  EXPECT_EQ(other.get().status, 200);
  EXPECT_EQ(stuck.get().status, 200);
  // An unknown key is still refused, through the same path.
  EXPECT_EQ(Http(port, "GET", "/v1/models", "", "Authorization: Bearer k-none\r\n").status, 401);
}

TEST_F(GatewayTest, MetricsNeedAnAdminKeyUnlessPublic) {
  Start();
  EXPECT_EQ(Http(gw_->port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-a\r\n").status, 403);
  EXPECT_EQ(Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n").status, 200);
  gw_->Stop();
  GatewayOptions o;
  o.metrics_public = true;
  Start(o);
  EXPECT_EQ(Http(gw_->port(), "GET", "/metrics").status, 200);
}

TEST_F(GatewayTest, ChatCompletionIsProxiedAndMetered) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  HttpResponse r = Post("/v1/chat/completions", Chat());
  ASSERT_EQ(r.status, 200) << r.raw;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  // Same prompt, same answer, and the keep-alive upstream connection is reused.
  HttpResponse r2 = Post("/v1/chat/completions", Chat());
  EXPECT_EQ(json::parse(r2.body)["choices"], j["choices"]);
  json u = json::parse(gw_->UsageJson());
  ASSERT_EQ(u["usage"].size(), 1u) << u.dump();
  EXPECT_EQ(u["usage"][0]["tenant"], "a");
  EXPECT_EQ(u["usage"][0]["key"], "id-a");
  EXPECT_EQ(u["usage"][0]["requests"], 2);
  EXPECT_EQ(u["usage"][0]["prompt_tokens"], 6);
  ASSERT_TRUE(u["usage"][0].contains("latency_p50_ms")) << u.dump();
  EXPECT_GT(u["usage"][0]["latency_p50_ms"].get<double>(), 0.0);
  EXPECT_GE(u["usage"][0]["latency_p99_ms"].get<double>(), u["usage"][0]["latency_p50_ms"].get<double>());
  EXPECT_EQ(u["usage"][0]["completion_tokens"], 8);
  HttpResponse m = Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n");
  EXPECT_NE(m.body.find("drover_gateway_requests_total{key=\"id-a\",model=\"m\",tenant=\"a\"} 2"), std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("drover_gateway_request_duration_seconds_count{model=\"m\",tenant=\"a\"} 2"),
            std::string::npos);
  // The gateway's own time on each: counted, and less than the whole call.
  EXPECT_NE(m.body.find("drover_gateway_overhead_seconds_count 2\n"), std::string::npos) << m.body;
  size_t at = m.body.find("drover_gateway_overhead_seconds_sum ");
  ASSERT_NE(at, std::string::npos);
  const double own = std::stod(m.body.substr(at + 36));
  at = m.body.find("drover_gateway_request_duration_seconds_sum{model=\"m\",tenant=\"a\"} ");
  ASSERT_NE(at, std::string::npos);
  const double whole = std::stod(m.body.substr(m.body.find("} ", at) + 2));
  EXPECT_GT(own, 0.0);
  EXPECT_LT(own, whole);
  EXPECT_EQ(Http(gw_->port(), "GET", "/healthz").status, 200);
}

TEST_F(GatewayTest, CompletionsAndEmbeddings) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  HttpResponse c = Post("/v1/completions", {{"model", "m"}, {"prompt", "one two"}, {"max_tokens", 2}});
  ASSERT_EQ(c.status, 200) << c.raw;
  EXPECT_EQ(json::parse(c.body)["usage"]["prompt_tokens"], 2);
  HttpResponse em = Post("/v1/embeddings", {{"model", "m"}, {"input", {"a b", "c"}}});
  ASSERT_EQ(em.status, 200) << em.raw;
  json j = json::parse(em.body);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
}

TEST_F(GatewayTest, BadInputGetsOpenAiShapedErrors) {
  auto e = Engine();
  GatewayOptions o;
  o.max_body_bytes = 4096;
  Start(o);
  gw_->SetRoutes(
      {{"m", "dep-m", "", false, {{"j-1", e->address()}}}, {"private", "dep-p", "b", false, {{"j-2", e->address()}}}});
  ExpectError(Post("/v1/chat/completions", Chat(), ""), 401, "authentication_error", "invalid_api_key");
  ExpectError(Post("/v1/chat/completions", Chat(), "nope"), 401, "authentication_error", "invalid_api_key");
  ExpectError(Http(gw_->port(), "POST", "/v1/chat/completions", "{not json", "Authorization: Bearer k-a\r\n"), 400,
              "invalid_request_error", "invalid_request");
  ExpectError(Http(gw_->port(), "POST", "/v1/chat/completions", "[1,2]", "Authorization: Bearer k-a\r\n"), 400,
              "invalid_request_error", "invalid_request");
  // Nested past the depth limit, where a streamed request's body would be
  // parsed into a tree (and the engine would parse it again): refused first.
  std::string deep = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x":)" +
                     std::string(100, '[') + std::string(100, ']') + "}";
  HttpResponse nested = Http(gw_->port(), "POST", "/v1/chat/completions", deep, "Authorization: Bearer k-a\r\n");
  ExpectError(nested, 400, "invalid_request_error", "invalid_request");
  EXPECT_NE(nested.body.find("deeper than 64 levels"), std::string::npos) << nested.body;
  HttpResponse no_model = Post("/v1/chat/completions", {{"messages", json::array()}});
  ExpectError(no_model, 400, "invalid_request_error", "invalid_request");
  EXPECT_EQ(json::parse(no_model.body)["error"]["param"], "model");
  ExpectError(Post("/v1/chat/completions", {{"model", "m"}, {"stream", "yes"}}), 400, "invalid_request_error",
              "invalid_request");
  ExpectError(Post("/v1/chat/completions", Chat("unknown")), 404, "invalid_request_error", "model_not_found");
  // Another tenant's model does not exist for this key; its tenant and admins see it.
  ExpectError(Post("/v1/chat/completions", Chat("private")), 404, "invalid_request_error", "model_not_found");
  EXPECT_EQ(Post("/v1/chat/completions", Chat("private"), "k-b").status, 404);  // the engine serves "m" only
  EXPECT_NE(Post("/v1/chat/completions", Chat("private"), "k-admin").body.find("does not exist (this engine"),
            std::string::npos);
  json big = Chat();
  big["messages"][0]["content"] = std::string(8000, 'x');
  ExpectError(Post("/v1/chat/completions", big), 413, "invalid_request_error", "request_too_large");
  ExpectError(Http(gw_->port(), "GET", "/v1/nothing"), 404, "invalid_request_error", "unknown_url");
  ExpectError(Http(gw_->port(), "GET", "/v1/chat/completions", "", "Authorization: Bearer k-a\r\n"), 405,
              "invalid_request_error", "method_not_allowed");
  // Garbage instead of HTTP.
  Conn c(gw_->port());
  ASSERT_TRUE(c.Send("THIS IS NOT HTTP\r\n\r\n"));
  std::string raw;
  c.ReadUntil(
      &raw, [](const std::string&) { return false; }, std::chrono::seconds(10));
  EXPECT_EQ(raw.substr(0, 12), "HTTP/1.1 400") << raw;
}

TEST_F(GatewayTest, ModelsListsWhatTheKeysTenantMayUse) {
  Start();
  gw_->SetRoutes({{"pub", "d1", "", false, {}}, {"mine", "d2", "a", false, {}}, {"theirs", "d3", "b", false, {}}});
  HttpResponse r = Http(gw_->port(), "GET", "/v1/models", "", "Authorization: Bearer k-a\r\n");
  ASSERT_EQ(r.status, 200) << r.raw;
  json j = json::parse(r.body);
  std::vector<std::string> ids;
  for (const auto& m : j["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"mine", "pub"}));
  EXPECT_EQ(
      json::parse(Http(gw_->port(), "GET", "/v1/models", "", "Authorization: Bearer k-admin\r\n").body)["data"].size(),
      3u);
  ExpectError(Http(gw_->port(), "GET", "/v1/models"), 401, "authentication_error", "invalid_api_key");
}

// Served model names are per tenant (issue 37): tenants a and b each serve
// `llama` on an engine of their own. Each key reaches its own tenant's
// replicas and lists its own model; a tenant with none gets the 404 of a
// name nobody serves; load and metrics are per (tenant, model); and two
// tenants' embeddings are never merged into one upstream call.
TEST_F(GatewayTest, TwoTenantsModelsOfOneNameRouteToTheirOwnReplicas) {
  auto ea = Engine({}, "llama");
  auto eb = Engine({}, "llama");
  GatewayOptions o;
  o.embeddings_batch_window_us = 200'000;  // both requests below arrive within it
  o.embeddings_batch_max_inputs = 8;
  Start(o);
  gw_->SetRoutes({{"llama", "llama", "a", false, {{"j-1", ea->address()}}},
                  {"llama", "llama", "b", false, {{"j-2", eb->address()}}}});
  auto served = [](ChildProcess& p) {
    std::string m = Http(p.port(), "GET", "/metrics").body;
    size_t at = m.find("\ndrover_test_engine_requests_total ");
    return at == std::string::npos ? -1 : std::atoll(m.c_str() + at + 35);
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Post("/v1/chat/completions", Chat("llama"), "k-a").status, 200);
  ASSERT_EQ(Post("/v1/chat/completions", Chat("llama"), "k-b").status, 200);
  EXPECT_EQ(served(*ea), 3);
  EXPECT_EQ(served(*eb), 1);
  for (const auto& [key, tenant] : {std::pair{"k-a", "a"}, std::pair{"k-b", "b"}}) {
    HttpResponse r = Http(gw_->port(), "GET", "/v1/models", "", std::string("Authorization: Bearer ") + key + "\r\n");
    ASSERT_EQ(r.status, 200) << r.raw;
    json j = json::parse(r.body);
    ASSERT_EQ(j["data"].size(), 1u) << r.body;
    EXPECT_EQ(j["data"][0]["id"], "llama");
    EXPECT_EQ(j["data"][0]["owned_by"], tenant);
  }
  // Tenant c serves no `llama`: the answer of a model nobody serves.
  HttpResponse none = Post("/v1/chat/completions", Chat("llama"), "k-rpm");
  ExpectError(none, 404, "invalid_request_error", "model_not_found");
  EXPECT_EQ(json::parse(none.body)["error"]["message"],
            "the model 'llama' does not exist or you do not have access to it");
  EXPECT_EQ(
      json::parse(Http(gw_->port(), "GET", "/v1/models", "", "Authorization: Bearer k-rpm\r\n").body)["data"].size(),
      0u);
  // Two tenants serve the name: an admin key of neither reaches neither.
  EXPECT_EQ(Post("/v1/chat/completions", Chat("llama"), "k-admin").status, 404);
  // Load is reported per route, with its tenant.
  auto load = gw_->TakeLoad();
  ASSERT_EQ(load.size(), 2u);
  EXPECT_EQ(load[0].tenant, "a");
  EXPECT_EQ(load[0].requests, 3);
  EXPECT_EQ(load[1].tenant, "b");
  EXPECT_EQ(load[1].requests, 1);
  // Embeddings of a and b at once: one upstream call each, on each's engine.
  HttpResponse ra, rb;
  std::thread ta([&] { ra = Post("/v1/embeddings", {{"model", "llama"}, {"input", "one"}}, "k-a"); });
  std::thread tb([&] { rb = Post("/v1/embeddings", {{"model", "llama"}, {"input", "two"}}, "k-b"); });
  ta.join();
  tb.join();
  ASSERT_EQ(ra.status, 200) << ra.raw;
  ASSERT_EQ(rb.status, 200) << rb.raw;
  EXPECT_EQ(json::parse(ra.body)["data"].size(), 1u);
  EXPECT_EQ(json::parse(rb.body)["data"].size(), 1u);
  EXPECT_EQ(served(*ea), 4);
  EXPECT_EQ(served(*eb), 2);
  std::string m = AdminMetrics();
  EXPECT_NE(m.find("drover_gateway_embeddings_batches_total 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("drover_gateway_ready_replicas{model=\"llama\",tenant=\"a\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("drover_gateway_ready_replicas{model=\"llama\",tenant=\"b\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("drover_gateway_requests_total{key=\"id-b\",model=\"llama\",tenant=\"b\"} 2\n"), std::string::npos)
      << m;
}

TEST_F(GatewayTest, KeyOverItsRequestLimitGets429WithRetryAfter) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), "k-rpm").status, 200);
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), "k-rpm").status, 200);
  HttpResponse r = Post("/v1/chat/completions", Chat(), "k-rpm");
  ExpectError(r, 429, "rate_limit_error", "rate_limit_exceeded");
  int retry = std::atoi(Header(r, "retry-after").c_str());
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 30);
  // Another key is not affected.
  EXPECT_EQ(Post("/v1/chat/completions", Chat(), "k-a").status, 200);
}

TEST_F(GatewayTest, TenantOverItsTokenLimitGets429) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  // 3 prompt + 50 completion tokens: over the tenant's 40 a minute after the fact.
  EXPECT_EQ(Post("/v1/chat/completions", Chat("m", 50), "k-tpm").status, 200);
  HttpResponse r = Post("/v1/chat/completions", Chat("m", 1), "k-tpm");
  ExpectError(r, 429, "rate_limit_error", "rate_limit_exceeded");
  EXPECT_NE(r.body.find("tokens per minute"), std::string::npos);
  EXPECT_GE(std::atoi(Header(r, "retry-after").c_str()), 1);
}

TEST_F(GatewayTest, StreamPassesThroughAndUsageIsCounted) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  json req = Chat("m", 5);
  req["stream"] = true;
  HttpResponse r = Post("/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_NE(Header(r, "content-type").find("text/event-stream"), std::string::npos);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  // The usage chunk the gateway asked for on the client's behalf is not passed on.
  EXPECT_EQ(r.body.find("\"usage\""), std::string::npos) << r.body;
  // Asked for by the client: passed on.
  req["stream_options"] = {{"include_usage", true}};
  HttpResponse r2 = Post("/v1/chat/completions", req);
  EXPECT_NE(r2.body.find("\"usage\""), std::string::npos) << r2.body;
  json u = json::parse(gw_->UsageJson());
  EXPECT_EQ(u["usage"][0]["completion_tokens"], 10);
  EXPECT_EQ(u["usage"][0]["prompt_tokens"], 6);
}

TEST_F(GatewayTest, RetriesOnAnotherReplicaBeforeTheFirstByte) {
  auto good = Engine();
  auto failing = Engine({"--fail-status", "503"});
  GatewayOptions o;
  o.retries = 2;
  Start(o);
  std::string dead = "127.0.0.1:" + std::to_string(testing::FreePort());
  gw_->SetRoutes(
      {{"m", "dep-m", "", false, {{"j-dead", dead}, {"j-503", failing->address()}, {"j-ok", good->address()}}}});
  for (int i = 0; i < 20; ++i) {
    HttpResponse r = Post("/v1/chat/completions", Chat());
    ASSERT_EQ(r.status, 200) << r.raw;
  }
  // Only broken replicas: a 502 that says why.
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-dead", dead}, {"j-503", failing->address()}}}});
  HttpResponse r = Post("/v1/chat/completions", Chat());
  ExpectError(r, 502, "server_error", "upstream_error");
  EXPECT_NE(r.body.find("no replica of model 'm' answered"), std::string::npos) << r.body;
  EXPECT_EQ(Outstanding("m"), 0);
}

TEST_F(GatewayTest, ClientCancelFreesTheSlotAndCancelsUpstream) {
  auto e = Engine({"--token-delay-us", "20000"});
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  json req = Chat("m", 100000);
  req["stream"] = true;
  {
    Conn c(gw_->port());
    ASSERT_TRUE(c.Send(testing::Request("POST", "/v1/chat/completions", req.dump(), "Authorization: Bearer k-a\r\n")));
    std::string raw;
    ASSERT_TRUE(c.ReadUntil(&raw, [](const std::string& b) { return b.find("data: ") != std::string::npos; }));
    EXPECT_EQ(Outstanding("m"), 1);
  }  // the client goes away mid-stream
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));
  // The engine saw its request cancelled (its write failed) and is idle.
  EXPECT_TRUE(WaitFor([&] { return CancelledOnceAndIdle(*e); }));
  EXPECT_NE(AdminMetrics().find("drover_gateway_client_cancels_total 1"), std::string::npos);
}

// A client that leaves while a non-streamed answer is being made (the
// engine takes a minute): the upstream request is cancelled (the engine
// sees its client close) and the replica's slot is free at once.
TEST_F(GatewayTest, ClientLeavingBeforeAWholeAnswerCancelsUpstream) {
  auto e = Engine({"--answer-delay-ms", "60000"});
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  {
    Conn c(gw_->port());
    ASSERT_TRUE(
        c.Send(testing::Request("POST", "/v1/chat/completions", Chat().dump(), "Authorization: Bearer k-a\r\n")));
    ASSERT_TRUE(WaitFor([&] { return Outstanding("m") == 1; }));
  }  // the client goes away before the answer
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));
  EXPECT_TRUE(WaitFor([&] { return CancelledOnceAndIdle(*e); }));
  EXPECT_NE(AdminMetrics().find("drover_gateway_client_cancels_total 1"), std::string::npos);
  // Not counted as an error of the tenant's, and the gateway still serves.
  json u = json::parse(gw_->UsageJson());
  EXPECT_EQ(u["usage"][0]["errors"], 0) << u.dump();
  auto fast = Engine();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-2", fast->address()}}}});
  EXPECT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
}

// A client that leaves while its request waits for a cold start is no
// longer counted waiting (the autoscaler reads that count).
TEST_F(GatewayTest, ClientLeavingDuringAColdStartStopsWaiting) {
  GatewayOptions o;
  o.cold_start_wait_ms = 600'000;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", true, {}}});
  {
    Conn c(gw_->port());
    ASSERT_TRUE(
        c.Send(testing::Request("POST", "/v1/chat/completions", Chat().dump(), "Authorization: Bearer k-a\r\n")));
    ASSERT_TRUE(WaitFor([&] { return Waiting("m") == 1; }));
  }
  EXPECT_TRUE(WaitFor([&] { return Waiting("m") == 0; }));
  EXPECT_NE(AdminMetrics().find("drover_gateway_client_cancels_total 1"), std::string::npos);
}

TEST_F(GatewayTest, EngineDyingMidStreamGivesAnErrorEvent) {
  auto e = Engine({"--die-after-tokens", "3"});
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  json req = Chat("m", 10);
  req["stream"] = true;
  HttpResponse r = Post("/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.raw;  // a whole chunked response: the stream ended cleanly
  EXPECT_NE(r.body.find("\"delta\""), std::string::npos) << r.body;
  size_t at = r.body.find("data: {\"error\":");
  ASSERT_NE(at, std::string::npos) << r.body;
  json err = json::parse(r.body.substr(at + 6, r.body.find("\n\n", at) - at - 6));
  EXPECT_EQ(err["error"]["code"], "upstream_error");
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));  // freed after the last write
  json u = json::parse(gw_->UsageJson());
  EXPECT_EQ(u["usage"][0]["errors"], 1);
}

TEST_F(GatewayTest, ScaleFromZeroWaitsForAReplica) {
  auto e = Engine();
  GatewayOptions o;
  o.cold_start_wait_ms = 60'000;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", true, {}}, {"n", "dep-n", "", false, {}}});
  // Not scaling from zero: 503 at once.
  ExpectError(Post("/v1/chat/completions", Chat("n")), 503, "server_error", "model_unavailable");
  std::atomic<int> status{0};
  std::thread client([&] { status = Post("/v1/chat/completions", Chat("m")).status; });
  ASSERT_TRUE(WaitFor([&] { return Waiting("m") == 1; }));
  gw_->SetRoutes({{"m", "dep-m", "", true, {{"j-1", e->address()}}}});
  client.join();
  EXPECT_EQ(status.load(), 200);
}

TEST_F(GatewayTest, AStaleReplicaOfAModelThatScalesFromZeroWaitsForAFreshOne) {
  // The routes still list a replica that just stopped (scaled to zero): its
  // port refuses. The request waits for the next replica instead of a 502.
  auto e = Engine();
  GatewayOptions o;
  o.cold_start_wait_ms = 60'000;
  Start(o);
  std::string gone;
  {
    auto stopped = Engine();
    gone = stopped->address();
  }  // its process ended: the port refuses connections
  gw_->SetRoutes({{"m", "dep-m", "", true, {{"j-old", gone}}}});
  std::atomic<int> status{0};
  std::thread client([&] { status = Post("/v1/chat/completions", Chat("m")).status; });
  ASSERT_TRUE(WaitFor([&] { return Waiting("m") == 1; }));
  gw_->SetRoutes({{"m", "dep-m", "", true, {{"j-new", e->address()}}}});
  client.join();
  EXPECT_EQ(status.load(), 200);
  // Not scaling from zero: the same stale route is a 502 at once.
  gw_->SetRoutes({{"n", "dep-n", "", false, {{"j-old", gone}}}});
  ExpectError(Post("/v1/chat/completions", Chat("n")), 502, "server_error", "upstream_error");
}

TEST_F(GatewayTest, ColdStartTimesOutWith503) {
  GatewayOptions o;
  o.cold_start_wait_ms = 1;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", true, {}}});
  HttpResponse r = Post("/v1/chat/completions", Chat("m"));
  ExpectError(r, 503, "server_error", "model_unavailable");
  EXPECT_NE(r.body.find("none started within 1 ms"), std::string::npos) << r.body;
}

TEST_F(GatewayTest, LoadIsSpreadAndReported) {
  auto a = Engine();
  auto b = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-a", a->address()}, {"j-b", b->address()}}}});
  for (int i = 0; i < 40; ++i) ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  auto load = gw_->TakeLoad();
  ASSERT_EQ(load.size(), 1u);
  EXPECT_EQ(load[0].requests, 40);
  EXPECT_EQ(load[0].deployment, "dep-m");
  EXPECT_EQ(load[0].outstanding_by_replica.size(), 2u);
  EXPECT_EQ(gw_->TakeLoad()[0].requests, 0);  // reset by the take
  auto served = [](ChildProcess& p) {
    std::string m = Http(p.port(), "GET", "/metrics").body;
    size_t at = m.find("\ndrover_test_engine_requests_total ");
    return at == std::string::npos ? -1 : std::atoll(m.c_str() + at + 35);
  };
  EXPECT_GT(served(*a), 0);
  EXPECT_GT(served(*b), 0);
}

TEST_F(GatewayTest, AffinitySendsAUsersRequestsToOneReplica) {
  std::vector<std::unique_ptr<ChildProcess>> engines;
  for (int i = 0; i < 3; ++i) engines.push_back(Engine());
  GatewayOptions o;
  o.affinity = true;
  Start(o);
  gw_->SetRoutes({{"m",
                   "dep-m",
                   "",
                   false,
                   {{"j-0", engines[0]->address()}, {"j-1", engines[1]->address()}, {"j-2", engines[2]->address()}}}});
  auto served = [&] {
    std::vector<int64_t> n;
    for (auto& e : engines) {
      std::string m = Http(e->port(), "GET", "/metrics").body;
      size_t at = m.find("\ndrover_test_engine_requests_total ");
      n.push_back(std::atoll(m.c_str() + at + 35));
    }
    return n;
  };
  auto before = served();
  json req = Chat();
  req["user"] = "alice";
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Post("/v1/chat/completions", req).status, 200);
  auto after = served();
  int replicas_used = 0;
  for (size_t i = 0; i < engines.size(); ++i) {
    int64_t got = after[i] - before[i];
    if (got > 0) {
      ++replicas_used;
      EXPECT_EQ(got, 12);
    }
  }
  EXPECT_EQ(replicas_used, 1);
  // The session header does the same for requests without a user.
  before = served();
  for (int i = 0; i < 12; ++i)
    ASSERT_EQ(Post("/v1/chat/completions", Chat(), "k-a", "x-session-id: s-42\r\n").status, 200);
  after = served();
  replicas_used = 0;
  for (size_t i = 0; i < engines.size(); ++i) replicas_used += after[i] - before[i] - 1 > 0 ? 1 : 0;
  EXPECT_EQ(replicas_used, 1);
}

TEST_F(GatewayTest, WebSocketStreamsEachEventAsAMessage) {
  auto e = Engine();
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  Conn c(gw_->port());
  ASSERT_TRUE(
      c.Send("GET /v1/chat/completions/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
             "Authorization: Bearer k-a\r\n\r\n"));
  std::string raw;
  ASSERT_TRUE(c.ReadUntil(&raw, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }));
  ASSERT_EQ(raw.substr(0, 12), "HTTP/1.1 101") << raw;
  raw.erase(0, raw.find("\r\n\r\n") + 4);
  // A masked text frame with the request.
  std::string payload = Chat("m", 3).dump();
  std::string frame = {static_cast<char>(0x81)};
  ASSERT_LT(payload.size(), 65536u);
  if (payload.size() < 126) {
    frame += static_cast<char>(0x80 | payload.size());
  } else {
    frame += static_cast<char>(0x80 | 126);
    frame += static_cast<char>(payload.size() >> 8);
    frame += static_cast<char>(payload.size() & 0xff);
  }
  const char mask[4] = {1, 2, 3, 4};
  frame.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) frame += static_cast<char>(payload[i] ^ mask[i % 4]);
  ASSERT_TRUE(c.Send(frame));
  // Unmasked server frames: read until the "[DONE]" message.
  std::vector<std::string> messages;
  auto parse = [&](const std::string& b) {
    messages.clear();
    size_t p = 0;
    while (p + 2 <= b.size()) {
      size_t len = static_cast<unsigned char>(b[p + 1]) & 0x7f;
      size_t hdr = 2;
      if (len == 126) {
        if (p + 4 > b.size()) return false;
        len = (static_cast<unsigned char>(b[p + 2]) << 8) | static_cast<unsigned char>(b[p + 3]);
        hdr = 4;
      }
      if (p + hdr + len > b.size()) return false;
      messages.push_back(b.substr(p + hdr, len));
      p += hdr + len;
    }
    return !messages.empty() && messages.back() == "[DONE]";
  };
  ASSERT_TRUE(c.ReadUntil(&raw, parse)) << raw;
  ASSERT_GE(messages.size(), 5u);  // role + 3 tokens + finish, then [DONE]
  EXPECT_EQ(json::parse(messages[0])["object"], "chat.completion.chunk");
  for (const auto& m : messages) EXPECT_EQ(m.find("\"usage\""), std::string::npos);
}

// A WebSocket client that leaves while its stream waits on the engine (an
// hour to the next token): by closing the connection, or by a close frame
// with the connection left open. Either frees the replica at once.
TEST_F(GatewayTest, WebSocketClientLeavingMidStreamFreesTheReplica) {
  auto e = Engine({"--token-delay-us", "3600000000"});
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  auto open_stream = [&](Conn& c) {
    ASSERT_TRUE(
        c.Send("GET /v1/chat/completions/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               "Authorization: Bearer k-a\r\n\r\n"));
    std::string raw;
    ASSERT_TRUE(c.ReadUntil(&raw, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }));
    ASSERT_EQ(raw.substr(0, 12), "HTTP/1.1 101") << raw;
    std::string payload = Chat("m", 3).dump();
    ASSERT_LT(payload.size(), 126u);
    std::string frame = {static_cast<char>(0x81), static_cast<char>(0x80 | payload.size()), 0, 0, 0, 0};
    frame += payload;  // mask 0: the payload as is
    ASSERT_TRUE(c.Send(frame));
    ASSERT_TRUE(
        c.ReadUntil(&raw, [](const std::string& b) { return b.find("chat.completion.chunk") != std::string::npos; }));
    ASSERT_EQ(Outstanding("m"), 1);
  };
  {
    Conn c(gw_->port());
    open_stream(c);
  }  // closed
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));
  Conn c(gw_->port());
  open_stream(c);
  const char close_frame[] = {static_cast<char>(0x88), static_cast<char>(0x82), 0, 0, 0, 0, 0x03,
                              static_cast<char>(0xe8)};
  ASSERT_TRUE(c.Send(std::string_view(close_frame, sizeof close_frame)));  // 1000, normal closure
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));
}

TEST_F(GatewayTest, EmbeddingsAreBatchedAndSplitBack) {
  auto e = Engine();
  GatewayOptions o;
  o.io_threads = 2;                           // the requests' connections land on both: one batch all the same
  o.embeddings_batch_window_us = 60'000'000;  // sent when full, not by time
  o.embeddings_batch_max_inputs = 8;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  const std::vector<json> inputs = {
      "one", json::array({"two words", "three more words"}), "four", "five", "six", "seven", "eight"};
  std::vector<HttpResponse> got(inputs.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < inputs.size(); ++i) {
    clients.emplace_back([&, i] { got[i] = Post("/v1/embeddings", {{"model", "m"}, {"input", inputs[i]}}); });
  }
  for (auto& t : clients) t.join();
  int64_t tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << got[i].raw;
    json alone =
        json::parse(Http(e->port(), "POST", "/v1/embeddings", json{{"model", "m"}, {"input", inputs[i]}}.dump()).body);
    json batched = json::parse(got[i].body);
    EXPECT_EQ(batched["data"], alone["data"]) << "request " << i;
    tokens += batched["usage"]["prompt_tokens"].get<int64_t>();
  }
  EXPECT_EQ(tokens, 11);  // the merged call's usage, apportioned
  std::string m = AdminMetrics();
  EXPECT_NE(m.find("drover_gateway_embeddings_batches_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("drover_gateway_embeddings_batched_requests_total 7\n"), std::string::npos);
  // Not mergeable (another field): goes alone, at once.
  EXPECT_EQ(Post("/v1/embeddings", {{"model", "m"}, {"input", "x"}, {"dimensions", 4}}).status, 200);
}

TEST_F(GatewayTest, EngineMetricsAreScraped) {
  auto e = Engine({"--token-delay-us", "20000"});
  GatewayOptions o;
  o.scrape_engine_metrics = true;
  o.scrape_interval_ms = 5;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  // A long stream straight to the engine: running 1 (the scrape itself does not count).
  Conn c(e->port());
  json req = Chat("m", 100000);
  req["stream"] = true;
  ASSERT_TRUE(c.Send(testing::Request("POST", "/v1/chat/completions", req.dump())));
  EXPECT_TRUE(WaitFor([&] {
    return AdminMetrics().find("drover_gateway_replica_engine_load{model=\"m\",replica=\"j-1\"} 1") !=
           std::string::npos;
  }));
  c.Close();
  EXPECT_TRUE(WaitFor([&] {
    return AdminMetrics().find("drover_gateway_replica_engine_load{model=\"m\",replica=\"j-1\"} 0") !=
           std::string::npos;
  }));
}

// An upstream that records each request's head and answers one fixed
// chat completion: what the gateway sends a replica, exactly.
class RecordingUpstream {
 public:
  RecordingUpstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RecordingUpstream() {
    ::shutdown(fd_, SHUT_RDWR);  // ends the accept
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> heads() const {
    std::lock_guard lock(mu_);
    return heads_;
  }

 private:
  void Serve() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string buf;
      char tmp[4096];
      size_t end = std::string::npos;
      while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
        ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) break;
        buf.append(tmp, static_cast<size_t>(n));
      }
      if (end == std::string::npos) {
        ::close(c);
        continue;
      }
      const std::string head = buf.substr(0, end + 2);
      {
        std::lock_guard lock(mu_);
        heads_.push_back(head);
      }
      const std::string answer =
          R"({"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",)"
          R"("content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})";
      const std::string reply =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: " +
          std::to_string(answer.size()) + "\r\n\r\n" + answer;
      (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::string> heads_;
};

// How often `needle` occurs in `hay`, case-insensitively.
size_t CountNoCase(std::string hay, std::string needle) {
  for (std::string* s : {&hay, &needle}) {
    for (char& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

constexpr std::string_view kReplicaSecret = "replica-secret-0123456789abcdefghijklmnopq";

// Issue 37: the replica's secret goes upstream, on every request, as the
// one Authorization header; the client's own token never does.
TEST_F(GatewayTest, TheReplicasSecretGoesUpstreamAndTheClientsTokenDoesNot) {
  RecordingUpstream up;
  Start();
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", up.address(), std::string(kReplicaSecret)}}}});
  HttpResponse r = Post("/v1/chat/completions", Chat(), "k-a");
  ASSERT_EQ(r.status, 200) << r.raw;
  json stream = Chat();
  stream["stream"] = true;  // the engine answers whole anyway: the head is what counts
  Post("/v1/chat/completions", stream, "k-a2");
  ASSERT_EQ(up.heads().size(), 2u);
  for (const std::string& head : up.heads()) {
    EXPECT_EQ(CountNoCase(head, "authorization:"), 1u) << head;
    EXPECT_NE(head.find("Authorization: Bearer " + std::string(kReplicaSecret) + "\r\n"), std::string::npos) << head;
    EXPECT_EQ(head.find("k-a"), std::string::npos) << "the client's token went upstream:\n" << head;
  }
  // A replica without a secret (an older server's): no Authorization at all.
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", up.address()}}}});
  ASSERT_EQ(Post("/v1/chat/completions", Chat(), "k-a").status, 200);
  ASSERT_EQ(up.heads().size(), 3u);
  EXPECT_EQ(CountNoCase(up.heads().back(), "authorization"), 0u) << up.heads().back();
}

// The engine (drover-test-engine with a key, as the agent starts it) answers
// the gateway, which sends the replica's secret, and refuses anyone else; a
// route that lacks the secret gets the engine's 401 as a 502, the
// replica's fault and not the client's, and the next replica is tried.
TEST_F(GatewayTest, AnEngineWithAKeyAnswersOnlyTheGateway) {
  const std::string secret(kReplicaSecret);
  auto keyed = Engine({"--api-key", secret});
  auto open = Engine();
  Start();
  const std::string bearer = "Authorization: Bearer " + secret + "\r\n";
  EXPECT_EQ(Http(keyed->port(), "POST", "/v1/chat/completions", Chat().dump()).status, 401);
  EXPECT_EQ(Http(keyed->port(), "POST", "/v1/chat/completions", Chat().dump(), "Authorization: Bearer k-a\r\n").status,
            401);
  EXPECT_EQ(Http(keyed->port(), "POST", "/v1/chat/completions", Chat().dump(), bearer).status, 200);
  EXPECT_EQ(Http(keyed->port(), "GET", "/health").status, 200) << "probes need no key";
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", keyed->address(), secret}}}});
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  // The secret missing from the route: the engine refuses the gateway.
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", keyed->address()}}}});
  HttpResponse refused = Post("/v1/chat/completions", Chat());
  ExpectError(refused, 502, "server_error", "upstream_error");
  EXPECT_NE(refused.body.find("refused the gateway (401)"), std::string::npos) << refused.body;
  EXPECT_EQ(Header(refused, "www-authenticate"), "") << "not the client's key at fault";
  EXPECT_NE(AdminMetrics().find("drover_gateway_engine_refusals_total 1\n"), std::string::npos);
  // With another replica that answers, the client never sees the refusal.
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", keyed->address()}, {"j-2", open->address()}}}});
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Post("/v1/chat/completions", Chat()).status, 200);
  EXPECT_TRUE(WaitFor([&] { return Outstanding("m") == 0; }));
}

// The scrape of an engine whose /metrics asks for the key (llama.cpp's
// server does) sends the replica's secret too.
TEST_F(GatewayTest, TheScrapeSendsTheReplicasSecret) {
  const std::string secret(kReplicaSecret);
  auto e = Engine({"--api-key", secret, "--guard-metrics"});
  GatewayOptions o;
  o.scrape_engine_metrics = true;
  o.scrape_interval_ms = 5;
  Start(o);
  auto refused = [&] {
    std::string m = Http(e->port(), "GET", "/metrics", {}, "Authorization: Bearer " + secret + "\r\n").body;
    size_t at = m.find("\ndrover_test_engine_unauthorized_total ");
    return at == std::string::npos ? -1 : std::stoll(m.substr(at + 39));
  };
  ASSERT_EQ(refused(), 0);
  // Without the secret the scrape is refused: the engine's queue is not known.
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  EXPECT_TRUE(WaitFor([&] { return refused() >= 2; }));
  EXPECT_EQ(gw_->TakeLoad().at(0).engine_waiting, -1);
  // With it the scrape reads the queue (0 waiting).
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address(), secret}}}});
  // (A replica whose secret changed starts unknown: only a scrape the
  // engine answered makes it 0.)
  EXPECT_TRUE(WaitFor([&] { return gw_->TakeLoad().at(0).engine_waiting == 0; }));
}

// --- the pure parts ---

// The engines' own queue, for the autoscaler: an engine that runs one
// request at a time (--max-running 1) gets three; TakeLoad reports the
// two waiting in its queue, and the time they waited there once they run.
TEST_F(GatewayTest, EngineQueueIsReportedForTheAutoscaler) {
  auto e = Engine({"--token-delay-us", "20000", "--max-running", "1"});
  GatewayOptions o;
  o.scrape_engine_metrics = true;
  o.scrape_interval_ms = 5;
  Start(o);
  gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", e->address()}}}});
  ModelLoad first = gw_->TakeLoad().at(0);
  EXPECT_EQ(first.queue_ms, -1);  // nothing left the queue yet
  std::vector<std::unique_ptr<Conn>> clients;
  json req = Chat("m", 10);  // about 200 ms each
  req["stream"] = true;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Conn>(gw_->port()));
    ASSERT_TRUE(clients.back()->Send(
        testing::Request("POST", "/v1/chat/completions", req.dump(), "Authorization: Bearer k-a\r\n")));
  }
  int64_t most_waiting = -1;
  double longest_ms = -1;
  EXPECT_TRUE(WaitFor([&] {
    ModelLoad l = gw_->TakeLoad().at(0);
    most_waiting = std::max(most_waiting, l.engine_waiting);
    longest_ms = std::max(longest_ms, l.queue_ms);
    return most_waiting == 2 && longest_ms >= 100;  // the second waited for the first's ~200 ms
  })) << "engine waiting "
      << most_waiting << ", queue " << longest_ms << " ms";
  for (auto& c : clients) {
    std::string raw;
    EXPECT_TRUE(c->ReadUntil(&raw, [](const std::string& b) { return b.find("[DONE]") != std::string::npos; }));
  }
  EXPECT_TRUE(WaitFor([&] { return gw_->TakeLoad().at(0).engine_waiting == 0; }));
}

TEST(TokenBucket, AdmitsUpToTheLimitThenSaysWhenToRetry) {
  TokenBucket b;
  int64_t retry = 0;
  const int64_t t0 = 1'000'000'000;
  for (int i = 0; i < 60; ++i) EXPECT_TRUE(b.Admit(1, 1, 60, t0, &retry));
  EXPECT_FALSE(b.Admit(1, 1, 60, t0, &retry));
  EXPECT_EQ(retry, 1);  // one a second
  EXPECT_TRUE(b.Admit(1, 1, 60, t0 + 1'000'000'000, &retry));
  EXPECT_TRUE(b.Admit(1, 1, 0, t0, &retry));  // unlimited
  TokenBucket tpm;
  tpm.Charge(100, 60, t0);  // 60 - 100 = -40: 41 s until above zero
  EXPECT_FALSE(tpm.Admit(0, 1e-9, 60, t0, &retry));
  EXPECT_EQ(retry, 41);
}

TEST(Usage, FoundInAnswersAndStreams) {
  Usage u = FindUsage(
      R"({"choices":[{"text":"\"usage\":{\"prompt_tokens\":99}"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}})");
  EXPECT_TRUE(u.found);
  EXPECT_EQ(u.prompt_tokens, 3);
  EXPECT_EQ(u.completion_tokens, 4);
  EXPECT_FALSE(FindUsage(R"({"usage":null})").found);
  EXPECT_FALSE(FindUsage(R"({"a":1})").found);

  SseFilter f(/*strip_usage_only=*/true);
  std::string out;
  f.Feed("data: {\"choices\":[{\"delta\":{}}]}\n\ndata: {\"choices\":[],\"usa", &out);
  EXPECT_EQ(out, "data: {\"choices\":[{\"delta\":{}}]}\n\n");
  out.clear();
  f.Feed("ge\":{\"prompt_tokens\":2,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n", &out);
  EXPECT_EQ(out, "data: [DONE]\n\n");
  EXPECT_EQ(f.usage().completion_tokens, 5);
  EXPECT_TRUE(f.saw_done());
}

// An engine that never ends an event cannot make the gateway hold more
// than kMaxEventBytes of it: the filter says so and the stream is broken.
TEST(SseFilter, AnEndlessEventOverflows) {
  SseFilter f(false);
  std::string out;
  f.Feed("data: {\"a\":1}\n\n", &out);
  EXPECT_EQ(out, "data: {\"a\":1}\n\n");
  const std::string chunk(1 << 20, 'x');
  f.Feed("data: ", &out);
  for (size_t held = 6; held <= SseFilter::kMaxEventBytes; held += chunk.size()) {
    EXPECT_FALSE(f.overflowed());
    f.Feed(chunk, &out);
  }
  EXPECT_TRUE(f.overflowed());
  EXPECT_EQ(out, "data: {\"a\":1}\n\n");  // nothing of it passed on
}

TEST(ParseRequest, ReadsTheRoutedFieldsAndRefusesBadOnes) {
  std::string param;
  auto r =
      ParseRequest(R"({"messages":[{"role":"user","content":"x","model":"inner"}],"model":"m","stream":true,)"
                   R"("stream_options":{"x":{"include_usage":false},"include_usage":true},"user":"u","max_tokens":7})",
                   &param);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->user, "u");
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_TRUE(r->doc.is_null());  // no document unless asked for
  ASSERT_TRUE(ParseDocument(R"({"model":"m"})", &*r).ok());
  EXPECT_EQ(r->doc["model"], "m");
  for (const char* bad : {"", "{", "[]", "{\"model\":\"m\"} x", "\"m\""}) {
    EXPECT_FALSE(ParseRequest(bad, &param).ok()) << bad;
  }
  const std::pair<const char*, const char*> bad_fields[] = {
      {R"({"model":""})", "model"},
      {R"({"model":5})", "model"},
      {R"({"model":{"a":1}})", "model"},
      {R"({"model":"m","stream":"yes"})", "stream"},
      {R"({"model":"m","stream":[]})", "stream"},
      {R"({"model":"m","max_tokens":-1})", "max_tokens"},
      {R"({"model":"m","max_tokens":1.5})", "max_tokens"},
  };
  for (const auto& [body, field] : bad_fields) {
    param.clear();
    EXPECT_FALSE(ParseRequest(body, &param).ok()) << body;
    EXPECT_EQ(param, field) << body;
  }
  EXPECT_TRUE(ParseRequest(R"({"model":"m","stream":null})", &param).ok());
}

// The fast scan answers as the full parser does, on well-formed bodies and
// on mangled ones (seeded), and takes the usual body itself.
TEST(ParseRequest, FastScanAgreesWithTheFullParser) {
  std::mt19937_64 rng(18);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> keys = {
      "model",          "stream",        "user",     "max_tokens", "max_completion_tokens",
      "stream_options", "include_usage", "messages", "x"};
  const std::vector<std::string> scalars = {"\"m\"",
                                            "\"\"",
                                            "\"a b\"",
                                            "\"\\u00e9\"",
                                            "\"q\\\"\"",
                                            "\"\xc3\xa9\"",
                                            "true",
                                            "false",
                                            "null",
                                            "0",
                                            "-0",
                                            "7",
                                            "-1",
                                            "1.5",
                                            "2e3",
                                            "1E-2",
                                            "01",
                                            "-",
                                            "1.",
                                            "123456789012345678",
                                            "1234567890123456789",
                                            "18446744073709551616",
                                            "tru",
                                            "nul",
                                            "1e400",
                                            "-1E+999",
                                            "1e99",
                                            "1e-400",
                                            "123456789012345678901234567890.5",
                                            "1.5e300"};
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    size_t k = pick(depth > 3 ? 1 : 4);
    if (k == 0) return scalars[pick(scalars.size())];
    if (k == 1) {
      std::string a = "[";
      for (size_t i = 0, m = pick(3); i < m; ++i) a += (i ? "," : "") + value(depth + 1);
      return a + "]";
    }
    std::string o = "{";
    for (size_t i = 0, m = pick(5); i < m; ++i) {
      o += (i ? ", " : " ") + ("\"" + keys[pick(keys.size())] + "\"") + ":" + value(depth + 1);
    }
    return o + "}";
  };
  const std::string noise = "{}[],:\" \\x0-\n\t";
  int fast = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string body = value(0);
    if (round % 3 == 0 && !body.empty()) {  // mangle it
      size_t at = pick(body.size());
      switch (pick(3)) {
        case 0: body.erase(at, 1); break;
        case 1: body.insert(at, 1, noise[pick(noise.size())]); break;
        default: body.resize(at); break;
      }
    }
    std::string p1, p2;
    auto a = ParseRequest(body, &p1);
    auto b = ParseRequestFull(body, &p2);
    std::string p3;
    if (ParseRequestFast(body, &p3)) ++fast;
    ASSERT_EQ(a.ok(), b.ok()) << body;
    if (a.ok()) {
      EXPECT_EQ(a->model, b->model) << body;
      EXPECT_EQ(a->stream, b->stream) << body;
      EXPECT_EQ(a->include_usage, b->include_usage) << body;
      EXPECT_EQ(a->user, b->user) << body;
      EXPECT_EQ(a->max_tokens, b->max_tokens) << body;
    } else {
      EXPECT_EQ(a.status().message(), b.status().message()) << body;
      EXPECT_EQ(p1, p2) << body;
    }
  }
  EXPECT_GT(fast, 2000);  // the scan took many of them itself
  std::string bad;
  EXPECT_FALSE(ParseRequest(R"({"model":"m","x":1e400})", &bad).ok());  // a double's overflow is an error
  EXPECT_TRUE(ParseRequest(R"({"model":"m","x":1e99})", &bad).ok());
  std::string param;
  EXPECT_TRUE(
      ParseRequestFast(R"({"model":"bench","max_tokens":1,"messages":[{"role":"user","content":"hi"}]})", &param));
}

TEST(PickReplica, PowerOfTwoPrefersTheLessLoadedAndAffinityIsStable) {
  auto make = [](const std::string& id) {
    auto r = std::make_shared<Replica>();
    r->id = id;
    r->id_hash = Hash64(id);
    return r;
  };
  std::vector<std::shared_ptr<Replica>> rs = {make("a"), make("b")};
  rs[0]->outstanding = 5;
  FastRng rng(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(PickReplica(rs, {}, 0, rng), rs[1].get());
  EXPECT_EQ(PickReplica(rs, {rs[1].get()}, 0, rng), rs[0].get());  // tried: the other one
  EXPECT_EQ(PickReplica(rs, {rs[0].get(), rs[1].get()}, 0, rng), nullptr);
  rs[0]->outstanding = 0;
  rs.push_back(make("c"));
  rs.push_back(make("d"));
  Replica* first = PickReplica(rs, {}, Hash64("user-7"), rng);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(PickReplica(rs, {}, Hash64("user-7"), rng), first);
  std::map<Replica*, int> seen;
  for (int i = 0; i < 400; ++i) seen[PickReplica(rs, {}, Hash64("user-" + std::to_string(i)), rng)]++;
  EXPECT_EQ(seen.size(), 4u);  // users spread over the replicas
}

}  // namespace
}  // namespace drover::gateway
