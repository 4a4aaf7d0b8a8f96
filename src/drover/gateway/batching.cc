// Embeddings batching: concurrent /v1/embeddings requests of one model on one
// io thread within options.embeddings_batch_window_us become one upstream
// call; the answer is split back with each request's indices and its share
// of the usage.

#include "drover/gateway/impl.h"

namespace drover::gateway {

awaitable<void> GatewayImpl::BatchEmbeddings(Worker* w, const ModelEntry& entry, const RequestInfo& info,
                                             Sink& sink, CallResult& res) {
  std::string body = info.doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  co_await Route(w, entry, "/v1/embeddings", body, false, 0, sink, res);
}

}  // namespace drover::gateway
