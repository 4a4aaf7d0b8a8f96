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
  for (const std::string& key : {std::string("\xff"), std::string("\xff\xff"), std::string("\xff\x00", 2),
                                 std::string("a\xff"), std::string("a\xff\x01"), std::string("b"), nul_key,
                                 std::string("x")}) {
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
  Result<TxnResult> result = store().Txn({Compare::Exists("nope")}, {Op::Put("a", "1")},
                                         {Op::Put("b", "2"), Op::Get("other"), Op::Get("a")});
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

// --- watch --------------------------------------------------------------------

TEST_P(StoreContractTest, WatchReplaysHistoryThenStreamsLive) {
  MustPut("ignored-before", "x");
  int64_t r1 = MustPut("a", "1");
  MustPut("b", "2");
  ASSERT_TRUE(store().Delete("a").ok());
  WatchRecorder recorder;
  auto handle = MustWatch("", r1, recorder);
  recorder.WaitFor(3);
  int64_t r4 = MustPut("c", "3");
  auto batches = recorder.WaitFor(4);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put a=1"));
  EXPECT_THAT(Describe(batches[1]), ElementsAre("put b=2"));
  EXPECT_THAT(Describe(batches[2]), ElementsAre("delete a"));
  EXPECT_THAT(Describe(batches[3]), ElementsAre("put c=3"));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(RevisionOf(batches[i]), r1 + i);
  EXPECT_EQ(r4, r1 + 3);
}

TEST_P(StoreContractTest, WatchEventsCarryKeyMetadata) {
  LeaseId lease = *store().GrantLease(std::chrono::seconds(60));
  int64_t r1 = MustPut("k", "1");
  WatchRecorder recorder;
  auto handle = MustWatch("k", 0, recorder);
  int64_t r2 = MustPut("k", "2", lease);
  int64_t r3 = *store().Delete("k");
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);
  const KeyValue& put = batches[0].at(0).kv;
  EXPECT_EQ(batches[0][0].type, Event::Type::kPut);
  EXPECT_EQ(put.create_revision, r1);
  EXPECT_EQ(put.mod_revision, r2);
  EXPECT_EQ(put.version, 2);
  EXPECT_EQ(put.lease, lease);
  EXPECT_EQ(batches[1].at(0).type, Event::Type::kDelete);
  EXPECT_EQ(batches[1][0].kv.key, "k");
  EXPECT_EQ(batches[1][0].kv.mod_revision, r3);
}

TEST_P(StoreContractTest, WatchFiltersByPrefix) {
  WatchRecorder recorder;
  auto handle = MustWatch("a/", 0, recorder);
  MustPut("b/1", "no");
  MustPut("a", "no");
  ASSERT_TRUE(store().Txn({}, {Op::Put("b/2", "no"), Op::Put("a/1", "yes")}, {}).ok());
  MustPut("a/2", "yes");
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);  // anything wrongly delivered would have come first
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put a/1=yes"));
  EXPECT_THAT(Describe(batches[1]), ElementsAre("put a/2=yes"));
}

TEST_P(StoreContractTest, WatchFromZeroStartsAtTheNextRevision) {
  MustPut("old", "x");
  WatchRecorder recorder;
  auto handle = MustWatch("", 0, recorder);
  int64_t rev = MustPut("new", "y");
  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put new=y"));
  EXPECT_EQ(RevisionOf(batches[0]), rev);
}

TEST_P(StoreContractTest, WatchFromAFutureRevisionWaitsForIt) {
  int64_t start = Rev() + 2;
  WatchRecorder recorder;
  auto handle = MustWatch("", start, recorder);
  MustPut("a", "1");
  MustPut("b", "2");
  MustPut("c", "3");
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(RevisionOf(batches[0]), start);
  EXPECT_THAT(Describe(batches[1]), ElementsAre("put c=3"));
}

TEST_P(StoreContractTest, CompactionLimitsWatchStart) {
  int64_t r1 = MustPut("a", "1");
  int64_t r2 = MustPut("a", "2");
  MustPut("a", "3");
  EXPECT_EQ(store().Compact(Rev() + 1).code(), Code::kOutOfRange);
  ASSERT_TRUE(store().Compact(r2).ok());
  EXPECT_EQ(MustGet("a").value, "3");  // data is not history

  Result<std::unique_ptr<WatchHandle>> too_old = store().Watch("", r1, [](const std::vector<Event>&) {});
  EXPECT_EQ(too_old.status().code(), Code::kOutOfRange);
  WatchRecorder recorder;
  auto handle = MustWatch("", r2, recorder);
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put a=2"));
  EXPECT_THAT(Describe(batches[1]), ElementsAre("put a=3"));
}

TEST_P(StoreContractTest, DestroyedHandleGetsNoMoreCallbacks) {
  WatchRecorder stopped;
  WatchRecorder witness;
  auto stopped_handle = MustWatch("", 0, stopped);
  auto witness_handle = MustWatch("", 0, witness);
  MustPut("a", "1");
  ASSERT_EQ(stopped.WaitFor(1).size(), 1u);
  stopped_handle.reset();
  MustPut("b", "2");
  ASSERT_EQ(witness.WaitFor(2).size(), 2u);
  EXPECT_EQ(stopped.Count(), 1u);
}

TEST_P(StoreContractTest, DestroyingAHandleWaitsForItsRunningCallback) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, resetting = false, finished = false;
  Result<std::unique_ptr<WatchHandle>> watch = store().Watch("", 0, [&](const std::vector<Event>&) {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return resetting; });
    // Stay busy a moment after the destructor was called, so that a
    // destructor that does not wait returns while this still runs. (A slow
    // callback, not a wait for an event: a correct store passes regardless.)
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lock.lock();
    finished = true;
  });
  ASSERT_TRUE(watch.ok());
  std::unique_ptr<WatchHandle> handle = std::move(*watch);
  MustPut("a", "1");
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return entered; }));
    resetting = true;
    cv.notify_all();
  }
  handle.reset();
  std::lock_guard lock(mu);
  EXPECT_TRUE(finished);  // the destructor returned only after the callback did
}

TEST_P(StoreContractTest, CallbacksMayReadAndWriteTheStore) {
  WatchRecorder recorder;
  WatchCallback record = recorder.Callback();
  std::atomic<int> seen_keys{-1};
  Result<std::unique_ptr<WatchHandle>> watch = store().Watch("w/", 0, [&](const std::vector<Event>& batch) {
    if (batch[0].kv.key == "w/first") {
      Result<RangeResult> range = store().Range("w/");
      seen_keys = range.ok() ? static_cast<int>(range->kvs.size()) : -2;
      EXPECT_TRUE(store().Put("w/second", "from callback").ok());
    }
    record(batch);
  });
  ASSERT_TRUE(watch.ok());
  std::unique_ptr<WatchHandle> handle = std::move(*watch);
  MustPut("w/first", "1");
  auto batches = recorder.WaitFor(2);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_THAT(Describe(batches[1]), ElementsAre("put w/second=from callback"));
  EXPECT_EQ(seen_keys.load(), 1);
}

TEST_P(StoreContractTest, WatchSeesEveryRevisionOnceInOrderUnderConcurrentWriters) {
  constexpr int kThreads = 4, kPutsEach = 10;
  int64_t start = Rev();
  WatchRecorder recorder;
  auto handle = MustWatch("", 0, recorder);
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPutsEach; ++i) EXPECT_TRUE(store().Put("t" + std::to_string(t), std::to_string(i)).ok());
    });
  }
  for (std::thread& writer : writers) writer.join();
  auto batches = recorder.WaitFor(kThreads * kPutsEach);
  ASSERT_EQ(batches.size(), static_cast<size_t>(kThreads * kPutsEach));
  for (size_t i = 0; i < batches.size(); ++i) EXPECT_EQ(RevisionOf(batches[i]), start + 1 + static_cast<int64_t>(i));
}

// --- leases -------------------------------------------------------------------

TEST_P(StoreContractTest, LeaseIdsArePositiveAndUnique) {
  std::vector<LeaseId> ids;
  for (int i = 0; i < 3; ++i) {
    Result<LeaseId> id = store().GrantLease(std::chrono::seconds(10));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_GT(*id, 0);
    for (LeaseId other : ids) EXPECT_NE(*id, other);
    ids.push_back(*id);
    ASSERT_TRUE(store().RevokeLease(*id).ok());  // a revoked id is still never handed out again
  }
  EXPECT_EQ(store().GrantLease(Duration(0)).status().code(), Code::kInvalidArgument);
}

TEST_P(StoreContractTest, ExpiredLeaseDeletesItsKeysInOneWatchedRevision) {
  if (!LeasesFollowTheClock()) GTEST_SKIP() << "leases are timed outside the test clock";
  LeaseId lease = *store().GrantLease(std::chrono::seconds(10));
  MustPut("l/a", "1", lease);
  MustPut("l/b", "2", lease);
  MustPut("l/c", "kept");
  int64_t before = Rev();
  WatchRecorder recorder;
  auto handle = MustWatch("l/", 0, recorder);

  clock_.Advance(std::chrono::seconds(10) - Duration(1));
  EXPECT_THAT(Keys("l/"), ElementsAre("l/a", "l/b", "l/c"));
  clock_.Advance(Duration(1));  // now == deadline: ended
  EXPECT_THAT(Keys("l/"), ElementsAre("l/c"));
  EXPECT_EQ(Rev(), before + 1);
  EXPECT_EQ(store().KeepAlive(lease).code(), Code::kNotFound);

  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("delete l/a", "delete l/b"));
  EXPECT_EQ(RevisionOf(batches[0]), before + 1);
}

TEST_P(StoreContractTest, KeepAliveExtendsALease) {
  if (!LeasesFollowTheClock()) GTEST_SKIP() << "leases are timed outside the test clock";
  LeaseId lease = *store().GrantLease(std::chrono::seconds(10));
  MustPut("k", "v", lease);
  clock_.Advance(std::chrono::seconds(6));
  ASSERT_TRUE(store().KeepAlive(lease).ok());
  clock_.Advance(std::chrono::seconds(6));  // 12 s after the grant, 6 after the keep-alive
  EXPECT_EQ(MustGet("k").value, "v");
  clock_.Advance(std::chrono::seconds(4));
  EXPECT_EQ(MustGet("k").version, 0);
}

TEST_P(StoreContractTest, RevokeDeletesOnlyTheLeasesKeys) {
  LeaseId lease = *store().GrantLease(std::chrono::seconds(10));
  LeaseId other = *store().GrantLease(std::chrono::seconds(10));
  MustPut("a", "1", lease);
  MustPut("b", "2", lease);
  MustPut("c", "3", other);
  MustPut("d", "4");
  MustPut("e", "5", lease);
  MustPut("e", "6");  // a put without the lease detaches the key
  int64_t before = Rev();
  ASSERT_TRUE(store().RevokeLease(lease).ok());
  EXPECT_EQ(Rev(), before + 1);
  EXPECT_THAT(Keys(""), ElementsAre("c", "d", "e"));
  EXPECT_EQ(store().RevokeLease(lease).code(), Code::kNotFound);
  EXPECT_EQ(store().KeepAlive(lease).code(), Code::kNotFound);

  LeaseId empty = *store().GrantLease(std::chrono::seconds(10));
  ASSERT_TRUE(store().RevokeLease(empty).ok());
  EXPECT_EQ(Rev(), before + 1);  // no keys, nothing written
}

TEST_P(StoreContractTest, PutWithAnUnknownLeaseWritesNothing) {
  int64_t before = Rev();
  EXPECT_EQ(store().Put("k", "v", 987654321).status().code(), Code::kNotFound);
  Result<TxnResult> result = store().Txn({}, {Op::Put("a", "1"), Op::Put("b", "2", 987654321)}, {});
  EXPECT_EQ(result.status().code(), Code::kNotFound);

  if (LeasesFollowTheClock()) {
    LeaseId expired = *store().GrantLease(std::chrono::seconds(1));
    clock_.Advance(std::chrono::seconds(1));
    EXPECT_EQ(store().Put("c", "3", expired).status().code(), Code::kNotFound);
  }
  EXPECT_THAT(Keys(""), IsEmpty());
  EXPECT_EQ(Rev(), before);
}

// --- validation, concurrency, durability ------------------------------------------

TEST_P(StoreContractTest, RejectsInvalidInput) {
  auto code = [](const auto& result) { return result.status().code(); };
  const std::string max_key(4096, 'k');
  const std::string long_key(4097, 'k');
  const std::string huge_value(4 * 1024 * 1024 + 1, 'v');
  EXPECT_EQ(code(store().Put("", "v")), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Get("")), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Delete("")), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Txn({Compare::Exists("")}, {}, {})), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Put(long_key, "v")), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Put("k", huge_value)), Code::kInvalidArgument);
  // An invalid op in the branch that would not run still fails the whole txn.
  EXPECT_EQ(code(store().Txn({}, {Op::Put("ok", "v")}, {Op::Put("", "v")})), Code::kInvalidArgument);
  EXPECT_EQ(code(store().Watch("", -1, [](const std::vector<Event>&) {})), Code::kInvalidArgument);
  EXPECT_THAT(Keys(""), IsEmpty());

  MustPut(max_key, "v");
  EXPECT_EQ(MustGet(max_key).version, 1);
}

TEST_P(StoreContractTest, ConcurrentCompareAndSwapIncrementsAreAtomic) {
  constexpr int kThreads = 4, kAttempts = 25;
  MustPut("counter", "0");
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAttempts; ++i) {
        Result<std::optional<KeyValue>> kv = store().Get("counter");
        ASSERT_TRUE(kv.ok() && kv->has_value());
        int64_t next = std::stoll((*kv)->value) + 1;
        Result<TxnResult> result = store().Txn({Compare::ModRevisionIs("counter", (*kv)->mod_revision)},
                                               {Op::Put("counter", std::to_string(next))}, {});
        ASSERT_TRUE(result.ok()) << result.status().ToString();
        if (result->succeeded) ++successes;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(successes.load(), 0);
  EXPECT_EQ(MustGet("counter").value, std::to_string(successes.load()));
  EXPECT_EQ(MustGet("counter").version, successes.load() + 1);
}

TEST_P(StoreContractTest, DataRevisionsLeasesAndHistorySurviveReopen) {
  int64_t r1 = MustPut("a", "1");
  MustPut("a", "2");
  MustPut("gone", "x");
  ASSERT_TRUE(store().Delete("gone").ok());
  LeaseId lease = *store().GrantLease(std::chrono::seconds(10));
  MustPut("leased", "y", lease);
  ASSERT_TRUE(store().Compact(r1 + 1).ok());
  int64_t before = Rev();

  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Rev(), before);
  KeyValue a = MustGet("a");
  EXPECT_EQ(a.value, "2");
  EXPECT_EQ(a.create_revision, r1);
  EXPECT_EQ(a.version, 2);
  EXPECT_EQ(MustGet("gone").version, 0);
  EXPECT_EQ(MustPut("b", "3"), before + 1);

  LeaseId newer = *store().GrantLease(std::chrono::seconds(10));
  EXPECT_GT(newer, lease);  // ids continue, never reused
  EXPECT_EQ(store().Watch("", r1, [](const std::vector<Event>&) {}).status().code(), Code::kOutOfRange);
  WatchRecorder recorder;
  auto handle = MustWatch("a", r1 + 1, recorder);
  auto batches = recorder.WaitFor(1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(Describe(batches[0]), ElementsAre("put a=2"));

  EXPECT_EQ(MustGet("leased").lease, lease);
  if (LeasesFollowTheClock()) {
    clock_.Advance(std::chrono::seconds(10));  // the deadline survived the restart
    EXPECT_EQ(MustGet("leased").version, 0);
  }
}

}  // namespace drover::store::contract
