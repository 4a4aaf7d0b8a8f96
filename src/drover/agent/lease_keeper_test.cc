// LeaseKeeper's decisions about the fence, against a fake connection. The
// agent's loop is made but never started: what the keeper posts (its
// heartbeat timer) never runs, and every call is the test's own.
#include "drover/agent/lease_keeper.h"

#include <gtest/gtest.h>

#include <vector>

#include "drover/agent/agent_test_support.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/local_job.h"

namespace drover::agent {
namespace {

constexpr int64_t kMs = 1'000'000;

class FakeConnection final : public ServerConnection {
 public:
  void Begin() override {}
  bool Send(const v1::AgentMessage& m) override {
    sent.push_back(m);
    return true;
  }
  bool connected() const override { return true; }
  size_t queued_bytes() const override { return 0; }
  void MoveOn() override {}
  void Stop() override {}
  std::vector<v1::AgentMessage> sent;
};

class LeaseKeeperTest : public test_support::TempDirTest {
 protected:
  std::unique_ptr<LeaseKeeper> Make(bool fencing) {
    LeaseKeeperOptions o;
    o.node_name = "n1";
    o.data_dir = root_;
    o.fencing = fencing;
    auto k = std::make_unique<LeaseKeeper>(o, &client_, &stopping_, [this](v1::Heartbeat*) { ++reports_; });
    k->SetConnection(&connection_);
    return k;
  }
  static v1::RegisterResponse Lease(int heartbeat_ms = 100) {
    v1::RegisterResponse r;
    r.set_heartbeat_interval_ms(heartbeat_ms);
    r.set_fence_after_ms(1500);
    r.set_fence_grace_ms(200);
    return r;
  }
  static v1::HeartbeatAck Ack(int64_t seq) {
    v1::HeartbeatAck a;
    a.set_seq(seq);
    return a;
  }
  int64_t FenceAt(const LeaseKeeper& k) {
    auto lease = ReadNodeLease(k.lease_file());
    EXPECT_TRUE(lease.ok()) << lease.status().message();
    return lease.ok() ? lease->fence_at_mono_ns : 0;
  }
  int64_t LastSeq() const { return connection_.sent.back().heartbeat().seq(); }

  runtime::EventLoop loop_{"lease-keeper-test"};  // never started
  runtime::LoopClient client_{&loop_};
  std::atomic<bool> stopping_{false};
  FakeConnection connection_;
  int reports_ = 0;
};

TEST_F(LeaseKeeperTest, ASessionSetsTheFenceFromItsRegistration) {
  auto k = Make(/*fencing=*/true);
  const int64_t contact = MonoNanos();
  k->OnConnected(Lease(), contact);
  auto lease = ReadNodeLease(k->lease_file());
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_EQ(lease->fence_at_mono_ns, contact + 1500 * kMs);
  EXPECT_EQ(lease->grace_ms, 200);
  // A new session's first heartbeat carries the GPUs.
  ASSERT_EQ(connection_.sent.size(), 1u);
  EXPECT_EQ(LastSeq(), 1);
  EXPECT_EQ(reports_, 1);
}

TEST_F(LeaseKeeperTest, AnAcknowledgedHeartbeatMovesTheFenceToWhenItWasSent) {
  auto k = Make(/*fencing=*/true);
  k->OnConnected(Lease(), MonoNanos() - 1000 * kMs);
  const int64_t before = MonoNanos();
  k->SendHeartbeat();
  const int64_t after = MonoNanos();
  k->OnHeartbeatAck(Ack(LastSeq()));
  const int64_t fence = FenceAt(*k);
  EXPECT_GE(fence, before + 1500 * kMs);
  EXPECT_LE(fence, after + 1500 * kMs);
}

TEST_F(LeaseKeeperTest, AnAckOfNoHeartbeatOfThisSessionMovesNothing) {
  auto k = Make(/*fencing=*/true);
  k->OnConnected(Lease(), MonoNanos() - 1000 * kMs);
  const int64_t fence = FenceAt(*k);
  k->SendHeartbeat();
  const int64_t sent = LastSeq();
  k->OnHeartbeatAck(Ack(sent + 7));  // never sent
  EXPECT_EQ(FenceAt(*k), fence);
  k->OnHeartbeatAck(Ack(sent));  // passed over by the ack above: no longer waited for
  EXPECT_EQ(FenceAt(*k), fence);
}

TEST_F(LeaseKeeperTest, TheFenceOnlyMovesForward) {
  auto k = Make(/*fencing=*/true);
  const int64_t contact = MonoNanos();
  k->OnConnected(Lease(), contact);
  k->OnConnected(Lease(), contact - 500 * kMs);  // a later session whose registration went out earlier
  EXPECT_EQ(FenceAt(*k), contact + 1500 * kMs);
}

TEST_F(LeaseKeeperTest, WithoutFencingThereIsNoLeaseFile) {
  auto k = Make(/*fencing=*/false);
  k->OnConnected(Lease(), MonoNanos());
  k->SendHeartbeat();
  k->OnHeartbeatAck(Ack(LastSeq()));
  EXPECT_FALSE(ReadNodeLease(k->lease_file()).ok());
}

TEST_F(LeaseKeeperTest, GpuReportsRideAlongOncePerPeriodOrWhenAsked) {
  auto k = Make(/*fencing=*/true);
  k->OnConnected(Lease(/*heartbeat_ms=*/60'000), MonoNanos());  // with GPUs
  k->SendHeartbeat();                                           // within the period: without
  EXPECT_EQ(reports_, 1);
  k->SendHeartbeat(/*with_gpus=*/true);  // a GPU's health changed
  EXPECT_EQ(reports_, 2);
}

}  // namespace
}  // namespace drover::agent
