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

bool ParseRoutingKind(std::string_view name, RoutingPolicy::Kind* kind) {
  using K = RoutingPolicy::Kind;
  static constexpr std::pair<std::string_view, K> kNames[] = {{"", K::kPrefixLoad},
                                                              {"prefix-load", K::kPrefixLoad},
                                                              {"prefix", K::kPrefix},
                                                              {"least-load", K::kLeastLoad},
                                                              {"affinity", K::kAffinity},
                                                              {"round-robin", K::kRoundRobin}};
  for (const auto& [n, k] : kNames) {
    if (n == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

const char* RoutingKindName(RoutingPolicy::Kind kind) {
  switch (kind) {
    case RoutingPolicy::Kind::kPrefixLoad: return "prefix-load";
    case RoutingPolicy::Kind::kPrefix: return "prefix";
    case RoutingPolicy::Kind::kLeastLoad: return "least-load";
    case RoutingPolicy::Kind::kAffinity: return "affinity";
    case RoutingPolicy::Kind::kRoundRobin: return "round-robin";
  }
  return "prefix-load";
}

const char* PickReasonName(PickReason r) {
  switch (r) {
    case PickReason::kPrefix: return "prefix";
    case PickReason::kLoad: return "load";
    case PickReason::kAffinity: return "affinity";
    case PickReason::kRoundRobin: return "round_robin";
  }
  return "load";
}

namespace {

// The replicas of `replicas` not in `tried`, without allocating for up to
// 16 of them.
class Candidates {
 public:
  Candidates(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried) {
    if (replicas.size() > std::size(small_)) {
      big_.resize(replicas.size());
      cand_ = big_.data();
    }
    for (const auto& r : replicas) {
      if (std::find(tried.begin(), tried.end(), r.get()) == tried.end()) cand_[n_++] = r.get();
    }
  }
  Candidates(const Candidates&) = delete;
  Candidates& operator=(const Candidates&) = delete;
  size_t size() const { return n_; }
  Replica* operator[](size_t i) const { return cand_[i]; }

 private:
  Replica* small_[16];
  std::vector<Replica*> big_;
  Replica** cand_ = small_;
  size_t n_ = 0;
};

// The rendezvous winner for `key` unless it has more than twice the least
// loaded one's load plus 2; null then.
Replica* ByAffinity(const Candidates& c, uint64_t key) {
  Replica* best = nullptr;
  uint64_t best_w = 0;
  int64_t least = INT64_MAX;
  for (size_t i = 0; i < c.size(); ++i) {
    uint64_t w = Mix(key, c[i]->id_hash);
    if (best == nullptr || w > best_w) {
      best = c[i];
      best_w = w;
    }
    least = std::min(least, Score(*c[i]));
  }
  return Score(*best) <= 2 * least + 2 ? best : nullptr;
}

Replica* PowerOfTwo(const Candidates& c, FastRng& rng) {
  if (c.size() == 1) return c[0];
  size_t a = rng.Next() % c.size();
  size_t b = rng.Next() % (c.size() - 1);
  if (b >= a) ++b;
  return Score(*c[b]) < Score(*c[a]) ? c[b] : c[a];
}

// ChooseReplica's prefix rules; a null replica when none holds a block.
Pick ByPrefix(const Candidates& c, const PickInput& in) {
  const RoutingPolicy& p = in.policy;
  const bool bounded = p.kind == RoutingPolicy::Kind::kPrefixLoad;
  int64_t least = INT64_MAX;
  for (size_t i = 0; i < c.size(); ++i) least = std::min(least, Score(*c[i]));
  const int64_t bound = std::max<int64_t>(p.load_bound, 0);
  const double chain = static_cast<double>(in.chain.size());
  Pick best;
  int64_t best_load = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    Replica* r = c[i];
    const int64_t load = Score(*r);
    // Never chosen for its cache: over the bound, or its KV cache full.
    if (bounded && (load - least > bound || r->engine_kv_permille.load(std::memory_order_relaxed) >= kKvFullPermille))
      continue;
    const size_t hit = r->prefixes.Match(in.salt, in.chain);
    const double s = bounded ? p.prefix_weight * static_cast<double>(hit) / chain -
                                   p.load_weight * static_cast<double>(load - least) / static_cast<double>(bound + 1)
                             : static_cast<double>(hit);
    if (best.replica == nullptr || s > best.score || (s == best.score && load < best_load)) {
      best.replica = r;
      best.score = s;
      best.hit_blocks = hit;
      best_load = load;
    }
  }
  if (best.hit_blocks == 0) return {};
  best.reason = PickReason::kPrefix;
  return best;
}

}  // namespace

Replica* PickReplica(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried,
                     uint64_t affinity_key, FastRng& rng) {
  Candidates c(replicas, tried);
  if (c.size() == 0) return nullptr;
  if (c.size() == 1) return c[0];
  if (affinity_key != 0) {
    if (Replica* r = ByAffinity(c, affinity_key)) return r;
  }
  return PowerOfTwo(c, rng);
}

Pick ChooseReplica(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried,
                   const PickInput& in, FastRng& rng) {
  using K = RoutingPolicy::Kind;
  Candidates c(replicas, tried);
  Pick pick;
  if (c.size() == 0) return pick;
  if (in.affinity_key != 0 && c.size() > 1) {
    if (Replica* r = ByAffinity(c, in.affinity_key)) return {r, PickReason::kAffinity};
  }
  const K kind = in.policy.kind;
  if ((kind == K::kPrefixLoad || kind == K::kPrefix) && !in.chain.empty()) {
    pick = ByPrefix(c, in);
    if (pick.replica != nullptr) return pick;
  }
  if (kind == K::kRoundRobin && in.round_robin != nullptr) {
    const uint64_t i = in.round_robin->fetch_add(1, std::memory_order_relaxed);
    return {c[i % c.size()], PickReason::kRoundRobin};
  }
  return {PowerOfTwo(c, rng), PickReason::kLoad};
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
