#include "drover/store/etcd/etcd_store.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "drover/store/etcd/etcd_test_env.h"
#include "store_contract.h"
#include "store_contract_watch.h"
#include "support/etcd_cluster.h"

namespace drover::store {

// One etcd for the whole binary (leader_test.cc uses it too); each test
// gets a namespace of its own.
testing::EtcdCluster* SharedEtcd() {
  static std::unique_ptr<testing::EtcdCluster> cluster = testing::EtcdCluster::Start(1);
  return cluster.get();
}

std::string FreshPrefix() {
  static std::atomic<int> next{0};
  return "test-" + std::to_string(getpid()) + "-" + std::to_string(next++) + "/";
}

Result<std::unique_ptr<Store>> OpenShared(const std::string& prefix, EtcdOptions options) {
  testing::EtcdCluster* etcd = SharedEtcd();
  if (etcd == nullptr) return Unavailable("no etcd");
  options.endpoints = etcd->endpoints();
  options.key_prefix = prefix;
  return OpenEtcdStore(options);
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class EtcdFactory final : public contract::StoreFactory {
 public:
  // A reopen is a new client of the same etcd and namespace (the etcd
  // process itself keeps running, as it would through a server's restart).
  Result<std::unique_ptr<Store>> Open(Clock*) override { return OpenShared(prefix_); }
  bool LeasesFollowTheClock() const override { return false; }

 private:
  const std::string prefix_ = FreshPrefix();
};

std::unique_ptr<contract::StoreFactory> MakeEtcdFactory() { return std::make_unique<EtcdFactory>(); }

std::unique_ptr<Store> MustOpen(const std::string& prefix, EtcdOptions options = {}) {
  auto store = OpenShared(prefix, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

std::vector<std::string> Keys(Store& store, const std::string& prefix = "") {
  std::vector<std::string> keys;
  auto range = store.Range(prefix);
  EXPECT_TRUE(range.ok()) << range.status().ToString();
  if (range.ok()) {
    for (const KeyValue& kv : range->kvs) keys.push_back(kv.key);
  }
  return keys;
}

}  // namespace

namespace contract {
INSTANTIATE_TEST_SUITE_P(Etcd, StoreContractTest, ::testing::Values(StoreContractParam{"Etcd", &MakeEtcdFactory}),
                         StoreContractParamName);
}  // namespace contract

TEST(EtcdStoreTest, NamespacesDoNotSeeEachOther) {
  auto a = MustOpen(FreshPrefix());
  auto b = MustOpen(FreshPrefix());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Put("k", "from a").ok());
  ASSERT_TRUE(b->Put("k", "from b").ok());
  ASSERT_TRUE(b->Put("only-b", "x").ok());
  EXPECT_EQ((*a->Get("k"))->value, "from a");
  EXPECT_THAT(Keys(*a), ElementsAre("k"));
  // Deleting "everything" in one namespace leaves the other's keys.
  ASSERT_TRUE(a->Txn({}, {Op::DeletePrefix("")}, {}).ok());
  EXPECT_TRUE(Keys(*a).empty());
  EXPECT_THAT(Keys(*b), ElementsAre("k", "only-b"));
}

TEST(EtcdStoreTest, WritesOfOneKeyInATransactionAreMergedLastOneWins) {
  auto store = MustOpen(FreshPrefix());
  ASSERT_TRUE(store);
  // As the control loop writes a job submitted and bound in one batch.
  auto r = store->Txn({}, {Op::Put("job", "pending"), Op::Put("other", "o"), Op::Put("job", "bound")}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  KeyValue job = **store->Get("job");
  EXPECT_EQ(job.value, "bound");
  EXPECT_EQ(job.version, 1);
  EXPECT_EQ(job.mod_revision, r->revision);

  r = store->Txn({}, {Op::Put("gone", "1"), Op::Delete("gone")}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(store->Get("gone")->has_value());

  // A read between two writes of its key cannot be expressed: refused,
  // nothing written.
  int64_t before = *store->CurrentRevision();
  r = store->Txn({}, {Op::Put("x", "1"), Op::Get("x"), Op::Put("x", "2")}, {});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(store->Get("x")->has_value());
  EXPECT_EQ(*store->CurrentRevision(), before);
}

TEST(EtcdStoreTest, TransactionsBeyondEtcdsLimitsAreRefusedBeforeTheyAreSent) {
  EtcdOptions limits;
  limits.max_txn_ops = 4;
  limits.max_request_bytes = 1024;
  auto store = MustOpen(FreshPrefix(), limits);
  ASSERT_TRUE(store);
  std::vector<Op> five;
  for (int i = 0; i < 5; ++i) five.push_back(Op::Put("k" + std::to_string(i), "v"));
  auto r = store->Txn({}, five, {});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("--max-txn-ops"));
  r = store->Txn({}, {Op::Put("big", std::string(2048, 'v'))}, {});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("--max-request-bytes"));
  EXPECT_TRUE(Keys(*store).empty());
  // etcd's own default limit (128 operations) holds too: the store did not
  // merely trust its options.
  std::vector<Op> many;
  for (int i = 0; i < 129; ++i) many.push_back(Op::Put("m" + std::to_string(i), "v"));
  EtcdOptions trusting;
  trusting.max_txn_ops = 1000;
  auto unchecked = MustOpen(FreshPrefix(), trusting);
  ASSERT_TRUE(unchecked);
  r = unchecked->Txn({}, many, {});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_TRUE(Keys(*unchecked).empty());
}

TEST(EtcdStoreTest, UrlsParse) {
  auto o = ParseEtcdUrl("etcd://10.0.0.1:2379,etcd-b.example:2379/drover");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_THAT(o->endpoints, ElementsAre("10.0.0.1:2379", "etcd-b.example:2379"));
  EXPECT_EQ(o->key_prefix, "drover/");
  o = ParseEtcdUrl("etcd://[::1]:2379");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_THAT(o->endpoints, ElementsAre("[::1]:2379"));
  EXPECT_EQ(o->key_prefix, "drover/");
  o = ParseEtcdUrl("etcd://127.0.0.1:2379/");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->key_prefix, "");
  for (const char* bad :
       {"sqlite:/x", "etcd://", "etcd://host", "etcd://host:", "etcd://:2379", "etcd://a:1,,b:2", "etcd://a:12x"}) {
    EXPECT_EQ(ParseEtcdUrl(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(EtcdStoreTest, OpenFailsClearlyWhenNoEndpointAnswers) {
  EtcdOptions options;
  options.endpoints = {"127.0.0.1:1"};
  options.request_timeout = std::chrono::milliseconds(500);
  auto store = OpenEtcdStore(options);
  EXPECT_EQ(store.status().code(), Code::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr("127.0.0.1:1"));
}

// The contract's lease tests that move a ManualClock skip here: etcd times
// leases by its own clock. These wait for it instead (etcd raises a TTL to
// its minimum, 2 s with its default election timeout).
TEST(EtcdStoreTest, AnEndedLeaseDeletesItsKeysInOneWatchedRevision) {
  auto store = MustOpen(FreshPrefix());
  ASSERT_TRUE(store);
  Result<LeaseId> lease = store->GrantLease(std::chrono::seconds(1));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(store->Put("l/a", "1", *lease).ok());
  ASSERT_TRUE(store->Put("l/b", "2", *lease).ok());
  ASSERT_TRUE(store->Put("l/c", "kept").ok());
  contract::WatchRecorder recorder;
  auto watch = store->Watch("l/", 0, recorder.Callback());
  ASSERT_TRUE(watch.ok());
  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(contract::Describe(batches[0]), ElementsAre("delete l/a", "delete l/b"));
  EXPECT_THAT(Keys(*store), ElementsAre("l/c"));
  EXPECT_EQ(store->KeepAlive(*lease).code(), Code::kNotFound);
}

TEST(EtcdStoreTest, KeepAlivesHoldALeasePastItsTtl) {
  auto store = MustOpen(FreshPrefix());
  ASSERT_TRUE(store);
  Result<LeaseId> lease = store->GrantLease(std::chrono::seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(store->Put("k", "v", *lease).ok());
  contract::WatchRecorder recorder;
  auto watch = store->Watch("k", 0, recorder.Callback());
  ASSERT_TRUE(watch.ok());
  // Twice the TTL of etcd's time, kept alive every half second: the key stays.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(store->KeepAlive(*lease).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(recorder.Count(), 0u);
  EXPECT_EQ((*store->Get("k"))->value, "v");
  // Left alone, it ends.
  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(contract::Describe(batches[0]), ElementsAre("delete k"));
}

// Three members: the store keeps working, reads and writes and its watch,
// when the member it talks to dies.
TEST(EtcdStoreTest, SurvivesTheLossOfTheMemberItTalksTo) {
  auto cluster = testing::EtcdCluster::Start(3);
  ASSERT_TRUE(cluster);
  EtcdOptions options;
  options.endpoints = cluster->endpoints();
  options.request_timeout = std::chrono::milliseconds(2000);
  auto opened = OpenEtcdStore(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Store& store = **opened;
  contract::WatchRecorder recorder;
  auto watch = store.Watch("w/", 0, recorder.Callback());
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(store.Put("w/1", "before").ok());
  ASSERT_EQ(recorder.WaitFor(1).size(), 1u);

  cluster->Signal(0, SIGKILL);  // the first endpoint: the one in use
  // Writes fail while the store moves on from the dead member and, when
  // the dead member was etcd's leader, while the other two elect one (one
  // to two election timeouts, longer on a loaded machine). Each failure
  // says the write may be retried; one succeeds within a few elections.
  Result<int64_t> put = store.Put("w/2", "after");
  for (int attempt = 0; !put.ok() && attempt < 10; ++attempt) {
    ASSERT_TRUE(put.status().code() == Code::kUnavailable || put.status().code() == Code::kDeadlineExceeded)
        << put.status().ToString();
    put = store.Put("w/2", "after");
  }
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  auto got = store.Get("w/2");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "after");
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(contract::Describe(batches[1]), ElementsAre("put w/2=after"));
}

// A Drover leader keeps etcd's leader on another machine: a store whose
// first endpoint is etcd's leader hands the leadership to the next member,
// and afterwards is not the leader (and keeps working).
TEST(EtcdStoreTest, MovesEtcdsLeadershipAwayFromItsOwnMember) {
  auto cluster = testing::EtcdCluster::Start(3);
  ASSERT_TRUE(cluster);
  const std::vector<std::string>& all = cluster->endpoints();
  bool moved = false;
  for (size_t first = 0; first < all.size() && !moved; ++first) {
    EtcdOptions options;
    for (size_t i = 0; i < all.size(); ++i) options.endpoints.push_back(all[(first + i) % all.size()]);
    auto opened = OpenEtcdStore(options);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    // Writes go on while etcd's leadership moves; etcd drops proposals
    // meanwhile, and the store sends them again: none fails.
    std::atomic<bool> done{false};
    std::atomic<int> writes{0};
    std::string failed;
    std::thread writer([&] {
      while (!done.load()) {
        Result<int64_t> w = (*opened)->Put("during-move", std::to_string(writes.load()));
        if (!w.ok() && failed.empty()) failed = w.status().ToString();
        ++writes;
      }
    });
    Result<bool> r = MoveEtcdLeaderAway(opened->get());
    done = true;
    writer.join();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(failed, "") << "a write failed while etcd's leadership moved (" << writes.load() << " writes)";
    if (!*r) continue;  // this member follows
    moved = true;
    Result<bool> again = MoveEtcdLeaderAway(opened->get());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_FALSE(*again);
    Result<int64_t> put = (*opened)->Put("after-move", "ok");
    EXPECT_TRUE(put.ok()) << put.status().ToString();
  }
  EXPECT_TRUE(moved) << "no member was etcd's leader";
}

}  // namespace drover::store
