// Two real UdpNodes on loopback: they hear each other, and a lease ack
// crosses from one to the other.

#include "drover/membership/udp_node.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "drover/membership/eventually_test_util.h"

namespace drover::membership {
namespace {

UdpNodeOptions Options(const std::string& name) {
  UdpNodeOptions o;
  o.name = name;
  o.bind_address = "127.0.0.1:0";
  o.config.cluster_id = 7;
  o.config.key = "loopback key";
  return o;
}

TEST(UdpNode, TwoNodesOnLoopbackHearEachOtherAndRelayLeaseAcks) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int64_t, int64_t>> acks;
  UdpNodeOptions a_options = Options("a");
  a_options.on_lease_ack = [&](int64_t beat, int64_t started_ns) {
    std::lock_guard lock(mu);
    acks.emplace_back(beat, started_ns);
    cv.notify_all();
  };
  auto a = UdpNode::Start(std::move(a_options));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = UdpNode::Start(Options("b"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->address(), "127.0.0.1:0");
  EXPECT_EQ((*a)->address().rfind("127.0.0.1:", 0), 0u);

  const int64_t a_beat = PairAndHearA(**a, **b);
  ASSERT_GE(a_beat, 0) << "b never heard a";
  EXPECT_LE(a_beat, (*a)->Beat());
  ASSERT_TRUE(Eventually([&] {
    auto members = (*a)->Members();
    return members.size() == 1 && members[0].counters.acks > 0 && members[0].state == MemberState::kAlive;
  }));

  ASSERT_TRUE((*b)->SendLeaseAck("a", a_beat).ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !acks.empty(); }));
    EXPECT_EQ(acks[0].first, a_beat);
    EXPECT_LE(acks[0].second, UdpNode::NowNs());
  }
  const UdpNodeStats stats = (*a)->Stats();
  EXPECT_EQ(stats.group.lease_acks, 1u);
  for (uint64_t d : stats.group.dropped) EXPECT_EQ(d, 0u);
  EXPECT_EQ(stats.send_errors, 0u);

  (*a)->Stop();
  (*a)->Stop();                                  // idempotent
  EXPECT_TRUE((*a)->SendLeaseAck("b", 0).ok());  // a no-op once stopped
}

TEST(UdpNode, RejectsBadAddresses) {
  UdpNodeOptions bad_bind = Options("a");
  bad_bind.bind_address = "localhost:1";  // names are not resolved
  EXPECT_FALSE(UdpNode::Start(std::move(bad_bind)).ok());
  UdpNodeOptions bad_name = Options("A");
  EXPECT_FALSE(UdpNode::Start(std::move(bad_name)).ok());

  auto node = UdpNode::Start(Options("a"));
  ASSERT_TRUE(node.ok());
  EXPECT_FALSE((*node)->SetPeers({{"b", "127.0.0.1"}}).ok());
  EXPECT_FALSE((*node)->SetPeers({{"b", "127.0.0.1:70000"}}).ok());
  EXPECT_FALSE((*node)->SetPeers({{"b", "[::1:9"}}).ok());
  EXPECT_TRUE((*node)->SetPeers({{"b", "[::1]:9"}, {"c", "127.0.0.2:9"}}).ok());
  EXPECT_EQ((*node)->Members().size(), 2u);
}

}  // namespace
}  // namespace drover::membership
