#pragma once
// Replica choice and per-(tenant, model, key) metering of the gateway
// (private).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "drover/common/metrics.h"
#include "drover/common/mutex.h"
#include "drover/gateway/gateway.h"
#include "drover/gateway/prefix_scorer.h"

namespace drover::gateway {

// One replica, shared by every route table that lists it (by job id,
// address and secret), so that its outstanding count survives SetRoutes.
struct Replica {
  std::string id;
  std::string address;                      // host:port
  std::string api_key;                      // Upstream::api_key; fixed once made
  std::string authorization;                // "Authorization: Bearer <api_key>\r\n", or empty
  boost::asio::ip::tcp::endpoint endpoint;  // resolved by SetRoutes
  std::atomic<int64_t> outstanding{0};      // requests in flight through this gateway
  std::atomic<int64_t> engine_load{0};      // the engine's own queue (scraped), 0 if unknown
  std::atomic<int64_t> engine_waiting{-1};  // of which waiting for a slot; -1 if unknown
  // The scraper's last reading of the engine's queue-time histogram (sum
  // in seconds, count); -1: none yet. Touched by the scraper only.
  double queue_sum_s = -1, queue_count = -1;
  uint64_t id_hash = 0;
  // The engine's KV-cache usage (vLLM kv_cache_usage_perc, scraped) in
  // permille; -1 if unknown.
  std::atomic<int64_t> engine_kv_permille{-1};
  // The prompt prefixes routed here recently (prefix_scorer.h); goes with
  // the replica when it leaves the routes.
  PrefixCache prefixes;
  std::atomic<int64_t> prefix_blocks{0};      // blocks of the prompts routed here
  std::atomic<int64_t> prefix_hit_blocks{0};  // of which the picker expected cached
  std::atomic<int64_t> picks[4] = {};         // by PickReason
};

struct ModelStats {
  std::atomic<uint64_t> round_robin{0};  // RoutingPolicy::kRoundRobin's next
  std::atomic<int64_t> outstanding{0};
  std::atomic<int64_t> waiting{0};
  std::atomic<int64_t> requests{0};  // since the last TakeLoad
  // The engines' queue time since the last TakeLoad (scraped): the sum in
  // microseconds and the requests it covers.
  std::atomic<int64_t> queue_us{0};
  std::atomic<int64_t> queued{0};
};

struct ModelEntry {
  Route route;  // replicas as given
  std::vector<std::shared_ptr<Replica>> replicas;
  std::shared_ptr<ModelStats> stats;
};

// An immutable routing table; swapped whole by SetRoutes. Served model
// names are per tenant (docs/security.md, "Names per tenant"): two tenants'
// `llama` are two routes, each with its own replicas and stats.
struct RouteTable {
  // By RouteKey(route.tenant, route.model); tenant "" for a route every
  // tenant may use.
  std::unordered_map<std::string, ModelEntry> models;
  // Served name -> the tenants with a route of that name ("" included).
  std::unordered_map<std::string, std::vector<std::string>> tenants_of;
};

// tenant '\0' model: no tenant or model name holds a NUL.
std::string RouteKey(std::string_view tenant, std::string_view model);

// The route a key of `tenant` reaches by `model`: its tenant's, else one
// every tenant may use; an admin key also reaches another tenant's when
// that tenant alone serves the name. Null when there is none: the caller
// answers 404 as for a name nobody serves, so another tenant's model of the
// name is neither seen nor told apart from a missing one.
const ModelEntry* FindRoute(const RouteTable& table, const std::string& tenant, bool admin, const std::string& model);

// Seeded xorshift64*: each io thread has its own.
class FastRng {
 public:
  explicit FastRng(uint64_t seed) : s_(seed ? seed : 1) {}
  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1DULL;
  }

 private:
  uint64_t s_;
};

uint64_t Hash64(std::string_view s);

// Picks a replica of `replicas` not in `tried`: with affinity_key != 0 the
// rendezvous-hash winner (the same replica for the same key while the set is
// unchanged) unless it has more than twice the least loaded one's load plus
// 2; otherwise two distinct random candidates and the one with the lower
// score (outstanding + engine_load), the first on a tie. nullptr if none.
//
// Example: outstanding {a:3, b:0, c:1}; the draws pick (a, c): c wins.
Replica* PickReplica(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried,
                     uint64_t affinity_key, FastRng& rng);

// A replica whose engine reports its KV cache this full (permille) is never
// chosen for its cache: a request there would evict or wait.
inline constexpr int64_t kKvFullPermille = 950;

// What a request brings to ChooseReplica.
struct PickInput {
  RoutingPolicy policy;
  uint64_t affinity_key = 0;      // Hash64 of "user" or x-session-id; 0: none
  uint64_t salt = 0;              // the tenant's (PrefixChain)
  uint64_t owner = 0;             // the client's (its key's) PrefixCache owner
  std::vector<uint64_t> chain;    // the prompt's PrefixChain; empty: no prompt
  std::atomic<uint64_t>* round_robin = nullptr;  // the route's (kRoundRobin)
  // A request without a prompt (embeddings) for `entry`.
  static PickInput NoPrompt(const ModelEntry& entry) {
    PickInput in;
    in.policy = entry.route.routing;
    in.round_robin = &entry.stats->round_robin;
    return in;
  }
};
// Why a replica was chosen (the label of drover_gateway_replica_picks_total).
enum class PickReason { kPrefix = 0, kLoad = 1, kAffinity = 2, kRoundRobin = 3 };
const char* PickReasonName(PickReason r);
struct Pick {
  Replica* replica = nullptr;  // null: every replica was tried
  PickReason reason = PickReason::kLoad;
  size_t hit_blocks = 0;       // of in.chain, the blocks it holds
  double score = 0;            // kPrefix: the winner's score
};

// A replica of `replicas` not in `tried`, by in.policy:
// - an affinity key (kAffinity, or any policy when the gateway's affinity
//   option set one): PickReplica's rendezvous rule;
// - kPrefixLoad with a chain: among the replicas whose load (outstanding +
//   engine_load) is at most the least loaded one's plus load_bound, and
//   whose KV cache is under kKvFullPermille, the one with the highest
//     prefix_weight * hit - load_weight * (load - least) / (load_bound + 1)
//   (hit: the fraction of the chain it holds; the lower load on a tie),
//   when that one holds a block at all;
// - kPrefix with a chain: the one holding the most blocks, the lower load
//   on a tie, whatever its load;
// - kRoundRobin: the next in order;
// - otherwise (and when no replica holds a block): power of two choices.
//
// Example (weights 1 and 1, bound 4): load {a:1, b:0, c:9}, c holds all 4 blocks, a holds 3:
// c is over the bound; a scores 0.75 - 1 * 1/5 = 0.55, b scores 0: a wins.
// With kPrefix, c wins.
Pick ChooseReplica(const std::vector<std::shared_ptr<Replica>>& replicas, const std::vector<Replica*>& tried,
                   const PickInput& in, FastRng& rng);

// Counters of one (tenant, model, key). Lock-free updates.
struct UsageCell {
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> completion_tokens{0};
  metrics::Histogram* latency = nullptr;      // per (tenant, model)
  metrics::Histogram* first_token = nullptr;  // per (tenant, model); streams only
};

// Usage per (tenant, model, key), for /metrics and UsageJson. Thread-safe:
// Cell() takes a mutex (callers cache the pointer, valid for the meter's
// life); the counters are atomics.
class Meter {
 public:
  Meter(metrics::HistogramFamily* latency, metrics::HistogramFamily* first_token)
      : latency_(latency), first_token_(first_token) {}
  UsageCell* Cell(const std::string& tenant, const std::string& model, const std::string& key);
  std::vector<UsageRow> Rows() const;
  std::string Json() const;  // Rows() as Gateway::UsageJson says
  void Collect(metrics::Exposition& out) const;

 private:
  metrics::HistogramFamily* latency_;
  metrics::HistogramFamily* first_token_;
  mutable Mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, std::unique_ptr<UsageCell>> cells_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::gateway
