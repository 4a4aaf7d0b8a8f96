#pragma once
// The Store contract: what every Store implementation must do, as tests.
//
// An implementation supplies a StoreFactory and instantiates the suite once,
// in exactly one test source of its binary (this header defines the tests):
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
//                            ::testing::Values(StoreContractParam{"Sqlite", &MakeSqliteFactory}),
//                            StoreContractParamName);
//
// The suite is in two headers: this one (the fixture; put, get, delete,
// range, transactions) and store_contract_watch.h (watches, leases, input
// limits, concurrency, durability). Include both.
//
// The tests assume nothing about absolute revisions (etcd starts at 1, the
// SQLite store at 0), only about how they move. Leases run on the ManualClock
// the fixture passes to Open. Watch tests wait on a condition variable with a
// generous timeout, never sleep.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store::contract {

// Opens the one store of one test and owns what backs it (a temp dir, a key
// namespace); destroying the factory cleans that up.
class StoreFactory {
 public:
  virtual ~StoreFactory() = default;
  // The first call opens an empty store; later calls, made after the previous
  // store was destroyed, open the same data again, as a restart would.
  virtual Result<std::unique_ptr<Store>> Open(Clock* clock) = 0;
  // Whether leases end by the Clock given to Open. A store whose leases are
  // timed elsewhere (an etcd server) says false, and the tests that end
  // leases by advancing the ManualClock skip that part.
  virtual bool LeasesFollowTheClock() const { return true; }
};

struct StoreContractParam {
  std::string name;  // the test name suffix: letters, digits and '_' only
  std::function<std::unique_ptr<StoreFactory>()> make_factory;
};

inline std::string StoreContractParamName(const ::testing::TestParamInfo<StoreContractParam>& info) {
  return info.param.name;
}
inline void PrintTo(const StoreContractParam& param, std::ostream* os) { *os << param.name; }

// "put a=1" / "delete a": events in a form that reads well in a failure.
inline std::string Describe(const Event& event) {
  return event.type == Event::Type::kPut ? "put " + event.kv.key + "=" + event.kv.value : "delete " + event.kv.key;
}
inline std::vector<std::string> Describe(const std::vector<Event>& batch) {
  std::vector<std::string> out;
  for (const Event& event : batch) out.push_back(Describe(event));
  return out;
}

// Collects the batches of one watch. Thread-safe. Declare it before the
// WatchHandle that feeds it, so that the handle goes first.
class WatchRecorder {
 public:
  WatchCallback Callback() {
    return [this](const std::vector<Event>& batch) {
      std::lock_guard lock(mu_);
      batches_.push_back(batch);
      cv_.notify_all();
    };
  }
  // Waits (10 s at most) until `n` batches arrived; returns all so far.
  std::vector<std::vector<Event>> WaitFor(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return batches_.size() >= n; });
    return batches_;
  }
  size_t Count() {
    std::lock_guard lock(mu_);
    return batches_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Event>> batches_;
};

// The revision of a batch; every event in it must carry the same one.
inline int64_t RevisionOf(const std::vector<Event>& batch) {
  EXPECT_FALSE(batch.empty());
  for (const Event& event : batch) EXPECT_EQ(event.kv.mod_revision, batch.front().kv.mod_revision);
  return batch.empty() ? -1 : batch.front().kv.mod_revision;
}

class StoreContractTest : public ::testing::TestWithParam<StoreContractParam> {
 protected:
  void SetUp() override {
    factory_ = GetParam().make_factory();
    ASSERT_NO_FATAL_FAILURE(Reopen());
  }
  void TearDown() override {
    store_.reset();
    factory_.reset();
  }

  void Reopen() {
    store_.reset();
    Result<std::unique_ptr<Store>> opened = factory_->Open(&clock_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
  }

  Store& store() { return *store_; }

  int64_t Rev() {
    Result<int64_t> rev = store_->CurrentRevision();
    EXPECT_TRUE(rev.ok()) << rev.status().ToString();
    return rev.ok() ? *rev : -1;
  }
  int64_t MustPut(const std::string& key, const std::string& value, LeaseId lease = 0) {
    Result<int64_t> rev = store_->Put(key, value, lease);
    EXPECT_TRUE(rev.ok()) << "put " << key << ": " << rev.status().ToString();
    return rev.ok() ? *rev : -1;
  }
  // The key's state, or a KeyValue with version 0 when missing.
  KeyValue MustGet(const std::string& key) {
    Result<std::optional<KeyValue>> kv = store_->Get(key);
    EXPECT_TRUE(kv.ok()) << "get " << key << ": " << kv.status().ToString();
    return kv.ok() && kv->has_value() ? **kv : KeyValue{};
  }
  std::vector<std::string> Keys(const std::string& prefix, int64_t limit = 0) {
    Result<RangeResult> range = store_->Range(prefix, limit);
    EXPECT_TRUE(range.ok()) << range.status().ToString();
    std::vector<std::string> keys;
    if (range.ok()) {
      for (const KeyValue& kv : range->kvs) keys.push_back(kv.key);
    }
    return keys;
  }
  bool Holds(const Compare& compare) {
    Result<TxnResult> result = store_->Txn({compare}, {}, {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() && result->succeeded;
  }
  bool LeasesFollowTheClock() const { return factory_->LeasesFollowTheClock(); }
  std::unique_ptr<WatchHandle> MustWatch(const std::string& prefix, int64_t start, WatchRecorder& recorder) {
    Result<std::unique_ptr<WatchHandle>> handle = store_->Watch(prefix, start, recorder.Callback());
    EXPECT_TRUE(handle.ok()) << handle.status().ToString();
    return handle.ok() ? std::move(*handle) : nullptr;
  }

  ManualClock clock_;
  std::unique_ptr<StoreFactory> factory_;
  std::unique_ptr<Store> store_;
};

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// --- put, get, delete -------------------------------------------------------

TEST_P(StoreContractTest, PutAdvancesRevisionAndVersions) {
  int64_t start = Rev();
  int64_t r1 = MustPut("k", "v1");
  EXPECT_EQ(r1, start + 1);
  KeyValue kv = MustGet("k");
  EXPECT_EQ(kv.value, "v1");
  EXPECT_EQ(kv.create_revision, r1);
  EXPECT_EQ(kv.mod_revision, r1);
  EXPECT_EQ(kv.version, 1);
  EXPECT_EQ(kv.lease, 0);

  int64_t r2 = MustPut("k", "v2");
  EXPECT_EQ(r2, r1 + 1);
  kv = MustGet("k");
  EXPECT_EQ(kv.value, "v2");
  EXPECT_EQ(kv.create_revision, r1);  // kept by an update
  EXPECT_EQ(kv.mod_revision, r2);
  EXPECT_EQ(kv.version, 2);
  EXPECT_EQ(Rev(), r2);
}

TEST_P(StoreContractTest, GetMissingKeyIsEmpty) {
  Result<std::optional<KeyValue>> kv = store().Get("nope");
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(kv->has_value());
}

TEST_P(StoreContractTest, EmptyAndBinaryValuesRoundTrip) {
  MustPut("empty", "");
  std::string binary("\0\xff\x01zero", 7);
  MustPut("binary", binary);
  KeyValue empty = MustGet("empty");
  EXPECT_EQ(empty.version, 1);  // present, not missing
  EXPECT_EQ(empty.value, "");
  EXPECT_EQ(MustGet("binary").value, binary);
}

TEST_P(StoreContractTest, DeleteThenPutStartsANewLife) {
  int64_t r1 = MustPut("k", "a");
  MustPut("k", "b");
  Result<int64_t> deleted = store().Delete("k");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, r1 + 2);
  EXPECT_EQ(MustGet("k").version, 0);
  int64_t r4 = MustPut("k", "c");
  KeyValue kv = MustGet("k");
  EXPECT_EQ(kv.version, 1);
  EXPECT_EQ(kv.create_revision, r4);
}

TEST_P(StoreContractTest, DeletingAMissingKeyWritesNothing) {
  MustPut("k", "v");
  int64_t before = Rev();
  Result<int64_t> deleted = store().Delete("missing");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, before);
  EXPECT_EQ(Rev(), before);
}

TEST_P(StoreContractTest, DeletePrefixDeletesExactlyThePrefixInOneRevision) {
  for (const char* key : {"a", "a/", "a/1", "a/2/x", "a0", "b"}) MustPut(key, "v");
  int64_t before = Rev();
  Result<TxnResult> result = store().Txn({}, {Op::DeletePrefix("a/")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->revision, before + 1);
  EXPECT_THAT(Keys(""), ElementsAre("a", "a0", "b"));

  result = store().Txn({}, {Op::DeletePrefix("zzz")}, {});  // matches nothing: no revision
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->revision, before + 1);

  result = store().Txn({}, {Op::DeletePrefix("")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_THAT(Keys(""), IsEmpty());
}

// --- range --------------------------------------------------------------------

TEST_P(StoreContractTest, RangeIsSortedAndPrefixExact) {
  for (const char* key : {"b", "a/b", "a", "ab", "a/", "a/b/c"}) MustPut(key, "v");
  EXPECT_THAT(Keys(""), ElementsAre("a", "a/", "a/b", "a/b/c", "ab", "b"));
  EXPECT_THAT(Keys("a"), ElementsAre("a", "a/", "a/b", "a/b/c", "ab"));
  EXPECT_THAT(Keys("a/"), ElementsAre("a/", "a/b", "a/b/c"));
  EXPECT_THAT(Keys("a/b"), ElementsAre("a/b", "a/b/c"));
  EXPECT_THAT(Keys("a/b/c/"), IsEmpty());
  EXPECT_THAT(Keys("c"), IsEmpty());
}

TEST_P(StoreContractTest, RangeHandlesBinaryKeysAndFfBytes) {
  const std::string nul_key("x\0y", 3);
  for (const std::string& key :
       {std::string("\xff"), std::string("\xff\xff"), std::string("\xff\x00", 2), std::string("a\xff"),
        std::string("a\xff\x01"), std::string("b"), nul_key, std::string("x")}) {
    MustPut(key, "v");
  }
  // Bytes order as unsigned: 'a' < 'b' < 'x' < 0xff.
  EXPECT_THAT(Keys(""), ElementsAre("a\xff", "a\xff\x01", "b", "x", nul_key, std::string("\xff"),
                                    std::string("\xff\x00", 2), std::string("\xff\xff")));
  EXPECT_THAT(Keys("\xff"), ElementsAre(std::string("\xff"), std::string("\xff\x00", 2), std::string("\xff\xff")));
  EXPECT_THAT(Keys("\xff\xff"), ElementsAre(std::string("\xff\xff")));
  EXPECT_THAT(Keys("a\xff"), ElementsAre("a\xff", "a\xff\x01"));
  EXPECT_THAT(Keys(std::string("x\0", 2)), ElementsAre(nul_key));
  EXPECT_EQ(MustGet(nul_key).version, 1);
}

TEST_P(StoreContractTest, RangeLimitCutsShortAndSaysSo) {
  for (const char* key : {"k/5", "k/1", "k/3", "k/2", "k/4", "z"}) MustPut(key, "v");
  Result<RangeResult> range = store().Range("k/", 2);
  ASSERT_TRUE(range.ok());
  ASSERT_EQ(range->kvs.size(), 2u);
  EXPECT_EQ(range->kvs[0].key, "k/1");
  EXPECT_EQ(range->kvs[1].key, "k/2");
  EXPECT_TRUE(range->more);
  EXPECT_EQ(range->revision, Rev());

  range = store().Range("k/", 5);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->kvs.size(), 5u);
  EXPECT_FALSE(range->more);
  EXPECT_EQ(Keys("k/", 0).size(), 5u);  // 0: no limit
}

TEST_P(StoreContractTest, RangePagesFromAStartKeyWithoutLeavingThePrefix) {
  for (const char* key : {"k/5", "k/1", "k/3", "k/2", "k/4", "j/9", "z"}) MustPut(key, "v");
  std::vector<std::string> seen;
  std::string start;
  int pages = 0;
  while (true) {
    Result<RangeResult> page = store().Range("k/", 2, start);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    for (const KeyValue& kv : page->kvs) seen.push_back(kv.key);
    if (!page->more) break;
    start = page->kvs.back().key + '\0';
  }
  EXPECT_THAT(seen, ElementsAre("k/1", "k/2", "k/3", "k/4", "k/5"));
  EXPECT_EQ(pages, 3);
  // A start before the prefix reads from the prefix; one past it reads nothing.
  Result<RangeResult> range = store().Range("k/", 0, "a");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->kvs.size(), 5u);
  range = store().Range("k/", 0, "k/3");
  ASSERT_TRUE(range.ok());
  ASSERT_EQ(range->kvs.size(), 3u);
  EXPECT_EQ(range->kvs[0].key, "k/3");
  range = store().Range("k/", 0, "y");
  ASSERT_TRUE(range.ok());
  EXPECT_TRUE(range->kvs.empty());
}

// --- transactions ---------------------------------------------------------------

TEST_P(StoreContractTest, CompareEveryTargetAndOp) {
  int64_t created = MustPut("k", "v2");
  int64_t modified = MustPut("k", "v2");  // version 2
  using T = Compare::Target;
  using O = Compare::Op;
  auto num = [](T target, O op, int64_t n) { return Compare{"k", target, op, n, {}}; };
  auto val = [](O op, std::string v) { return Compare{"k", T::kValue, op, 0, std::move(v)}; };

  EXPECT_TRUE(Holds(num(T::kVersion, O::kEqual, 2)));
  EXPECT_FALSE(Holds(num(T::kVersion, O::kNotEqual, 2)));
  EXPECT_TRUE(Holds(num(T::kVersion, O::kLess, 3)));
  EXPECT_FALSE(Holds(num(T::kVersion, O::kGreater, 2)));
  EXPECT_TRUE(Holds(num(T::kCreateRevision, O::kEqual, created)));
  EXPECT_TRUE(Holds(num(T::kCreateRevision, O::kLess, modified)));
  EXPECT_FALSE(Holds(num(T::kCreateRevision, O::kGreater, created)));
  EXPECT_TRUE(Holds(num(T::kModRevision, O::kEqual, modified)));
  EXPECT_TRUE(Holds(num(T::kModRevision, O::kNotEqual, created)));
  EXPECT_FALSE(Holds(num(T::kModRevision, O::kLess, modified)));
  EXPECT_TRUE(Holds(Compare::ModRevisionIs("k", modified)));
  EXPECT_TRUE(Holds(val(O::kEqual, "v2")));
  EXPECT_TRUE(Holds(Compare::ValueIs("k", "v2")));
  EXPECT_FALSE(Holds(val(O::kNotEqual, "v2")));
  EXPECT_TRUE(Holds(val(O::kLess, "v3")));
  EXPECT_TRUE(Holds(val(O::kGreater, "v10")));  // byte order, not numeric
  EXPECT_FALSE(Holds(val(O::kEqual, "v")));
  EXPECT_TRUE(Holds(Compare::Exists("k")));
  EXPECT_FALSE(Holds(Compare::Missing("k")));
}

TEST_P(StoreContractTest, CompareOnAMissingKey) {
  using T = Compare::Target;
  using O = Compare::Op;
  EXPECT_TRUE(Holds(Compare::Missing("m")));
  EXPECT_FALSE(Holds(Compare::Exists("m")));
  EXPECT_TRUE(Holds({"m", T::kCreateRevision, O::kEqual, 0, {}}));
  EXPECT_TRUE(Holds(Compare::ModRevisionIs("m", 0)));
  EXPECT_TRUE(Holds({"m", T::kModRevision, O::kLess, 1, {}}));
  // As in etcd: a value compare on a missing key fails whatever the op.
  EXPECT_FALSE(Holds(Compare::ValueIs("m", "")));
  EXPECT_FALSE(Holds({"m", T::kValue, O::kNotEqual, 0, "x"}));
  EXPECT_FALSE(Holds({"m", T::kValue, O::kGreater, 0, ""}));
}

TEST_P(StoreContractTest, AllComparesMustHold) {
  MustPut("a", "1");
  Result<TxnResult> result =
      store().Txn({Compare::ValueIs("a", "1"), Compare::Exists("b")}, {Op::Put("x", "yes")}, {Op::Put("x", "no")});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(MustGet("x").value, "no");
}

TEST_P(StoreContractTest, FailureBranchRunsItsOps) {
  MustPut("other", "o");
  int64_t before = Rev();
  Result<TxnResult> result =
      store().Txn({Compare::Exists("nope")}, {Op::Put("a", "1")}, {Op::Put("b", "2"), Op::Get("other"), Op::Get("a")});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(result->revision, before + 1);
  EXPECT_EQ(MustGet("a").version, 0);
  EXPECT_EQ(MustGet("b").value, "2");
  ASSERT_EQ(result->gets.size(), 2u);
  ASSERT_TRUE(result->gets[0].has_value());
  EXPECT_EQ(result->gets[0]->value, "o");
  EXPECT_FALSE(result->gets[1].has_value());
}

TEST_P(StoreContractTest, GetsInATxnSeeEarlierOpsInOrder) {
  int64_t before = Rev();
  Result<TxnResult> result =
      store().Txn({Compare::Missing("x")}, {Op::Get("x"), Op::Put("x", "1"), Op::Get("x"), Op::Get("missing")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->succeeded);
  ASSERT_EQ(result->gets.size(), 3u);
  EXPECT_FALSE(result->gets[0].has_value());
  ASSERT_TRUE(result->gets[1].has_value());
  EXPECT_EQ(result->gets[1]->value, "1");
  EXPECT_EQ(result->gets[1]->mod_revision, before + 1);
  EXPECT_EQ(result->gets[1]->version, 1);
  EXPECT_FALSE(result->gets[2].has_value());
}

TEST_P(StoreContractTest, FailedCompareWritesNothing) {
  MustPut("k", "v");
  int64_t before = Rev();
  Result<TxnResult> result = store().Txn({Compare::ValueIs("k", "wrong")}, {Op::Put("a", "1"), Op::Delete("k")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->succeeded);
  EXPECT_EQ(result->revision, before);
  EXPECT_EQ(Rev(), before);
  EXPECT_EQ(MustGet("a").version, 0);
  EXPECT_EQ(MustGet("k").value, "v");
}

TEST_P(StoreContractTest, TxnThatWritesNothingKeepsTheRevision) {
  MustPut("k", "v");
  int64_t before = Rev();
  Result<TxnResult> result =
      store().Txn({Compare::Exists("k")}, {Op::Get("k"), Op::Delete("missing"), Op::DeletePrefix("none/")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->succeeded);
  EXPECT_EQ(result->revision, before);
  EXPECT_EQ(Rev(), before);
}

TEST_P(StoreContractTest, AllWritesOfATxnShareOneRevision) {
  MustPut("c", "gone soon");
  int64_t before = Rev();
  WatchRecorder recorder;
  auto handle = MustWatch("", 0, recorder);
  Result<TxnResult> result = store().Txn({}, {Op::Put("a", "1"), Op::Put("b", "2"), Op::Delete("c")}, {});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->revision, before + 1);
  EXPECT_EQ(MustGet("a").mod_revision, before + 1);
  EXPECT_EQ(MustGet("b").mod_revision, before + 1);
  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put a=1", "put b=2", "delete c"));
  EXPECT_EQ(RevisionOf(batches[0]), before + 1);
}

}  // namespace drover::store::contract
