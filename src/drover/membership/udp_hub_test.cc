// UdpNodes served by one UdpHub on loopback: they gossip as nodes with
// threads of their own do, and detaching (Stop, the hub's destruction) is
// safe while the hub's thread is delivering packets.

#include "drover/membership/udp_hub.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drover/membership/eventually_test_util.h"
#include "drover/membership/udp_node.h"

namespace drover::membership {
namespace {

// A short period, so that a round over a few dozen members fits well
// within Eventually's 10 s.
UdpNodeOptions Options(const std::string& name, UdpHub* hub) {
  UdpNodeOptions o;
  o.name = name;
  o.bind_address = "127.0.0.1:0";
  o.config.cluster_id = 7;
  o.config.key = "loopback key";
  o.config.protocol_period_ns = 50'000'000;
  o.config.probe_timeout_ns = 25'000'000;
  o.hub = hub;
  return o;
}

std::unique_ptr<UdpHub> StartHub() {
  auto hub = UdpHub::Start({});
  EXPECT_TRUE(hub.ok()) << hub.status().ToString();
  return hub.ok() ? std::move(*hub) : nullptr;
}

// `count` nodes "n0".."n{count-1}" on `hub`, each told of all the others.
std::vector<std::unique_ptr<UdpNode>> StartGroup(UdpHub* hub, int count) {
  std::vector<std::unique_ptr<UdpNode>> nodes;
  std::map<std::string, std::string> peers;
  for (int i = 0; i < count; ++i) {
    auto node = UdpNode::Start(Options("n" + std::to_string(i), hub));
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (!node.ok()) return {};
    peers["n" + std::to_string(i)] = (*node)->address();
    nodes.push_back(std::move(*node));
  }
  for (auto& n : nodes) EXPECT_TRUE(n->SetPeers(peers).ok());
  return nodes;
}

// Every member of `node` has been heard first-hand and is alive.
bool HeardAllAlive(const UdpNode& node, size_t members) {
  const auto views = node.Members();
  if (views.size() != members) return false;
  for (const MemberView& m : views) {
    if (m.state != MemberState::kAlive || m.last_beat < 0) return false;
  }
  return true;
}

TEST(UdpHub, RejectsNonPositiveTickInterval) {
  EXPECT_FALSE(UdpHub::Start(UdpHubOptions{.tick_interval_ns = 0}).ok());
  EXPECT_FALSE(UdpHub::Start(UdpHubOptions{.tick_interval_ns = -1}).ok());
}

TEST(UdpHub, NodeRejectsHubTickNotShorterThanProbeTimeout) {
  auto hub = UdpHub::Start(UdpHubOptions{.tick_interval_ns = 25'000'000});
  ASSERT_TRUE(hub.ok());
  EXPECT_FALSE(UdpNode::Start(Options("a", hub->get())).ok());  // probe timeout is 25 ms too
  EXPECT_EQ((*hub)->Stats().attached, 0u);
}

TEST(UdpHub, FortyNodesOnOneHubSeeEveryOtherAlive) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  auto nodes = StartGroup(hub.get(), 40);
  ASSERT_EQ(nodes.size(), 40u);
  EXPECT_EQ(hub->Stats().attached, 40u);
  for (const auto& n : nodes) {
    EXPECT_TRUE(Eventually([&] { return HeardAllAlive(*n, 39); })) << n->address();
  }
  const UdpHubStats stats = hub->Stats();
  EXPECT_GT(stats.sweeps, 0u);
  EXPECT_GT(stats.readable_serves, 0u);
}

TEST(UdpHub, StoppedNodeIsSeenNotAliveByTheRest) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  auto nodes = StartGroup(hub.get(), 5);
  ASSERT_EQ(nodes.size(), 5u);
  for (const auto& n : nodes) ASSERT_TRUE(Eventually([&] { return HeardAllAlive(*n, 4); }));

  nodes[0]->Stop();
  EXPECT_EQ(hub->Stats().attached, 4u);
  for (size_t i = 1; i < nodes.size(); ++i) {
    EXPECT_TRUE(Eventually([&] {
      for (const MemberView& m : nodes[i]->Members()) {
        if (m.name == "n0") return m.state != MemberState::kAlive;
      }
      return false;
    })) << "n"
        << i;
  }
}

TEST(UdpHub, LeaseAckCrossesBetweenHubNodes) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> acked_beats;
  UdpNodeOptions a_options = Options("a", hub.get());
  a_options.on_lease_ack = [&](int64_t beat, int64_t) {
    std::lock_guard lock(mu);
    acked_beats.push_back(beat);
    cv.notify_all();
  };
  auto a = UdpNode::Start(std::move(a_options));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = UdpNode::Start(Options("b", hub.get()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const int64_t a_beat = PairAndHearA(**a, **b);
  ASSERT_GE(a_beat, 0) << "b never heard a";
  ASSERT_TRUE((*b)->SendLeaseAck("a", a_beat).ok());
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return !acked_beats.empty(); }));
  EXPECT_EQ(acked_beats[0], a_beat);
  EXPECT_EQ((*a)->Stats().group.lease_acks, 1u);
}

// on_lease_ack runs on the hub's thread; stopping the node from there must
// neither wait for itself nor leave the node attached.
TEST(UdpHub, StopFromTheHubThreadDoesNotDeadlock) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  std::atomic<UdpNode*> self{nullptr};
  std::atomic<bool> stopped{false};
  UdpNodeOptions a_options = Options("a", hub.get());
  a_options.on_lease_ack = [&](int64_t, int64_t) {
    self.load()->Stop();
    stopped.store(true);
  };
  auto a = UdpNode::Start(std::move(a_options));
  ASSERT_TRUE(a.ok());
  self.store(a->get());
  auto b = UdpNode::Start(Options("b", hub.get()));
  ASSERT_TRUE(b.ok());
  const int64_t a_beat = PairAndHearA(**a, **b);
  ASSERT_GE(a_beat, 0) << "b never heard a";
  ASSERT_TRUE((*b)->SendLeaseAck("a", a_beat).ok());
  ASSERT_TRUE(Eventually([&] { return stopped.load(); }));
  EXPECT_EQ(hub->Stats().attached, 1u);
  // The hub still serves b.
  const uint64_t sweeps = hub->Stats().sweeps;
  EXPECT_TRUE(Eventually([&] { return hub->Stats().sweeps > sweeps + 2; }));
}

// Nodes stopped and destroyed from several threads while the hub delivers
// their traffic: after Stop returns the hub must not touch a node (a
// use-after-free here shows under ASan/TSan, or as a crash).
TEST(UdpHub, NodesStopWhileTheHubServesThem) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  auto nodes = StartGroup(hub.get(), 24);
  ASSERT_EQ(nodes.size(), 24u);
  ASSERT_TRUE(Eventually([&] { return nodes[0]->Stats().group.packets_received > 6; }));

  std::vector<std::thread> stoppers;
  for (int t = 0; t < 4; ++t) {
    stoppers.emplace_back([&nodes, t] {
      for (size_t i = t; i < nodes.size(); i += 4) {
        nodes[i]->Stop();
        nodes[i].reset();
      }
    });
  }
  for (auto& t : stoppers) t.join();
  EXPECT_EQ(hub->Stats().attached, 0u);
}

TEST(UdpHub, DestroyedWithNodesAttachedLeavesThemStopped) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  auto nodes = StartGroup(hub.get(), 3);
  ASSERT_EQ(nodes.size(), 3u);
  ASSERT_TRUE(Eventually([&] { return HeardAllAlive(*nodes[0], 2); }));
  hub.reset();
  // The nodes answer, are no longer served, and stop and go away cleanly.
  const uint64_t received = nodes[0]->Stats().group.packets_received;
  EXPECT_EQ(nodes[0]->Members().size(), 2u);
  EXPECT_TRUE(nodes[1]->SendLeaseAck("n0", 0).ok());
  nodes[0]->Stop();
  EXPECT_EQ(nodes[0]->Stats().group.packets_received, received);
  nodes.clear();
}

// One socket flooded with junk: the hub serves it a batch at a time, so
// the other nodes still hear each other.
TEST(UdpHub, FloodedNodeDoesNotStarveTheOthers) {
  auto hub = StartHub();
  ASSERT_NE(hub, nullptr);
  auto nodes = StartGroup(hub.get(), 3);
  ASSERT_EQ(nodes.size(), 3u);
  const std::string victim = nodes[2]->address();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(victim.substr(victim.rfind(':') + 1))));
  ASSERT_EQ(inet_pton(AF_INET, "127.0.0.1", &to.sin_addr), 1);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  std::atomic<bool> done{false};
  std::thread flooder([&] {
    const std::string junk(200, 'x');
    while (!done.load()) {
      ::sendto(fd, junk.data(), junk.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
    }
  });
  ASSERT_TRUE(Eventually([&] {
    uint64_t dropped = 0;
    for (uint64_t d : nodes[2]->Stats().group.dropped) dropped += d;
    return dropped > 1000;
  }));
  nodes[0]->TakeHeardDirectly();
  EXPECT_TRUE(Eventually([&] { return nodes[0]->TakeHeardDirectly().contains("n1"); }));
  done.store(true);
  flooder.join();
  ::close(fd);
}

}  // namespace
}  // namespace drover::membership
