#include "drover/gateway/routing.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace drover::gateway {
namespace {
const std::string kEveryTenant;
}  // namespace

uint64_t Hash64(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a, then a finalizer
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

std::string RouteKey(std::string_view tenant, std::string_view model) {
  std::string k;
  k.reserve(tenant.size() + model.size() + 1);
  k.append(tenant).push_back('\0');
  k.append(model);
  return k;
}

const ModelEntry* FindRoute(const RouteTable& table, const std::string& tenant, bool admin, const std::string& model) {
  for (const std::string* t : {&tenant, &kEveryTenant}) {
    auto it = table.models.find(RouteKey(*t, model));
    if (it != table.models.end()) return &it->second;
  }
  if (!admin) return nullptr;
  auto of = table.tenants_of.find(model);
  if (of == table.tenants_of.end() || of->second.size() != 1) return nullptr;
  auto it = table.models.find(RouteKey(of->second.front(), model));
  return it != table.models.end() ? &it->second : nullptr;
}

namespace {
uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  h ^= h >> 31;
  h *= 0x7fb5d329728ea185ULL;
  h ^= h >> 27;
  return h;
}
int64_t Score(const Replica& r) {
  return r.outstanding.load(std::memory_order_relaxed) + r.engine_load.load(std::memory_order_relaxed);
}
}  // namespace

Replica* PickReplica(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried,
                     uint64_t affinity_key, FastRng& rng) {
  // Candidates without allocating for the common case of nothing tried.
  Replica* small[16];
  std::vector<Replica*> big;
  Replica** cand = small;
  size_t n = 0;
  if (replicas.size() > 16) {
    big.resize(replicas.size());
    cand = big.data();
  }
  for (const auto& r : replicas) {
    if (std::find(tried.begin(), tried.end(), r.get()) == tried.end()) cand[n++] = r.get();
  }
  if (n == 0) return nullptr;
  if (n == 1) return cand[0];
  if (affinity_key != 0) {
    Replica* best = nullptr;
    uint64_t best_w = 0;
    int64_t least = INT64_MAX;
    for (size_t i = 0; i < n; ++i) {
      uint64_t w = Mix(affinity_key, cand[i]->id_hash);
      if (best == nullptr || w > best_w) {
        best = cand[i];
        best_w = w;
      }
      least = std::min(least, Score(*cand[i]));
    }
    if (Score(*best) <= 2 * least + 2) return best;
  }
  size_t a = rng.Next() % n;
  size_t b = rng.Next() % (n - 1);
  if (b >= a) ++b;
  return Score(*cand[b]) < Score(*cand[a]) ? cand[b] : cand[a];
}

UsageCell* Meter::Cell(const std::string& tenant, const std::string& model, const std::string& key) {
  MutexLock lock(&mu_);
  auto& c = cells_[{tenant, model, key}];
  if (!c) {
    c = std::make_unique<UsageCell>();
    c->latency = latency_->With({{"model", model}, {"tenant", tenant}});
    c->first_token = first_token_->With({{"model", model}, {"tenant", tenant}});
  }
  return c.get();
}

namespace {

// The q-quantile of a histogram in milliseconds, interpolated within its
// bucket as Prometheus' histogram_quantile does; -1 when it has no
// observation (or only beyond the last bound).
double QuantileMs(const metrics::Histogram::Snapshot& h, const std::vector<double>& bounds, double q) {
  if (h.count == 0) return -1;
  const double rank = q * static_cast<double>(h.count);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (static_cast<double>(h.cumulative[i]) < rank) continue;
    const double lo = i == 0 ? 0.0 : bounds[i - 1];
    const double below = i == 0 ? 0.0 : static_cast<double>(h.cumulative[i - 1]);
    const double in = static_cast<double>(h.cumulative[i]) - below;
    return 1000.0 * (lo + (bounds[i] - lo) * (in > 0 ? (rank - below) / in : 1.0));
  }
  return -1;
}

}  // namespace

std::vector<UsageRow> Meter::Rows() const {
  std::vector<UsageRow> rows;
  MutexLock lock(&mu_);
  for (const auto& [k, c] : cells_) {
    UsageRow r{std::get<0>(k),
               std::get<1>(k),
               std::get<2>(k),
               c->requests.load(),
               c->errors.load(),
               c->prompt_tokens.load(),
               c->completion_tokens.load()};
    // Since the gateway started, of the tenant's requests for the model (all its keys).
    if (c->latency != nullptr && latency_ != nullptr) {
      const metrics::Histogram::Snapshot h = c->latency->Read();
      r.latency_p50_ms = QuantileMs(h, latency_->bounds(), 0.5);
      r.latency_p99_ms = QuantileMs(h, latency_->bounds(), 0.99);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string Meter::Json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const UsageRow& r : Rows()) {
    nlohmann::json row = {{"tenant", r.tenant},
                          {"model", r.model},
                          {"key", r.key},
                          {"requests", r.requests},
                          {"errors", r.errors},
                          {"prompt_tokens", r.prompt_tokens},
                          {"completion_tokens", r.completion_tokens}};
    if (r.latency_p50_ms >= 0) row["latency_p50_ms"] = r.latency_p50_ms;
    if (r.latency_p99_ms >= 0) row["latency_p99_ms"] = r.latency_p99_ms;
    rows.push_back(std::move(row));
  }
  return nlohmann::json{{"usage", std::move(rows)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Meter::Collect(metrics::Exposition& out) const {
  auto req = out.Counter("drover_gateway_requests_total", "Requests proxied, by tenant, model and key.");
  auto err =
      out.Counter("drover_gateway_errors_total", "Requests that ended in an error (status >= 400 or a broken stream).");
  auto pt = out.Counter("drover_gateway_prompt_tokens_total", "Prompt tokens the engines reported.");
  auto ct = out.Counter("drover_gateway_completion_tokens_total", "Completion tokens the engines reported.");
  MutexLock lock(&mu_);
  for (const auto& [k, c] : cells_) {
    metrics::Labels l = {{"key", std::get<2>(k)}, {"model", std::get<1>(k)}, {"tenant", std::get<0>(k)}};
    req.Add(l, static_cast<double>(c->requests.load()));
    err.Add(l, static_cast<double>(c->errors.load()));
    pt.Add(l, static_cast<double>(c->prompt_tokens.load()));
    ct.Add(l, static_cast<double>(c->completion_tokens.load()));
  }
}

}  // namespace drover::gateway
