// Embeddings batching: concurrent /v1/embeddings requests of one model
// within options.embeddings_batch_window_us become one upstream call,
// whichever io thread each arrived on; the answer is split back with each
// request's indices and its share of the usage.
//
// Example: A asks ["x y"], B asks ["p", "q r s"] within the window. The
// first to arrive (A) leads: it waits out the window (or until the batch
// holds embeddings_batch_max_inputs inputs), sends input ["x y", "p",
// "q r s"], and hands B data[1..2] re-indexed 0..1. Usage: 6 prompt tokens
// split by the inputs' share of the characters (A 3 of 9 -> 2, B the rest -> 4).
//
// Only plain requests are merged: input a string or an array of strings,
// no fields but model, input, user and encoding_format (requests with
// different encodings are not merged); others go upstream alone.
//
// Threads: the open batches are in a map under batches_mu_; a batch taken
// out of it (full, or its window over) is closed and no longer changes.
// The leader's window timer is touched on the leader's thread only (a
// follower that fills the batch posts the cancel there), and a follower's
// result is handed over by a post to the follower's thread, which marks it
// done and wakes it.

#include <limits>

#include "drover/gateway/impl.h"

namespace drover::gateway {

struct EmbeddingsBatch {
  struct Item {
    size_t n = 0;                       // inputs
    int64_t chars = 0;                  // their length, for the usage split
    net::any_io_executor ex;            // the thread of the request's connection
    net::steady_timer* wake = nullptr;  // the follower's; nullptr for the leader
    bool done = false;                  // set on `ex`'s thread
    int status = 0;
    std::string body;
    Usage usage;
  };
  explicit EmbeddingsBatch(net::io_context& ioc) : window(ioc) {}
  net::steady_timer window;  // the leader's thread only
  // Guarded by GatewayImpl::batches_mu_ until the batch is closed.
  std::vector<Item*> items;
  nlohmann::json inputs = nlohmann::json::array();
  bool closed = false;
};

namespace {

// Captures a whole answer instead of sending it.
class CaptureSink final : public Sink {
 public:
  awaitable<bool> Whole(int s, std::string_view, std::string_view b, std::string_view) override {
    status = s;
    body.assign(b);
    co_return true;
  }
  awaitable<bool> Events(std::string_view e) override {
    status = 200;
    body.append(e);
    co_return true;
  }
  awaitable<bool> EndStream() override { co_return true; }
  int status = 0;
  std::string body;
};

bool Mergeable(const nlohmann::json& doc, std::vector<std::string>* inputs, std::string* format) {
  for (const auto& [k, v] : doc.items()) {
    if (k == "model" || k == "user" || k == "input") continue;
    if (k == "encoding_format" && v.is_string()) {
      *format = v.get<std::string>();
      continue;
    }
    return false;
  }
  auto in = doc.find("input");
  if (in == doc.end()) return false;
  if (in->is_string()) {
    inputs->push_back(in->get<std::string>());
    return true;
  }
  if (!in->is_array() || in->empty()) return false;
  for (const auto& s : *in) {
    if (!s.is_string()) return false;
    inputs->push_back(s.get<std::string>());
  }
  return true;
}

// Splits the merged answer among the items (status and body for each).
void Split(EmbeddingsBatch& b, const std::string& model, int status, const std::string& body) {
  nlohmann::json j = status == 200 ? nlohmann::json::parse(body, nullptr, false) : nlohmann::json();
  std::vector<const nlohmann::json*> by_index;
  bool ok = j.is_object() && j.contains("data") && j["data"].is_array();
  if (ok) {
    by_index.assign(b.inputs.size(), nullptr);
    for (const auto& d : j["data"]) {
      if (!d.is_object() || !d.contains("index") || !d["index"].is_number_unsigned()) continue;
      size_t i = d["index"].get<size_t>();
      if (i < by_index.size()) by_index[i] = &d;
    }
    for (auto* p : by_index) ok = ok && p != nullptr;
  }
  if (!ok) {
    for (auto* it : b.items) {
      it->status = status == 200 ? 502 : status;
      it->body = status == 200 ? ErrorJson("the replica's merged embeddings answer could not be split", "server_error",
                                           "upstream_error")
                               : body;
    }
    return;
  }
  Usage total = FindUsage(body);
  int64_t all_chars = 0;
  for (auto* it : b.items) all_chars += it->chars;
  int64_t given = 0;
  size_t offset = 0;
  for (size_t k = 0; k < b.items.size(); ++k) {
    auto* it = b.items[k];
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < it->n; ++i) {
      nlohmann::json d = *by_index[offset + i];
      d["index"] = i;
      data.push_back(std::move(d));
    }
    offset += it->n;
    int64_t share = k + 1 == b.items.size() ? total.prompt_tokens - given
                                            : (all_chars > 0 ? total.prompt_tokens * it->chars / all_chars : 0);
    given += share;
    nlohmann::json out = {{"object", "list"},
                          {"data", std::move(data)},
                          {"model", j.value("model", model)},
                          {"usage", {{"prompt_tokens", share}, {"total_tokens", share}}}};
    it->status = 200;
    it->body = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    it->usage = {share, 0, total.found};
  }
}

}  // namespace

awaitable<void> GatewayImpl::BatchEmbeddings(Worker* w, const ModelEntry& entry, const RequestInfo& info, Sink& sink,
                                             CallResult& res) {
  std::vector<std::string> inputs;
  std::string format;
  if (!Mergeable(info.doc, &inputs, &format) || inputs.size() >= options_.embeddings_batch_max_inputs) {
    std::string body = info.doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    co_await Route(w, entry, "/v1/embeddings", body, false, PickInput::NoPrompt(entry), sink, res);
    co_return;
  }
  EmbeddingsBatch::Item item;
  item.n = inputs.size();
  item.ex = w->ioc.get_executor();
  for (const auto& in : inputs) item.chars += static_cast<int64_t>(in.size());
  // One batch per route and encoding: two tenants' models of one name are
  // two routes, and their requests never share an upstream call.
  const std::string key = RouteKey(entry.route.tenant, entry.route.model) + '\0' + format;
  std::shared_ptr<EmbeddingsBatch> batch;
  bool leader = false;
  {
    MutexLock lock(&batches_mu_);
    auto& slot = batches_[key];
    leader = !slot;  // a closed batch is out of the map
    if (leader) slot = std::make_shared<EmbeddingsBatch>(w->ioc);
    batch = slot;
    for (auto& in : inputs) batch->inputs.push_back(std::move(in));
    batch->items.push_back(&item);
    if (batch->inputs.size() >= options_.embeddings_batch_max_inputs) {
      batch->closed = true;  // full: the leader sends now
      batches_.erase(key);
    }
  }
  beast::error_code ec;
  if (!leader) {
    if (batch->closed) net::post(batch->window.get_executor(), [batch] { batch->window.cancel(); });
    net::steady_timer wake(w->ioc);
    item.wake = &wake;  // before this suspends: the leader's post runs after that
    batch.reset();
    while (!item.done) {
      wake.expires_after(std::chrono::hours(24));
      co_await wake.async_wait(Await(ec));
    }
  } else {
    bool closed;
    {
      MutexLock lock(&batches_mu_);
      closed = batch->closed;
    }
    if (!closed) {
      batch->window.expires_after(std::chrono::microseconds(options_.embeddings_batch_window_us));
      co_await batch->window.async_wait(Await(ec));  // the window, or cancelled when full
      MutexLock lock(&batches_mu_);
      if (!batch->closed) {
        batch->closed = true;
        auto it = batches_.find(key);
        if (it != batches_.end() && it->second == batch) batches_.erase(it);
      }
    }
    // Closed: nobody else touches items or inputs now.
    if (batch->items.size() > 1) {
      counters_.batches->Inc();
      counters_.batched_requests->Inc(static_cast<double>(batch->items.size()));
    }
    nlohmann::json merged = {{"model", info.model}, {"input", std::move(batch->inputs)}};
    if (!format.empty()) merged["encoding_format"] = format;
    batch->inputs = nlohmann::json::array();
    for (auto* it : batch->items) {
      for (size_t i = 0; i < it->n; ++i) batch->inputs.push_back(nullptr);  // keeps the count for Split
    }
    CaptureSink capture;
    CallResult merged_res;
    co_await Route(w, entry, "/v1/embeddings", merged.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                   false, PickInput::NoPrompt(entry), capture, merged_res);
    Split(*batch, info.model, capture.status, capture.body);
    for (auto* it : batch->items) {
      if (it == &item) continue;
      net::post(it->ex, [it] {
        it->done = true;
        it->wake->cancel();
      });
    }
  }
  res.status = item.status;
  res.usage = item.usage;
  res.Commit();
  co_await sink.Whole(item.status, "application/json", item.body, {});
}

}  // namespace drover::gateway
