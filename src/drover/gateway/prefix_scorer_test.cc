// Prefix-aware, load-aware replica choice (issue 44): the prompt's block
// hashes, each replica's bounded memory of them, and the choice itself;
// then the gateway routing a growing conversation to the replica that holds
// it, against real drover-test-engine processes.

#include "drover/gateway/prefix_scorer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drover/gateway/gateway.h"
#include "drover/gateway/routing.h"
#include "gateway/engine_process.h"

namespace drover::gateway {
namespace {

using json = nlohmann::json;
using testing::ChildProcess;
using testing::Http;
using testing::SumSamples;

// A text of `n` bytes (no whitespace) that differs from every other seed's
// in every block.
std::string Text(size_t n, int seed) {
  std::string s;
  while (s.size() < n) s += "w" + std::to_string(seed) + "-" + std::to_string(s.size()) + ".";
  s.resize(n);
  return s;
}

// `n` words (the test engine counts words as tokens), unlike every other seed's.
std::string Sentence(size_t n, int seed) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += "s" + std::to_string(seed) + "w" + std::to_string(i) + " ";
  return s;
}

std::string ChatBody(const std::vector<std::string>& turns) {
  json msgs = json::array();
  for (size_t i = 0; i < turns.size(); ++i) {
    msgs.push_back({{"role", i == 0 ? "system" : (i % 2 == 1 ? "user" : "assistant")}, {"content", turns[i]}});
  }
  return json{{"model", "m"}, {"max_tokens", 4}, {"messages", msgs}}.dump();
}
std::string Prompt(const std::vector<std::string>& turns) { return std::string(PromptOf(ChatBody(turns))); }

TEST(PromptOf, FindsTheTopLevelMessagesOrPrompt) {
  EXPECT_EQ(PromptOf(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":1})"),
            R"([{"role":"user","content":"hi"}],"n":1})");
  EXPECT_EQ(PromptOf(R"({"model":"m", "prompt" : "once upon"})"), R"( "once upon"})");
  // A "messages" inside a string or a nested object is not the key.
  EXPECT_EQ(PromptOf(R"({"model":"messages","x":{"messages":1},"prompt":"p"})"), R"("p"})");
  EXPECT_EQ(PromptOf(R"({"model":"m","input":"x"})"), "");  // embeddings: none
  // A key past the first 64 KiB is not looked for.
  std::string late = R"({"model":"m","pad":")" + std::string(kMaxScanBytes, 'x') + R"(","messages":[]})";
  EXPECT_EQ(PromptOf(late), "");
}

TEST(PrefixChain, SharedPrefixesShareTheirLeadingHashes) {
  const std::string sys = Text(1000, 1);
  auto a = PrefixChain(sys + Text(500, 2), 7);
  auto b = PrefixChain(sys + Text(500, 3), 7);
  ASSERT_EQ(a.size(), 1500 / kBlockBytes);
  ASSERT_EQ(b.size(), a.size());
  size_t common = 0;
  while (common < a.size() && a[common] == b[common]) ++common;
  EXPECT_EQ(common, 1000 / kBlockBytes);  // the blocks wholly inside the system prompt
  // Another tenant's salt: not one hash in common.
  auto c = PrefixChain(sys + Text(500, 2), 8);
  for (uint64_t h : c) EXPECT_EQ(std::count(a.begin(), a.end(), h), 0);
  // A tail shorter than a block is not hashed.
  EXPECT_TRUE(PrefixChain(Text(kBlockBytes - 1, 1), 7).empty());
}

TEST(PrefixChain, WhitespaceOutsideStringsIsIgnored) {
  const std::string content = Text(600, 4);
  const std::string compact = R"([{"role":"system","content":")" + content + R"("}])";
  const std::string spaced = "[ {\n  \"role\" : \"system\",\n  \"content\": \"" + content + "\" } ]";
  EXPECT_EQ(PrefixChain(compact, 1), PrefixChain(spaced, 1));
  // Inside a string it counts, escaped quotes included.
  EXPECT_NE(PrefixChain(R"(["a \" b)" + content + "\"]", 1), PrefixChain(R"(["a \"b)" + content + "\"]", 1));
}

TEST(PrefixChain, IsBoundedForHugePrompts) {
  // The body limit's worth of prompt: still at most kMaxBlocks hashes.
  EXPECT_EQ(PrefixChain(Text(4 << 20, 5), 1).size(), kMaxBlocks);
  // Megabytes of whitespace are not walked to their end, and hash nothing.
  std::string blank(4 << 20, ' ');
  EXPECT_TRUE(PrefixChain(blank, 1).empty());
  // A huge message array: the same bound.
  std::string many = "[";
  for (int i = 0; i < 100000; ++i) many += R"({"role":"user","content":"x"},)";
  many += "{}]";
  EXPECT_EQ(PrefixChain(many, 1).size(), kMaxBlocks);
}

TEST(PrefixCache, MatchesTheLongestHeldPrefixOfItsTenant) {
  PrefixCache cache;
  auto chain = PrefixChain(Text(1280, 1), 1);  // 10 blocks
  EXPECT_EQ(cache.Match(1, chain), 0u);
  cache.Insert(1, 100, {chain.begin(), chain.begin() + 6});
  EXPECT_EQ(cache.Match(1, chain), 6u);
  EXPECT_EQ(cache.Match(2, chain), 0u);  // the same hashes under another tenant's salt: none
  cache.Insert(1, 100, chain);
  EXPECT_EQ(cache.Match(1, chain), 10u);
  EXPECT_EQ(cache.size(), 10u);
  EXPECT_EQ(cache.held_by(100), 10u);
  cache.Erase(2, chain);  // another tenant's: nothing of its own to forget
  EXPECT_EQ(cache.size(), 10u);
  cache.Erase(1, chain);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.held_by(100), 0u);
  EXPECT_EQ(cache.Match(1, chain), 0u);
  cache.Insert(1, 100, chain);  // the freed slots serve again
  EXPECT_EQ(cache.Match(1, chain), 10u);
}

TEST(PrefixCache, EvictsTheLeastRecentlyUsedAndKeepsAChainsFirstBlocksLongest) {
  PrefixCache cache(/*capacity=*/8, /*owner_share=*/8);
  auto a = PrefixChain(Text(4 * kBlockBytes, 1), 1);
  auto b = PrefixChain(Text(4 * kBlockBytes, 2), 1);
  auto c = PrefixChain(Text(2 * kBlockBytes, 3), 1);
  cache.Insert(1, 1, a);
  cache.Insert(1, 1, b);
  EXPECT_EQ(cache.size(), 8u);
  cache.Match(1, a);  // a match is no use: only what is sent counts
  cache.Insert(1, 1, c);  // a is the oldest: its last two blocks go first
  EXPECT_EQ(cache.size(), 8u);
  EXPECT_EQ(cache.Match(1, a), 2u);
  EXPECT_EQ(cache.Match(1, b), 4u);
  EXPECT_EQ(cache.Match(1, c), 2u);
  cache.Insert(1, 1, a);  // sent again: a whole again, b loses its tail
  EXPECT_EQ(cache.Match(1, a), 4u);
  EXPECT_EQ(cache.Match(1, b), 2u);
}

TEST(PrefixCache, OneClientFloodingEvictsOnlyItsOwn) {
  PrefixCache cache(/*capacity=*/100, /*owner_share=*/25);
  std::vector<std::vector<uint64_t>> honest;
  for (int i = 0; i < 3; ++i) {
    honest.push_back(PrefixChain(Text(20 * kBlockBytes, i), 1));
    cache.Insert(1, /*owner=*/10 + i, honest.back());
  }
  // An attacker's crafted prompts, every one new, far more than the cache.
  for (int i = 0; i < 200; ++i) cache.Insert(1, /*owner=*/666, PrefixChain(Text(10 * kBlockBytes, 1000 + i), 1));
  EXPECT_EQ(cache.held_by(666), 25u);
  EXPECT_LE(cache.size(), 100u);
  for (const auto& h : honest) EXPECT_EQ(cache.Match(1, h), h.size());
  // Another tenant's flood is bounded the same way (its key is its own owner).
  for (int i = 0; i < 200; ++i) cache.Insert(2, /*owner=*/777, PrefixChain(Text(10 * kBlockBytes, 5000 + i), 2));
  EXPECT_LE(cache.size(), 100u);
  EXPECT_EQ(cache.held_by(777), 25u);
  // The two floods took 50; of the honest 60 at least 50 stay.
  size_t kept = 0;
  for (const auto& h : honest) kept += cache.Match(1, h);
  EXPECT_GE(kept, 50u);
}

std::shared_ptr<Replica> MakeReplica(const std::string& id) {
  auto r = std::make_shared<Replica>();
  r->id = id;
  r->id_hash = Hash64(id);
  return r;
}

class ChooseReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b", "c", "d"}) rs_.push_back(MakeReplica(id));
  }
  // The weights of routing.h's example (prefix 1, load 1, bound 4), which
  // the arithmetic below follows.
  PickInput Input(const std::string& prompt, uint64_t salt = 1) {
    PickInput in;
    in.policy.prefix_weight = 1;
    in.policy.load_weight = 1;
    in.policy.load_bound = 4;
    in.salt = salt;
    in.owner = 1;
    in.chain = PrefixChain(prompt, salt);
    in.round_robin = &rr_;
    return in;
  }
  // Routes as the gateway does: picks, then remembers the chain there.
  Replica* Send(const PickInput& in) {
    Pick p = ChooseReplica(rs_, {}, in, rng_);
    if (p.replica != nullptr && !in.chain.empty()) p.replica->prefixes.Insert(in.salt, in.owner, in.chain);
    return p.replica;
  }
  std::vector<std::shared_ptr<Replica>> rs_;
  std::atomic<uint64_t> rr_{0};
  FastRng rng_{42};
};

TEST_F(ChooseReplicaTest, AGrowingConversationFollowsItsPrefix) {
  std::vector<std::string> turns = {Text(2000, 1), Text(300, 2)};
  Replica* first = Send(Input(Prompt(turns)));
  ASSERT_NE(first, nullptr);
  for (int turn = 0; turn < 10; ++turn) {
    turns.push_back(Text(200, 100 + turn));
    const PickInput in = Input(Prompt(turns));
    Pick p = ChooseReplica(rs_, {}, in, rng_);
    EXPECT_EQ(p.replica, first) << "turn " << turn;
    EXPECT_EQ(p.reason, PickReason::kPrefix);
    EXPECT_GT(p.hit_blocks, 0u);
    first->prefixes.Insert(in.salt, in.owner, in.chain);
  }
  // Another session with the same system prompt goes there too (all idle).
  EXPECT_EQ(ChooseReplica(rs_, {}, Input(Prompt({Text(2000, 1), Text(300, 77)})), rng_).replica, first);
  // Another tenant's identical conversation gains nothing from it.
  Pick other = ChooseReplica(rs_, {}, Input(Prompt(turns), /*salt=*/2), rng_);
  EXPECT_EQ(other.reason, PickReason::kLoad);
  EXPECT_EQ(other.hit_blocks, 0u);
}

TEST_F(ChooseReplicaTest, AReplicaOverTheLoadBoundIsNeverChosenForItsCache) {
  const std::string prompt = Text(4000, 1);
  Replica* home = Send(Input(prompt));
  home->outstanding = 5;  // bound 4 over the least (0)
  for (int i = 0; i < 50; ++i) {
    Pick p = ChooseReplica(rs_, {}, Input(prompt), rng_);
    EXPECT_NE(p.replica, home);
    EXPECT_EQ(p.reason, PickReason::kLoad);
  }
  home->outstanding = 4;  // at the bound: its cache still wins
  EXPECT_EQ(ChooseReplica(rs_, {}, Input(prompt), rng_).replica, home);
  home->outstanding = 0;
  home->engine_load = 9;  // the engine's own queue counts as load
  EXPECT_NE(ChooseReplica(rs_, {}, Input(prompt), rng_).replica, home);
  home->engine_load = 0;
  home->engine_kv_permille = kKvFullPermille;  // its KV cache is full
  EXPECT_NE(ChooseReplica(rs_, {}, Input(prompt), rng_).replica, home);
  // Prefix alone (for comparison) ignores load.
  PickInput only = Input(prompt);
  only.policy.kind = RoutingPolicy::Kind::kPrefix;
  home->outstanding = 100;
  EXPECT_EQ(ChooseReplica(rs_, {}, only, rng_).replica, home);
}

TEST_F(ChooseReplicaTest, LoadWeighsAgainstAPartialHit) {
  const std::string sys = Text(1280, 1);  // 10 blocks
  Replica* home = Send(Input(sys + Text(1280, 2)));
  // Half the new prompt is cached at home (score 0.5 - load/5 for a load
  // of 1..4; 0 elsewhere): home while its load is under 2.5.
  const PickInput in = Input(sys + Text(1280, 3));
  home->outstanding = 2;
  EXPECT_EQ(ChooseReplica(rs_, {}, in, rng_).replica, home);
  home->outstanding = 3;
  EXPECT_NE(ChooseReplica(rs_, {}, in, rng_).replica, home);
  // A heavier prefix weight keeps it home.
  PickInput heavy = in;
  heavy.policy.prefix_weight = 4;
  EXPECT_EQ(ChooseReplica(rs_, {}, heavy, rng_).replica, home);
}

TEST_F(ChooseReplicaTest, TheOtherPoliciesStaySelectable) {
  const std::string prompt = Text(4000, 1);
  Replica* home = Send(Input(prompt));
  PickInput rr = Input(prompt);
  rr.policy.kind = RoutingPolicy::Kind::kRoundRobin;
  std::map<Replica*, int> seen;
  for (int i = 0; i < 8; ++i) {
    Pick p = ChooseReplica(rs_, {}, rr, rng_);
    EXPECT_EQ(p.reason, PickReason::kRoundRobin);
    seen[p.replica]++;
  }
  EXPECT_EQ(seen.size(), 4u);
  for (const auto& [r, n] : seen) EXPECT_EQ(n, 2);
  // Least-load: the cache is not looked at.
  PickInput ll = Input(prompt);
  ll.policy.kind = RoutingPolicy::Kind::kLeastLoad;
  for (auto& r : rs_) r->outstanding = r.get() == home ? 3 : 1;
  for (int i = 0; i < 20; ++i) EXPECT_NE(ChooseReplica(rs_, {}, ll, rng_).replica, home);
  // An affinity key wins over the prefix.
  for (auto& r : rs_) r->outstanding = 0;
  PickInput aff = Input(prompt);
  aff.affinity_key = Hash64("session-1");
  Replica* by_key = ChooseReplica(rs_, {}, aff, rng_).replica;
  EXPECT_EQ(ChooseReplica(rs_, {}, aff, rng_).reason, PickReason::kAffinity);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ChooseReplica(rs_, {}, aff, rng_).replica, by_key);
  // Retries skip the tried replica, prefix or not.
  Pick retry = ChooseReplica(rs_, {home}, Input(prompt), rng_);
  EXPECT_NE(retry.replica, home);
  std::vector<Replica*> all;
  for (auto& r : rs_) all.push_back(r.get());
  EXPECT_EQ(ChooseReplica(rs_, all, Input(prompt), rng_).replica, nullptr);
}

TEST(RoutingKind, NamesRoundTrip) {
  for (auto k : {RoutingPolicy::Kind::kPrefixLoad, RoutingPolicy::Kind::kPrefix, RoutingPolicy::Kind::kLeastLoad,
                 RoutingPolicy::Kind::kAffinity, RoutingPolicy::Kind::kRoundRobin}) {
    RoutingPolicy::Kind back{};
    ASSERT_TRUE(ParseRoutingKind(RoutingKindName(k), &back));
    EXPECT_EQ(back, k);
  }
  RoutingPolicy::Kind k = RoutingPolicy::Kind::kRoundRobin;
  EXPECT_TRUE(ParseRoutingKind("", &k));
  EXPECT_EQ(k, RoutingPolicy::Kind::kPrefixLoad);
  EXPECT_FALSE(ParseRoutingKind("random", &k));
}

// --- the gateway, against test engines ---

Result<KeyInfo> Keys(std::string_view token) {
  if (token == "k-a") return KeyInfo{"id-a", "key a", "a", false, 0, 0, 0, 0};
  if (token == "k-b") return KeyInfo{"id-b", "key b", "b", false, 0, 0, 0, 0};
  if (token == "k-admin") return KeyInfo{"id-admin", "admin", "ops", true, 0, 0, 0, 0};
  return Unauthenticated("no such key");
}

// A line of `text` that holds every one of `parts`.
bool HasLine(const std::string& text, const std::vector<std::string>& parts) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return line.find(p) != std::string::npos; }))
      return true;
  }
  return false;
}

int64_t Served(const ChildProcess& e) {
  std::string m = Http(e.port(), "GET", "/metrics").body;
  size_t at = m.find("\ndrover_test_engine_requests_total ");
  return at == std::string::npos ? -1 : std::atoll(m.c_str() + at + 35);
}

class PrefixRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      engines_.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{TEST_ENGINE_BINARY, "--port", "0", "--model", "m", "--prefix-cache-tokens", "100000"}));
      ASSERT_GT(engines_.back()->port(), 0);
    }
    auto g = StartGateway({}, Keys, &registry_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gw_ = std::move(*g);
  }
  Route MakeRoute(RoutingPolicy::Kind kind) {
    Route r{"m", "dep-m", "", false, {}};
    for (size_t i = 0; i < engines_.size(); ++i) r.replicas.push_back({"j-" + std::to_string(i), engines_[i]->address()});
    r.routing.kind = kind;
    return r;
  }
  int Post(const std::string& body, const std::string& key = "k-a") {
    return Http(gw_->port(), "POST", "/v1/chat/completions", body, "Authorization: Bearer " + key + "\r\n").status;
  }
  std::vector<int64_t> ServedNow() {
    std::vector<int64_t> n;
    for (auto& e : engines_) n.push_back(Served(*e));
    return n;
  }
  // Posts `body`; the index of the replica that served it.
  size_t PostAndFindHome(const std::string& body) {
    auto before = ServedNow();
    EXPECT_EQ(Post(body), 200);
    auto after = ServedNow();
    size_t home = 0;
    while (home < after.size() && after[home] == before[home]) ++home;
    return home;
  }
  // How many replicas served requests between two readings, and the most one did.
  static std::pair<int, int64_t> Spread(const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
    int used = 0;
    int64_t most = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      used += after[i] > before[i] ? 1 : 0;
      most = std::max(most, after[i] - before[i]);
    }
    return {used, most};
  }

  metrics::Registry registry_;
  std::vector<std::unique_ptr<ChildProcess>> engines_;
  std::unique_ptr<Gateway> gw_;
};

TEST_F(PrefixRoutingTest, AConversationStaysWithTheReplicaThatHoldsItsPrefix) {
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kPrefixLoad)});  // the default
  std::vector<std::string> turns = {Sentence(400, 1), Sentence(30, 2)};  // ~3000 bytes of system prompt
  auto before = ServedNow();
  for (int turn = 0; turn < 8; ++turn) {
    ASSERT_EQ(Post(ChatBody(turns)), 200);
    turns.push_back("w" + std::to_string(turn) + " answer");
    turns.push_back(Sentence(20, 10 + turn));
  }
  auto [used, most] = Spread(before, ServedNow());
  EXPECT_EQ(used, 1);
  EXPECT_EQ(most, 8);
  // The metrics say why: 7 picks for the cache, and the expected hits.
  std::string m = Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n").body;
  EXPECT_TRUE(HasLine(m, {"drover_gateway_replica_picks_total{", "policy=\"prefix-load\"", "reason=\"prefix\"", "} 7"}))
      << m;
  // Each of the 7 held at least the system prompt's 23 blocks.
  EXPECT_GE(SumSamples(m, "drover_gateway_replica_prefix_hit_blocks_total{"), 7 * 23) << m;
  EXPECT_GT(SumSamples(m, "drover_gateway_replica_prefix_cache_blocks{"), 0) << m;
  // And the engine found them: after the first turn, all but each turn's
  // new words (and a part block) came from its cache.
  double queried = 0, hits = 0;
  for (auto& e : engines_) {
    std::string em = Http(e->port(), "GET", "/metrics").body;
    queried += SumSamples(em, "vllm:prefix_cache_queries_total");
    hits += SumSamples(em, "vllm:prefix_cache_hits_total");
  }
  EXPECT_GT(hits / queried, 0.7) << hits << " of " << queried;
}

TEST_F(PrefixRoutingTest, RoundRobinIsStillSelectable) {
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kRoundRobin)});
  auto before = ServedNow();
  const std::string body = ChatBody({Text(3000, 1), Text(200, 2)});
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Post(body), 200);
  auto [used, most] = Spread(before, ServedNow());
  EXPECT_EQ(used, 3);
  EXPECT_EQ(most, 2);
}

TEST_F(PrefixRoutingTest, AReplicaThatGoesTakesItsPrefixesWithIt) {
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kPrefixLoad)});
  const std::string body = ChatBody({Text(3000, 1), Text(200, 2)});
  ASSERT_EQ(Post(body), 200);
  const size_t home = PostAndFindHome(body);
  ASSERT_LT(home, engines_.size());
  // The replica leaves the routes: the prompt goes elsewhere, and is
  // remembered there from then on.
  Route r = MakeRoute(RoutingPolicy::Kind::kPrefixLoad);
  r.replicas.erase(r.replicas.begin() + static_cast<ptrdiff_t>(home));
  gw_->SetRoutes({r});
  auto before = ServedNow();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Post(body), 200);
  auto [used, most] = Spread(before, ServedNow());
  EXPECT_EQ(used, 1);
  EXPECT_EQ(most, 4);
  // It comes back as a new replica: nothing remembered, the prompt stays.
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kPrefixLoad)});
  auto again = ServedNow();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Post(body), 200);
  auto last = ServedNow();
  EXPECT_EQ(last[home], again[home]);
}

TEST_F(PrefixRoutingTest, AReplicaThatDiesIsLeftAfterOneRetry) {
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kPrefixLoad)});
  const std::string body = ChatBody({Sentence(400, 1), Sentence(30, 2)});
  const size_t home = PostAndFindHome(body);
  ASSERT_LT(home, engines_.size());
  engines_[home]->Kill();  // still in the routes: the control plane has not noticed yet
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Post(body), 200);
  // One retry: the dead replica lost its claim to the prefix with it.
  std::string m = Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n").body;
  EXPECT_EQ(SumSamples(m, "drover_gateway_upstream_retries_total "), 1) << m;
}

TEST_F(PrefixRoutingTest, AHugePromptIsHashedWithinItsBound) {
  gw_->SetRoutes({MakeRoute(RoutingPolicy::Kind::kPrefixLoad)});
  // 100,000 messages, 3 MiB: under the body limit, far over the hash bound.
  json msgs = json::array();
  for (int i = 0; i < 100000; ++i) msgs.push_back({{"role", "user"}, {"content", "m" + std::to_string(i)}});
  const std::string body = json{{"model", "m"}, {"max_tokens", 1}, {"messages", msgs}}.dump();
  ASSERT_LT(body.size(), size_t{4} << 20);
  ASSERT_EQ(Post(body), 200);
  ASSERT_EQ(Post(body), 200);
  std::string m = Http(gw_->port(), "GET", "/metrics", {}, "Authorization: Bearer k-admin\r\n").body;
  EXPECT_EQ(SumSamples(m, "drover_gateway_replica_prefix_blocks_total{"), 2 * kMaxBlocks) << m;
  EXPECT_EQ(SumSamples(m, "drover_gateway_replica_prefix_hit_blocks_total{"), kMaxBlocks) << m;  // the second: all of it
}

}  // namespace
}  // namespace drover::gateway
