#include "drover/store/leader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>

#include "drover/store/etcd/etcd_test_env.h"

namespace drover::store {
namespace {

using ::testing::HasSubstr;

// Records the one Lost() call of a leadership.
class LossRecorder {
 public:
  std::function<void(const Status&)> Callback() {
    return [this](const Status& why) {
      std::lock_guard lock(mu_);
      ++calls_;
      why_ = why;
      cv_.notify_all();
    };
  }
  bool WaitLost(std::chrono::seconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return calls_ > 0; });
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  Status why() {
    std::lock_guard lock(mu_);
    return why_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  Status why_;
};

LeaderOptions Options(const std::string& identity, LossRecorder* lost = nullptr) {
  LeaderOptions o;
  o.identity = identity;
  o.ttl = std::chrono::seconds(1);
  if (lost != nullptr) o.on_lost = lost->Callback();
  return o;
}

std::unique_ptr<Store> MustOpen(const std::string& prefix) {
  auto store = OpenShared(prefix);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(LeadershipTest, OneLeadsTheOtherWaitsAndTakesOverWhenItResigns) {
  const std::string prefix = FreshPrefix();
  auto store_a = MustOpen(prefix);
  auto store_b = MustOpen(prefix);
  ASSERT_TRUE(store_a && store_b);
  auto a = Leadership::Campaign(store_a.get(), Options("server-a"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->Leading());
  EXPECT_EQ(*Leadership::CurrentLeader(store_b.get()), "server-a");

  std::promise<std::string> seen;
  std::atomic<bool> told{false};
  auto b_future = std::async(std::launch::async, [&] {
    return Leadership::Campaign(store_b.get(), Options("server-b"), nullptr, [&](const std::string& leader) {
      if (!told.exchange(true)) seen.set_value(leader);
    });
  });
  EXPECT_EQ(seen.get_future().get(), "server-a");  // b stands by, and knows whom to send clients to
  const int64_t epoch_a = (*a)->epoch();
  a->reset();  // a steps down: gives the key up
  auto b = b_future.get();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*b)->Leading());
  EXPECT_GT((*b)->epoch(), epoch_a);
  EXPECT_EQ(*Leadership::CurrentLeader(store_a.get()), "server-b");
  EXPECT_TRUE((*b)->fenced()->Put("state", "written by b").ok());
}

// The classic case: a leader paused past its lease. Its lease ends (here:
// revoked behind its back, as etcd does when keep-alives stop), another
// takes the key, and the old leader then writes from stale memory. The
// write must not land.
TEST(LeadershipTest, ADeposedLeaderCannotWrite) {
  const std::string prefix = FreshPrefix();
  auto store_a = MustOpen(prefix);
  auto store_b = MustOpen(prefix);
  ASSERT_TRUE(store_a && store_b);
  LossRecorder lost_a;
  auto a = Leadership::Campaign(store_a.get(), Options("server-a", &lost_a));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->fenced()->Put("jobs/1", "bound to node-1 by a").ok());

  auto key = store_b->Get("leader");
  ASSERT_TRUE(key.ok() && key->has_value());
  ASSERT_TRUE(store_b->RevokeLease((*key)->lease).ok());
  auto b = Leadership::Campaign(store_b.get(), Options("server-b"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*b)->fenced()->Put("jobs/1", "requeued by b").ok());

  Result<TxnResult> stale = (*a)->fenced()->Txn({}, {Op::Put("jobs/1", "bound to node-2 by a")}, {});
  EXPECT_EQ(stale.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("no longer the leader"));
  EXPECT_EQ((*store_b->Get("jobs/1"))->value, "requeued by b");
  EXPECT_TRUE(lost_a.WaitLost());
  EXPECT_FALSE((*a)->Leading());
  EXPECT_EQ(lost_a.calls(), 1);
  // Every later write is refused without asking etcd; reads still work.
  EXPECT_EQ((*a)->fenced()->Put("x", "y").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ((*(*a)->fenced()->Get("jobs/1"))->value, "requeued by b");
  EXPECT_TRUE((*b)->Leading());
}

// A leader whose etcd stops answering (here: its only member paused) loses
// the lead within its TTL, although its keep-alive hangs for the store's
// whole request timeout (30 s here): the watchdog, not the keep-alive,
// notices. The 10 s wait is only an upper bound for a slow machine.
TEST(LeadershipTest, AKeepAliveThatHangsEndsTheLeadershipAtTheTtl) {
  auto cluster = testing::EtcdCluster::Start(1);
  ASSERT_TRUE(cluster);
  EtcdOptions options;
  options.endpoints = cluster->endpoints();
  options.request_timeout = std::chrono::seconds(30);
  auto store = OpenEtcdStore(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  LossRecorder lost;
  auto l = Leadership::Campaign(store->get(), Options("server-a", &lost));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  cluster->Signal(0, SIGSTOP);
  EXPECT_TRUE(lost.WaitLost(std::chrono::seconds(10)));
  EXPECT_EQ(lost.why().code(), Code::kDeadlineExceeded) << lost.why().ToString();
  EXPECT_FALSE((*l)->Leading());
  cluster->Signal(0, SIGCONT);
}

// Each fenced write carries its writer's epoch in the same revision, and
// the caller's reads come back as they would without it.
TEST(LeadershipTest, FencedWritesAreStampedWithTheWritersEpoch) {
  const std::string prefix = FreshPrefix();
  auto store = MustOpen(prefix);
  ASSERT_TRUE(store);
  auto l = Leadership::Campaign(store.get(), Options("server-a"));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto r = (*l)->fenced()->Txn({}, {Op::Put("jobs/1", "queued"), Op::Get("jobs/1")}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->succeeded);
  ASSERT_EQ(r->gets.size(), 1u);
  EXPECT_EQ(r->gets[0]->value, "queued");
  auto writer = store->Get("writer");
  ASSERT_TRUE(writer.ok() && writer->has_value());
  EXPECT_EQ((*writer)->value, std::to_string((*l)->epoch()));
  EXPECT_EQ((*writer)->mod_revision, r->revision);
  EXPECT_EQ((*store->Get("jobs/1"))->mod_revision, r->revision);
  // A read-only transaction writes nothing, stamp included.
  ASSERT_TRUE((*l)->fenced()->Txn({}, {Op::Get("jobs/1")}, {}).ok());
  EXPECT_EQ((*store->Get("writer"))->mod_revision, r->revision);
}

// The caller's own compares still decide success; a failed compare of the
// caller is not mistaken for deposition.
TEST(LeadershipTest, FencingKeepsTheCallersCompares) {
  auto store = MustOpen(FreshPrefix());
  ASSERT_TRUE(store);
  LossRecorder lost;
  auto l = Leadership::Campaign(store.get(), Options("server-a", &lost));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  Store* fenced = (*l)->fenced();
  ASSERT_TRUE(fenced->Put("counter", "1").ok());
  auto r = fenced->Txn({Compare::ValueIs("counter", "0")}, {Op::Put("counter", "2")}, {Op::Get("counter")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->succeeded);
  ASSERT_EQ(r->gets.size(), 1u);  // the fence's own read is not the caller's
  EXPECT_EQ(r->gets[0]->value, "1");
  EXPECT_TRUE((*l)->Leading());
  EXPECT_EQ(lost.calls(), 0);
  EXPECT_EQ(fenced->Txn({}, {Op::Put("a", "1")}, {Op::Put("b", "2")}).status().code(), Code::kInvalidArgument);
}

TEST(LeadershipTest, ALeaseThatEndsUnderTheLeaderEndsItsLeadership) {
  auto store = MustOpen(FreshPrefix());
  ASSERT_TRUE(store);
  LossRecorder lost;
  auto l = Leadership::Campaign(store.get(), Options("server-a", &lost));
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto key = store->Get("leader");
  ASSERT_TRUE(key.ok() && key->has_value());
  ASSERT_TRUE(store->RevokeLease((*key)->lease).ok());
  // The next keep-alive (a third of the TTL) finds the lease gone.
  ASSERT_TRUE(lost.WaitLost());
  EXPECT_EQ(lost.why().code(), Code::kFailedPrecondition) << lost.why().ToString();
  EXPECT_FALSE((*l)->Leading());
}

TEST(LeadershipTest, AStoppedCampaignReturnsCancelled) {
  const std::string prefix = FreshPrefix();
  auto store = MustOpen(prefix);
  ASSERT_TRUE(store);
  auto a = Leadership::Campaign(store.get(), Options("server-a"));
  ASSERT_TRUE(a.ok());
  std::atomic<bool> stop{false};
  auto b =
      std::async(std::launch::async, [&] { return Leadership::Campaign(store.get(), Options("server-b"), &stop); });
  stop = true;
  EXPECT_EQ(b.get().status().code(), Code::kCancelled);
  EXPECT_TRUE((*a)->Leading());
}

}  // namespace
}  // namespace drover::store
