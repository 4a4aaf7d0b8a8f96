// The engines' own load: GET /metrics of every replica every
// scrape_interval_ms; vLLM's num_requests_running + num_requests_waiting or
// llama.cpp server's requests_processing + requests_deferred become the
// replica's engine_load, added to its routing score (so the requests other
// gateways, or clients going straight to the engine, sent count too). A
// replica that does not answer, or publishes none of these, counts 0.
// Runs on io thread 0, one replica at a time.

#include <set>

#include "drover/gateway/impl.h"

namespace drover::gateway {
namespace {

using Ms = std::chrono::milliseconds;

// Sum of the known queue gauges in a Prometheus text page; -1 if none.
double EngineLoad(std::string_view text) {
  static constexpr std::string_view kNames[] = {"vllm:num_requests_running", "vllm:num_requests_waiting",
                                                "llamacpp:requests_processing", "llamacpp:requests_deferred"};
  double sum = 0;
  bool found = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    std::string_view name = line.substr(0, name_end);
    bool known = false;
    for (auto k : kNames) known = known || name == k;
    if (!known) continue;
    size_t sp = line.rfind(' ');
    if (sp == std::string_view::npos) continue;
    std::string v(line.substr(sp + 1));
    char* e = nullptr;
    double d = std::strtod(v.c_str(), &e);
    if (e != v.c_str()) {
      sum += d;
      found = true;
    }
  }
  return found ? sum : -1;
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
        double load = -1;
        if (!ec) {
          bhttp::request<bhttp::empty_body> req{bhttp::verb::get, "/metrics", 11};
          req.set(bhttp::field::host, r->address);
          req.set(bhttp::field::connection, "close");
          co_await bhttp::async_write(s, req, Await(ec));
        }
        if (!ec) {
          beast::flat_buffer b;
          bhttp::response_parser<bhttp::string_body> p;
          p.body_limit(4 << 20);
          co_await bhttp::async_read(s, b, p, Await(ec));
          if (!ec && p.get().result_int() == 200) load = EngineLoad(p.get().body());
        }
        r->engine_load.store(load > 0 ? static_cast<int64_t>(load + 0.5) : 0, std::memory_order_relaxed);
        s.close();
      }
    }
  }
}

}  // namespace drover::gateway
