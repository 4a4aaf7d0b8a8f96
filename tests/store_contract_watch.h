#pragma once
// The Store contract, part two: watches, leases, input limits, concurrency
// and durability. See store_contract.h for how to instantiate the suite.

#include "store_contract.h"

namespace drover::store::contract {

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
