// embeddings_bench: the gain of the gateway's embeddings batching (issue 18,
// docs/gateway.md "Embeddings batching").
//
//   embeddings_bench [--clients 32] [--seconds 3] [--windows 0,250,1000,4000]
//                    [--call-us 2000] [--input-us 20] [--io-threads 2]
//
// One drover-test-engine whose embeddings run on a simulated accelerator
// (--embed-call-us: calls one at a time, each call_us + input_us per input),
// the gateway in this process in front of it, and `clients` closed-loop
// clients each sending one single-input /v1/embeddings request after the
// other on a keep-alive connection for `seconds`. First the engine
// directly, then through the gateway with each batching window (0: off).
// Prints per run: requests/s, latency p50/p99, the engine's calls and the
// mean batch (requests per upstream call).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drover/gateway/gateway.h"
#include "gateway/engine_process.h"

namespace {

using drover::gateway::GatewayOptions;
using drover::gateway::KeyInfo;
namespace t = drover::gateway::testing;

struct Run {
  int64_t requests = 0;
  int64_t failed = 0;
  double seconds = 0;
  std::vector<int64_t> latencies_us;
};

// `clients` closed-loop clients against `port` for `seconds`.
Run Load(int port, int clients, double seconds, bool with_key) {
  const std::string body = R"({"model":"m","input":"the quick brown fox jumps over the lazy dog"})";
  const std::string request =
      t::Request("POST", "/v1/embeddings", body, with_key ? "Authorization: Bearer bench-key\r\n" : "");
  std::vector<Run> per(static_cast<size_t>(clients));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Run& r = per[static_cast<size_t>(c)];
      auto conn = std::make_unique<t::Conn>(port);
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string raw;
        t::HttpResponse resp;
        bool ok = conn->ok() && conn->Send(request) &&
                  conn->ReadUntil(&raw, [&](const std::string& b) { return t::Complete(b, &resp); });
        const auto t1 = std::chrono::steady_clock::now();
        if (ok && resp.status == 200) {
          ++r.requests;
          r.latencies_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count());
        } else {
          ++r.failed;
          conn = std::make_unique<t::Conn>(port);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the run's length, not a wait on an event
  stop = true;
  for (auto& th : threads) th.join();
  Run all;
  all.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& r : per) {
    all.requests += r.requests;
    all.failed += r.failed;
    all.latencies_us.insert(all.latencies_us.end(), r.latencies_us.begin(), r.latencies_us.end());
  }
  std::sort(all.latencies_us.begin(), all.latencies_us.end());
  return all;
}

int64_t Pct(const std::vector<int64_t>& v, double p) {
  if (v.empty()) return -1;
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// The value of a counter in a Prometheus text page (0 if absent).
double Counter(const std::string& page, const std::string& name) {
  size_t at = page.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::strtod(page.c_str() + at + name.size() + 2, nullptr);
}

double EngineCalls(int engine_port) {
  return Counter("\n" + t::Http(engine_port, "GET", "/metrics").body, "drover_test_engine_embedding_calls_total");
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoll(item));
  }
  return out;
}

void Print(const char* what, int64_t window_us, const Run& r, double calls) {
  std::printf("%-8s %9lld %10.0f %9lld %9lld %8lld %9.0f %10.2f\n", what, static_cast<long long>(window_us),
              static_cast<double>(r.requests) / r.seconds, static_cast<long long>(Pct(r.latencies_us, 0.5)),
              static_cast<long long>(Pct(r.latencies_us, 0.99)), static_cast<long long>(r.failed), calls,
              calls > 0 ? static_cast<double>(r.requests) / calls : 0.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 32, io_threads = 2;
  double seconds = 3;
  int64_t call_us = 2000, input_us = 20;
  std::string windows = "0,250,1000,4000";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!v) {
      std::fprintf(stderr, "embeddings_bench: %s needs a value\n", a.c_str());
      return 2;
    }
    ++i;
    if (a == "--clients")
      clients = std::atoi(v);
    else if (a == "--seconds")
      seconds = std::atof(v);
    else if (a == "--windows")
      windows = v;
    else if (a == "--call-us")
      call_us = std::atoll(v);
    else if (a == "--input-us")
      input_us = std::atoll(v);
    else if (a == "--io-threads")
      io_threads = std::atoi(v);
    else {
      std::fprintf(stderr, "embeddings_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (clients < 1 || seconds <= 0 || io_threads < 1) {
    std::fprintf(stderr, "embeddings_bench: --clients, --seconds and --io-threads must be positive\n");
    return 2;
  }
  t::ChildProcess engine({TEST_ENGINE_BINARY, "--port", "0", "--model", "m", "--embed-call-us", std::to_string(call_us),
                          "--embed-input-us", std::to_string(input_us)});
  if (engine.port() <= 0) {
    std::fprintf(stderr, "embeddings_bench: the test engine did not start\n");
    return 1;
  }
  std::printf(
      "engine: a call costs %lld us + %lld us per input, one call at a time; %d clients, %.1f s per run, "
      "gateway io threads %d\n",
      static_cast<long long>(call_us), static_cast<long long>(input_us), clients, seconds, io_threads);
  std::printf("%-8s %9s %10s %9s %9s %8s %9s %10s\n", "via", "window_us", "req/s", "p50_us", "p99_us", "failed",
              "calls", "req/call");
  double before = EngineCalls(engine.port());
  Run direct = Load(engine.port(), clients, seconds, false);
  double after = EngineCalls(engine.port());
  Print("direct", 0, direct, after - before);
  for (int64_t window : ParseList(windows)) {
    GatewayOptions o;
    o.listen = "127.0.0.1:0";
    o.io_threads = io_threads;
    o.embeddings_batch_window_us = window;
    auto gw = drover::gateway::StartGateway(
        o,
        [](std::string_view) -> drover::Result<KeyInfo> {
          return KeyInfo{"bench", "bench key", "bench", false, 0, 0, 0, 0};
        },
        nullptr);
    if (!gw.ok()) {
      std::fprintf(stderr, "embeddings_bench: %s\n", gw.status().ToString().c_str());
      return 1;
    }
    (*gw)->SetRoutes({{"m", "dep-m", "", false, {{"j-1", engine.address()}}}});
    before = EngineCalls(engine.port());
    Run r = Load((*gw)->port(), clients, seconds, true);
    after = EngineCalls(engine.port());
    Print("gateway", window, r, after - before);
    (*gw)->Stop();
  }
  return 0;
}
