// prefix_routing_bench: the gateway's replica choice on a multi-turn chat
// workload (issue 44), each policy on the same generated sessions, against
// drover-test-engine replicas with a prefix cache.
//
//   prefix_routing_bench [--replicas 4] [--rates 1,2.5,4] [--duration-s 20]
//                        [--policies round-robin,least-load,affinity,prefix,prefix-load]
//                        [--system-prompts 8] [--cache-tokens 12000]
//                        [--prefill-us 150] [--token-delay-us 1500]
//                        [--decode-slowdown 0.02] [--max-tokens-cap 96]
//                        [--think-ms 300] [--timeout-s 30] [--seed 1]
//                        [--max-running 0] [--load-bound 12] [--prefix-weight 2]
//   prefix_routing_bench --micro
//
// --micro: the scorer's own cost per request, without the network: the
// prompt found and hashed (PromptOf, PrefixChain) and the choice among 4
// replicas whose caches hold many chains (ChooseReplica), for bodies of
// 2 KiB, 16 KiB and 4 MiB (p50 and p99 of 20,000 calls each).
//
// Workload (seeded; every policy gets the same sessions at the same
// times): sessions arrive as a Poisson process at each rate (sessions per
// second) for --duration-s; each uses one of --system-prompts shared system
// prompts (200..1000 words, uniform: our choice) and runs 1 + a geometric
// number of turns (mean 4 in all: our choice, to make conversations grow;
// the trace below averages 2.0 turns), one after the other with an
// exponential think time. Each turn's user message and answer lengths are
// log-normal with the means of LMSYS-Chat-1M (Zheng et al., "LMSYS-Chat-1M:
// A Large-Scale Real-World LLM Conversation Dataset", ICLR 2024, Table 1:
// 69.5 tokens per prompt, 214.5 per response; sigma 1.0 and 0.8 are ours),
// the answer capped at --max-tokens-cap. The next turn sends the whole
// conversation so far, the engine's answers included, as a chat client does.
//
// Engines: --replicas drover-test-engine processes, each with a prefix
// cache of --cache-tokens, --prefill-us per uncached token (one prefill lane
// per engine), --token-delay-us per token growing by --decode-slowdown per
// other request generating, at most --max-running requests at once (the
// others queue in the engine; 0: no limit). Fresh engines and a fresh gateway (in this
// process, engine metrics scraped every 500 ms) for every (rate, policy).
// "affinity" sends an x-session-id per session with the gateway's affinity
// on; the others send none.
//
// Per (rate, policy): requests, failed (non-200, or no answer within
// --timeout-s), TTFT (to the first streamed event) p50/p99, end-to-end p99,
// throughput (answered requests over the time from the first arrival to
// the last answer), the engines' actual prefix-cache hit rate (hit tokens
// over queried, from their /metrics), and the gateway's own time per call
// (drover_gateway_overhead_seconds p50/p99). Results: docs/performance.md.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "drover/common/metrics.h"
#include "drover/gateway/gateway.h"
#include "drover/gateway/prefix_scorer.h"
#include "drover/gateway/routing.h"
#include "gateway/engine_process.h"

namespace {

using drover::gateway::testing::ChildProcess;
using drover::gateway::testing::Conn;
using drover::gateway::testing::SumSamples;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  int replicas = 4;
  std::vector<double> rates = {1, 2.5, 4};
  double duration_s = 20;
  std::vector<std::string> policies = {"round-robin", "least-load", "affinity", "prefix", "prefix-load"};
  int system_prompts = 8;
  int64_t cache_tokens = 12000;
  int64_t prefill_us = 150;
  int64_t token_delay_us = 1500;
  double decode_slowdown = 0.02;
  int64_t max_tokens_cap = 96;
  double think_ms = 300;
  double timeout_s = 30;
  uint64_t seed = 1;
  int64_t max_running = 0;
  int64_t load_bound = 12;  // prefix-load's weights (the defaults)
  double prefix_weight = 2;
};

struct Turn {
  std::string user;
  int64_t max_tokens = 0;
};
struct Session {
  double start_s = 0;
  int system = 0;
  std::vector<Turn> turns;
  std::vector<double> think_s;  // before each turn after the first
};

std::string Words(std::mt19937_64& rng, int64_t n, const std::string& tag) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += tag + std::to_string(rng() % 100000) + " ";
  return s;
}

int64_t LogNormal(std::mt19937_64& rng, double mean, double sigma, int64_t lo, int64_t hi) {
  std::lognormal_distribution<double> d(std::log(mean) - sigma * sigma / 2, sigma);
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(d(rng))), lo, hi);
}

std::vector<Session> Sessions(const Options& o, double rate, std::vector<std::string>* systems) {
  std::mt19937_64 rng(o.seed);
  systems->clear();
  for (int i = 0; i < o.system_prompts; ++i) {
    std::uniform_int_distribution<int64_t> len(200, 1000);
    systems->push_back(Words(rng, len(rng), "sys" + std::to_string(i) + "_"));
  }
  std::vector<Session> out;
  std::exponential_distribution<double> gap(rate);
  std::geometric_distribution<int> extra(1.0 / 4.0);  // turns = 1 + extra: mean 4
  std::exponential_distribution<double> think(1000.0 / std::max(1.0, o.think_ms));
  double t = 0;
  for (int id = 0;; ++id) {
    t += gap(rng);
    if (t >= o.duration_s) break;
    Session s;
    s.start_s = t;
    s.system = static_cast<int>(rng() % systems->size());
    const int turns = 1 + std::min(extra(rng), 15);
    for (int k = 0; k < turns; ++k) {
      Turn turn;
      turn.user = Words(rng, LogNormal(rng, 69.5, 1.0, 1, 2000), "u" + std::to_string(id) + "_");
      turn.max_tokens = LogNormal(rng, 214.5, 0.8, 1, o.max_tokens_cap);
      s.turns.push_back(std::move(turn));
      s.think_s.push_back(k == 0 ? 0 : think(rng));
    }
    out.push_back(std::move(s));
  }
  return out;
}

struct Sample {
  double ttft_s = -1, e2e_s = -1;
  bool ok = false;
};

// One streamed chat completion; the answer's text into *answer.
Sample Call(int port, const std::string& body, const std::string& extra, double timeout_s, std::string* answer) {
  Sample s;
  const auto t0 = Clock::now();
  Conn c(port);
  const std::string req = drover::gateway::testing::Request(
      "POST", "/v1/chat/completions", body, "Authorization: Bearer k\r\nConnection: close\r\n" + extra);
  if (!c.ok() || !c.Send(req)) return s;
  const auto deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::string raw;
  auto left = [&] {
    return std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  if (!c.ReadUntil(&raw, [](const std::string& b) { return b.find("data: ") != std::string::npos; }, left())) return s;
  s.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (raw.compare(9, 3, "200") != 0) return s;
  c.ReadUntil(&raw, [](const std::string& b) { return b.find("data: [DONE]") != std::string::npos; }, left());
  if (raw.find("data: [DONE]") == std::string::npos) return s;
  s.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::istringstream lines(raw);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    json ev = json::parse(line.substr(6), nullptr, false);
    if (!ev.is_object() || !ev.contains("choices") || ev["choices"].empty()) continue;
    const json& d = ev["choices"][0]["delta"];
    if (d.is_object() && d.contains("content") && d["content"].is_string()) *answer += d["content"].get<std::string>();
  }
  s.ok = true;
  return s;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// A histogram's q-quantile (the bucket's upper bound) from exposition text.
double HistogramQuantile(const std::string& text, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative)
  const std::string prefix = name + "_bucket{le=\"";
  for (size_t pos = text.find(prefix); pos != std::string::npos; pos = text.find(prefix, pos + 1)) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos + prefix.size(), end - pos - prefix.size());
    const double le = line.rfind("+Inf", 0) == 0 ? INFINITY : std::atof(line.c_str());
    buckets.emplace_back(le, std::atof(line.c_str() + line.rfind(' ') + 1));
  }
  if (buckets.empty() || buckets.back().second <= 0) return -1;
  const double rank = q * buckets.back().second;
  for (const auto& [le, n] : buckets) {
    if (n >= rank) return le;
  }
  return INFINITY;
}

struct CellResult {
  int64_t requests = 0, failed = 0;
  double ttft_p50 = -1, ttft_p99 = -1, e2e_p99 = -1, rps = 0, hit = -1, over_p50 = -1, over_p99 = -1;
};

CellResult RunCell(const Options& o, double rate, const std::string& policy, const std::string& engine_binary) {
  std::vector<std::string> systems;
  const std::vector<Session> sessions = Sessions(o, rate, &systems);
  if (std::getenv("BENCH_DEBUG") != nullptr) {
    size_t turns = 0;
    for (const Session& s : sessions) turns += s.turns.size();
    std::fprintf(stderr, "%zu sessions, %zu turns\n", sessions.size(), turns);
  }
  std::vector<std::unique_ptr<ChildProcess>> engines;
  drover::gateway::Route route("m", "dep-m", "", false, {});
  for (int i = 0; i < o.replicas; ++i) {
    engines.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        engine_binary, "--port", "0", "--model", "m", "--threads", "2", "--prefix-cache-tokens",
        std::to_string(o.cache_tokens), "--prefill-us-per-token", std::to_string(o.prefill_us), "--token-delay-us",
        std::to_string(o.token_delay_us), "--decode-slowdown", std::to_string(o.decode_slowdown), "--max-running",
        std::to_string(o.max_running)}));
    if (engines.back()->port() <= 0) {
      std::fprintf(stderr, "prefix_routing_bench: the engine did not start\n");
      std::exit(1);
    }
    route.replicas.push_back({"j-" + std::to_string(i), engines.back()->address()});
  }
  if (!drover::gateway::ParseRoutingKind(policy == "affinity" ? "least-load" : policy, &route.routing.kind)) {
    std::fprintf(stderr, "prefix_routing_bench: unknown policy %s\n", policy.c_str());
    std::exit(2);
  }
  route.routing.load_bound = o.load_bound;
  route.routing.prefix_weight = o.prefix_weight;
  drover::gateway::GatewayOptions go;
  go.io_threads = 2;
  go.affinity = policy == "affinity";
  go.scrape_engine_metrics = true;
  go.scrape_interval_ms = 500;
  go.upstream_timeout_ms = static_cast<int64_t>(o.timeout_s * 1000);
  go.metrics_public = true;
  drover::metrics::Registry registry;
  auto gw = drover::gateway::StartGateway(
      go,
      [](std::string_view) -> drover::Result<drover::gateway::KeyInfo> {
        return drover::gateway::KeyInfo{"id-k", "bench", "t", false, 0, 0, 0, 0};
      },
      &registry);
  if (!gw.ok()) {
    std::fprintf(stderr, "prefix_routing_bench: %s\n", gw.status().ToString().c_str());
    std::exit(1);
  }
  (*gw)->SetRoutes({route});
  const int port = (*gw)->port();

  std::mutex mu;
  std::vector<double> ttft, e2e;
  int64_t requests = 0, failed = 0;
  auto last_answer = Clock::now();
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t id = 0; id < sessions.size(); ++id) {
    const Session& s = sessions[id];
    std::this_thread::sleep_until(t0 + std::chrono::microseconds(static_cast<int64_t>(s.start_s * 1e6)));
    threads.emplace_back([&, id] {
      const Session& ss = sessions[id];
      json msgs = json::array({{{"role", "system"}, {"content", systems[static_cast<size_t>(ss.system)]}}});
      const std::string extra = policy == "affinity" ? "x-session-id: s-" + std::to_string(id) + "\r\n" : "";
      for (size_t k = 0; k < ss.turns.size(); ++k) {
        if (k > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ss.think_s[k] * 1e6)));
        msgs.push_back({{"role", "user"}, {"content", ss.turns[k].user}});
        const std::string body =
            json{{"model", "m"}, {"stream", true}, {"max_tokens", ss.turns[k].max_tokens}, {"messages", msgs}}.dump();
        std::string answer;
        const Sample smp = Call(port, body, extra, o.timeout_s, &answer);
        std::lock_guard lock(mu);
        ++requests;
        if (!smp.ok) {
          ++failed;
          return;  // the session gives up
        }
        ttft.push_back(smp.ttft_s);
        e2e.push_back(smp.e2e_s);
        last_answer = Clock::now();
        msgs.push_back({{"role", "assistant"}, {"content", answer}});
      }
    });
  }
  for (auto& t : threads) t.join();
  CellResult r;
  r.requests = requests;
  r.failed = failed;
  r.ttft_p50 = Quantile(ttft, 0.5);
  r.ttft_p99 = Quantile(ttft, 0.99);
  r.e2e_p99 = Quantile(e2e, 0.99);
  r.rps = static_cast<double>(requests - failed) / std::chrono::duration<double>(last_answer - t0).count();
  double queried = 0, hits = 0;
  for (auto& e : engines) {
    const std::string m = drover::gateway::testing::Http(e->port(), "GET", "/metrics").body;
    queried += SumSamples(m, "vllm:prefix_cache_queries_total");
    hits += SumSamples(m, "vllm:prefix_cache_hits_total");
  }
  r.hit = queried > 0 ? hits / queried : -1;
  const std::string gm = drover::gateway::testing::Http(port, "GET", "/metrics").body;
  r.over_p50 = HistogramQuantile(gm, "drover_gateway_overhead_seconds", 0.5);
  r.over_p99 = HistogramQuantile(gm, "drover_gateway_overhead_seconds", 0.99);
  (*gw)->Stop();
  return r;
}

// --micro (see the file's comment).
void Micro() {
  namespace gw = drover::gateway;
  std::mt19937_64 rng(7);
  std::vector<std::shared_ptr<gw::Replica>> replicas;
  for (int i = 0; i < 4; ++i) {
    auto r = std::make_shared<gw::Replica>();
    r->id = "j-" + std::to_string(i);
    r->id_hash = gw::Hash64(r->id);
    replicas.push_back(r);
  }
  // Caches holding many other conversations' chains.
  for (int i = 0; i < 2000; ++i) {
    const std::string other = Words(rng, 300, "o" + std::to_string(i) + "_");
    replicas[static_cast<size_t>(i) % 4]->prefixes.Insert(1, static_cast<uint64_t>(i % 16), gw::PrefixChain(other, 1));
  }
  std::printf("%-10s %12s %12s %12s %12s\n", "body", "hash_p50", "hash_p99", "choose_p50", "choose_p99");
  for (size_t words : {size_t{250}, size_t{2000}, size_t{500000}}) {
    const std::string body =
        json{{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", Words(rng, static_cast<int64_t>(words), "w")}}})}}
            .dump();
    gw::PickInput in;
    in.salt = 1;
    in.owner = 1;
    in.chain = gw::PrefixChain(gw::PromptOf(body), 1);
    replicas[2]->prefixes.Insert(1, 1, in.chain);  // its home
    gw::FastRng frng(1);
    std::vector<double> hash_ns, choose_ns;
    for (int i = 0; i < 20000; ++i) {
      const auto t0 = Clock::now();
      std::vector<uint64_t> chain = gw::PrefixChain(gw::PromptOf(body), 1);
      const auto t1 = Clock::now();
      const gw::Pick p = gw::ChooseReplica(replicas, {}, in, frng);
      const auto t2 = Clock::now();
      if (p.replica != replicas[2].get() || chain.size() != in.chain.size()) std::abort();
      hash_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      choose_ns.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count());
    }
    std::printf("%-10s %10.2fus %10.2fus %10.2fus %10.2fus\n", (std::to_string(body.size() >> 10) + "KiB").c_str(),
                Quantile(hash_ns, 0.5) / 1e3, Quantile(hash_ns, 0.99) / 1e3, Quantile(choose_ns, 0.5) / 1e3,
                Quantile(choose_ns, 0.99) / 1e3);
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int Usage(const char* why) {
  std::fprintf(stderr, "prefix_routing_bench: %s (see the file's comment for the flags)\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string engine = TEST_ENGINE_BINARY;
  if (argc == 2 && std::string(argv[1]) == "--micro") {
    Micro();
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage(("a value is missing after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--replicas") o.replicas = std::atoi(v.c_str());
    else if (a == "--rates") {
      o.rates.clear();
      for (const std::string& r : Split(v)) o.rates.push_back(std::atof(r.c_str()));
    } else if (a == "--duration-s") o.duration_s = std::atof(v.c_str());
    else if (a == "--policies") o.policies = Split(v);
    else if (a == "--system-prompts") o.system_prompts = std::max(1, std::atoi(v.c_str()));
    else if (a == "--cache-tokens") o.cache_tokens = std::atoll(v.c_str());
    else if (a == "--prefill-us") o.prefill_us = std::atoll(v.c_str());
    else if (a == "--token-delay-us") o.token_delay_us = std::atoll(v.c_str());
    else if (a == "--decode-slowdown") o.decode_slowdown = std::atof(v.c_str());
    else if (a == "--max-tokens-cap") o.max_tokens_cap = std::max<int64_t>(1, std::atoll(v.c_str()));
    else if (a == "--think-ms") o.think_ms = std::atof(v.c_str());
    else if (a == "--timeout-s") o.timeout_s = std::atof(v.c_str());
    else if (a == "--seed") o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--load-bound") o.load_bound = std::max<int64_t>(0, std::atoll(v.c_str()));
    else if (a == "--prefix-weight") o.prefix_weight = std::atof(v.c_str());
    else if (a == "--max-running") o.max_running = std::max<int64_t>(0, std::atoll(v.c_str()));
    else if (a == "--engine") engine = v;
    else return Usage(("unknown flag " + a).c_str());
  }
  if (o.replicas < 1 || o.rates.empty() || o.policies.empty()) return Usage("nothing to run");
  std::printf("%d replicas, cache %lld tokens each, prefill %lld us/token, token delay %lld us, %.0f s of arrivals\n",
              o.replicas, static_cast<long long>(o.cache_tokens), static_cast<long long>(o.prefill_us),
              static_cast<long long>(o.token_delay_us), o.duration_s);
  std::printf("%-8s %-12s %8s %6s %9s %9s %9s %7s %6s %10s %10s\n", "sess/s", "policy", "requests", "failed",
              "ttft_p50", "ttft_p99", "e2e_p99", "req/s", "hit", "own_p50", "own_p99");
  for (double rate : o.rates) {
    for (const std::string& p : o.policies) {
      const CellResult r = RunCell(o, rate, p, engine);
      std::printf("%-8.2f %-12s %8lld %6lld %8.3fs %8.3fs %8.3fs %7.2f %5.0f%% %8.1fus %8.1fus\n", rate, p.c_str(),
                  static_cast<long long>(r.requests), static_cast<long long>(r.failed), r.ttft_p50, r.ttft_p99,
                  r.e2e_p99, r.rps, 100 * r.hit, r.over_p50 * 1e6, r.over_p99 * 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
