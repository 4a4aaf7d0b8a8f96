// The engines' own load: GET /metrics of every replica every
// scrape_interval_ms; vLLM's num_requests_running + num_requests_waiting or
// llama.cpp server's requests_processing + requests_deferred become the
// replica's engine_load, added to its routing score (so the requests other
// gateways, or clients going straight to the engine, sent count too). A
// replica that does not answer, or publishes none of these, counts 0.
// The waiting ones alone, and vLLM's request_queue_time_seconds (sum and
// count, the change since the last scrape), are the queue that TakeLoad
// reports for the autoscaler. vLLM's KV-cache usage keeps a nearly full
// replica from being chosen for its prefix cache (routing.h). Runs on io
// thread 0, one replica at a time.

#include <cmath>
#include <set>

#include "drover/gateway/impl.h"

namespace drover::gateway {
namespace {

using Ms = std::chrono::milliseconds;

struct EngineMetrics {
  double load = -1;     // running + waiting
  double waiting = -1;  // waiting only
  double queue_sum_s = -1, queue_count = -1;
  double kv_usage = -1;  // 0..1, the largest of the label sets
};

void Add(double* into, double v) { *into = std::max(*into, 0.0) + v; }

// The known gauges and the queue-time histogram in a Prometheus text page
// (summed over label sets); -1 where absent.
EngineMetrics ReadEngineMetrics(std::string_view text) {
  EngineMetrics m;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    std::string_view name = line.substr(0, name_end);
    const bool running = name == "vllm:num_requests_running" || name == "llamacpp:requests_processing";
    const bool waiting = name == "vllm:num_requests_waiting" || name == "llamacpp:requests_deferred";
    const bool qsum = name == "vllm:request_queue_time_seconds_sum";
    const bool qcount = name == "vllm:request_queue_time_seconds_count";
    // vLLM before 0.10 says gpu_cache_usage_perc, later kv_cache_usage_perc (a fraction, despite the name).
    const bool kv = name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc";
    if (!running && !waiting && !qsum && !qcount && !kv) continue;
    size_t sp = line.rfind(' ');
    if (sp == std::string_view::npos) continue;
    std::string v(line.substr(sp + 1));
    char* e = nullptr;
    double d = std::strtod(v.c_str(), &e);
    if (e == v.c_str() || !std::isfinite(d) || d < 0) continue;
    if (running || waiting) Add(&m.load, d);
    if (waiting) Add(&m.waiting, d);
    if (qsum) Add(&m.queue_sum_s, d);
    if (qcount) Add(&m.queue_count, d);
    if (kv) m.kv_usage = std::max(m.kv_usage, std::min(d, 1.0));
  }
  return m;
}

// The queue time the engine added since the last scrape into `stats`;
// nothing on the first reading or after a restart (its counters fell).
void AddQueueTime(Replica& r, const EngineMetrics& m, ModelStats& stats) {
  if (m.queue_sum_s < 0 || m.queue_count < 0) return;
  const double d_sum = m.queue_sum_s - r.queue_sum_s;
  const double d_count = m.queue_count - r.queue_count;
  const bool had = r.queue_sum_s >= 0 && r.queue_count >= 0;
  r.queue_sum_s = m.queue_sum_s;
  r.queue_count = m.queue_count;
  if (!had || d_sum < 0 || d_count <= 0) return;
  stats.queue_us.fetch_add(static_cast<int64_t>(d_sum * 1e6), std::memory_order_relaxed);
  stats.queued.fetch_add(static_cast<int64_t>(d_count), std::memory_order_relaxed);
}

}  // namespace

awaitable<void> GatewayImpl::ScrapeLoop(Worker* w) {
  net::steady_timer timer(w->ioc);
  beast::error_code ec;
  for (;;) {
    timer.expires_after(Ms(options_.scrape_interval_ms));
    co_await timer.async_wait(Await(ec));
    if (ec) co_return;
    auto table = Table(w);
    std::set<Replica*> seen;
    for (const auto& [model, e] : table->models) {
      for (const auto& r : e.replicas) {
        if (!seen.insert(r.get()).second) continue;
        beast::tcp_stream s(w->ioc);
        s.expires_after(Ms(std::min<int64_t>(options_.scrape_interval_ms, 1000)));
        co_await s.async_connect(r->endpoint, Await(ec));
        EngineMetrics m;
        if (!ec) {
          bhttp::request<bhttp::empty_body> req{bhttp::verb::get, "/metrics", 11};
          req.set(bhttp::field::host, r->address);
          req.set(bhttp::field::connection, "close");
          if (!r->authorization.empty()) req.set(bhttp::field::authorization, "Bearer " + r->api_key);
          co_await bhttp::async_write(s, req, Await(ec));
        }
        if (!ec) {
          beast::flat_buffer b;
          bhttp::response_parser<bhttp::string_body> p;
          p.body_limit(4 << 20);
          co_await bhttp::async_read(s, b, p, Await(ec));
          if (!ec && p.get().result_int() == 200) m = ReadEngineMetrics(p.get().body());
        }
        r->engine_load.store(m.load > 0 ? static_cast<int64_t>(m.load + 0.5) : 0, std::memory_order_relaxed);
        r->engine_waiting.store(m.waiting >= 0 ? static_cast<int64_t>(m.waiting + 0.5) : -1, std::memory_order_relaxed);
        r->engine_kv_permille.store(m.kv_usage >= 0 ? static_cast<int64_t>(m.kv_usage * 1000 + 0.5) : -1,
                                    std::memory_order_relaxed);
        AddQueueTime(*r, m, *e.stats);
        s.close();
      }
    }
  }
}

}  // namespace drover::gateway
