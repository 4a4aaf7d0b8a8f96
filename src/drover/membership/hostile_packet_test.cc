// Packets a member must drop, each counted by reason, none changing what
// the member believes: forged, another cluster's, cut short, oversized,
// garbage, replayed, from strangers, and stale incarnation claims.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "drover/common/rng.h"
#include "drover/membership/codec.h"
#include "drover/membership/fake_network.h"

namespace drover::membership {
namespace {

constexpr int64_t kS = 1'000'000'000;
const WireKey kKey{42, "test cluster key"};

class HostilePacketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : {"a", "b", "c"}) {
      Config config;
      config.cluster_id = kKey.cluster_id;
      config.key = kKey.key;
      config.seed = static_cast<uint64_t>(n[0]);
      net_.Add(n, config);
    }
    net_.RunFor(1 * kS);
  }

  Group& b() { return net_["b"]; }

  // A packet from `sender` to b that b would act on: fresh beat, and an
  // update that would mark c dead were it accepted.
  Packet FromPeer(const std::string& sender) {
    Packet p;
    p.type = MessageType::kPing;
    p.seq = 9;
    p.sender = sender;
    p.incarnation = net_[sender].incarnation();
    p.beat = net_[sender].beat();
    p.target = "b";
    p.updates.push_back(Update{"c", MemberState::kDead, 0, sender});
    return p;
  }

  struct Belief {
    std::string name;
    MemberState state;
    uint64_t incarnation;
    bool operator==(const Belief&) const = default;
  };
  std::vector<Belief> Beliefs() {
    std::vector<Belief> out;
    for (const MemberView& v : b().Members()) out.push_back(Belief{v.name, v.state, v.incarnation});
    return out;
  }
  uint64_t Dropped(DropReason r) { return b().stats().dropped[static_cast<size_t>(r)]; }

  // Delivers `bytes` to b from a's address and expects it dropped for
  // `reason`, with b's beliefs and its other counters as before.
  void ExpectDropped(std::string_view bytes, DropReason reason) {
    const std::vector<Belief> before = Beliefs();
    const GroupStats stats = b().stats();
    net_.Deliver(FakeNetwork::AddressOf("a"), FakeNetwork::AddressOf("b"), bytes);
    EXPECT_EQ(Beliefs(), before) << DropReasonName(reason);
    for (size_t i = 0; i < kDropReasonCount; ++i) {
      const uint64_t want = stats.dropped[i] + (i == static_cast<size_t>(reason) ? 1 : 0);
      EXPECT_EQ(b().stats().dropped[i], want)
          << "expected " << DropReasonName(reason) << ", counted " << DropReasonName(static_cast<DropReason>(i));
    }
    EXPECT_EQ(b().stats().packets_received, stats.packets_received);
    EXPECT_EQ(b().stats().refutations, stats.refutations);
  }

  FakeNetwork net_;
};

TEST_F(HostilePacketTest, ValidPacketIsAccepted) {
  // The control for the tests below: the same packet, properly made, is
  // acted on (so what they show is the dropping, not a harmless packet).
  net_.Deliver(FakeNetwork::AddressOf("a"), FakeNetwork::AddressOf("b"), Encode(FromPeer("a"), kKey));
  EXPECT_EQ(b().Members()[1].name, "c");
  EXPECT_EQ(b().Members()[1].state, MemberState::kDead);
}

TEST_F(HostilePacketTest, ForgedMac) {
  ExpectDropped(Encode(FromPeer("a"), WireKey{kKey.cluster_id, "guessed key"}), DropReason::kBadMac);
  std::string flipped = Encode(FromPeer("a"), kKey);
  flipped[50] = static_cast<char>(flipped[50] ^ 1);
  ExpectDropped(flipped, DropReason::kBadMac);
}

TEST_F(HostilePacketTest, WrongCluster) {
  ExpectDropped(Encode(FromPeer("a"), WireKey{43, kKey.key}), DropReason::kWrongCluster);
}

TEST_F(HostilePacketTest, Truncated) {
  const std::string bytes = Encode(FromPeer("a"), kKey);
  ExpectDropped(bytes.substr(0, 20), DropReason::kBadLength);
  ExpectDropped(bytes.substr(0, bytes.size() - 1), DropReason::kBadMac);
  // Cut inside the updates and signed again: the parser, not the MAC, refuses it.
  std::string body = bytes.substr(0, bytes.size() - kMacBytes - 3);
  ExpectDropped(body + PacketMac(kKey.key, body), DropReason::kMalformed);
}

TEST_F(HostilePacketTest, Oversized) {
  Packet p = FromPeer("a");
  while (EncodedSize(p) <= 1400) p.updates.push_back(Update{"c", MemberState::kDead, 0, std::string(60, 'x')});
  ExpectDropped(Encode(p, kKey), DropReason::kBadLength);
  ExpectDropped(std::string(70'000, 'D'), DropReason::kBadLength);
}

TEST_F(HostilePacketTest, Garbage) {
  Rng rng(7);
  for (int i = 0; i < 100; ++i) {
    std::string junk(static_cast<size_t>(rng.Uniform(80, 1400)), '\0');
    for (char& ch : junk) ch = static_cast<char>(rng.Uniform(0, 255));
    ExpectDropped(junk, DropReason::kMalformed);
  }
}

TEST_F(HostilePacketTest, Replayed) {
  // Capture what a really sent b, and play it back some periods later.
  std::vector<std::string> captured;
  net_.set_tap([&](const FakeNetwork::Datagram& d) {
    if (d.from == FakeNetwork::AddressOf("a") && d.to == FakeNetwork::AddressOf("b")) captured.push_back(d.bytes);
  });
  net_.RunFor(1 * kS);
  ASSERT_FALSE(captured.empty());
  const std::string old = captured.front();
  net_.RunFor(2 * kS);
  ExpectDropped(old, DropReason::kReplay);
  // Beats within the window are not replays (UDP reorders).
  Packet late = FromPeer("a");
  late.beat -= 1;
  late.updates.clear();
  net_.Deliver(FakeNetwork::AddressOf("a"), FakeNetwork::AddressOf("b"), Encode(late, kKey));
  EXPECT_EQ(Dropped(DropReason::kReplay), 1u);
}

TEST_F(HostilePacketTest, UnknownSenderAndMisdirected) {
  Packet stranger = FromPeer("a");
  stranger.sender = "zz";
  ExpectDropped(Encode(stranger, kKey), DropReason::kUnknownSender);
  Packet self = FromPeer("a");
  self.sender = "b";
  ExpectDropped(Encode(self, kKey), DropReason::kUnknownSender);
  Packet not_for_b = FromPeer("a");
  not_for_b.target = "c";
  ExpectDropped(Encode(not_for_b, kKey), DropReason::kMisdirected);
  Packet req_for_stranger = FromPeer("a");
  req_for_stranger.type = MessageType::kPingReq;
  req_for_stranger.target = "zz";
  ExpectDropped(Encode(req_for_stranger, kKey), DropReason::kMisdirected);
}

TEST_F(HostilePacketTest, StaleIncarnationsNeverOverrideNewerState) {
  // c announces incarnation 5 itself (a newer life, say) ...
  Packet from_c = FromPeer("c");
  from_c.type = MessageType::kAck;
  from_c.seq = 0;
  from_c.incarnation = 5;
  from_c.updates.clear();
  net_.Deliver(FakeNetwork::AddressOf("c"), FakeNetwork::AddressOf("b"), Encode(from_c, kKey));
  ASSERT_EQ(b().Members()[1].incarnation, 5u);
  // ... so claims about its older incarnations are ignored, not dropped:
  // the packet carrying them is otherwise fine.
  Packet stale = FromPeer("a");
  stale.updates = {Update{"c", MemberState::kDead, 4, "a"}, Update{"c", MemberState::kSuspect, 3, "a"},
                   Update{"c", MemberState::kAlive, 2, ""}};
  const uint64_t received = b().stats().packets_received;
  net_.Deliver(FakeNetwork::AddressOf("a"), FakeNetwork::AddressOf("b"), Encode(stale, kKey));
  EXPECT_EQ(b().stats().packets_received, received + 1);
  EXPECT_EQ(b().Members()[1].state, MemberState::kAlive);
  EXPECT_EQ(b().Members()[1].incarnation, 5u);
  // And c's own packets claiming an older incarnation are replays.
  from_c.incarnation = 4;
  ExpectDropped(Encode(from_c, kKey), DropReason::kReplay);
}

TEST_F(HostilePacketTest, ClaimsAboutUsAreRefutedNotBelieved) {
  Packet p = FromPeer("a");
  p.updates = {Update{"b", MemberState::kDead, b().incarnation(), "a"}};
  const uint64_t before = b().incarnation();
  net_.Deliver(FakeNetwork::AddressOf("a"), FakeNetwork::AddressOf("b"), Encode(p, kKey));
  EXPECT_EQ(b().incarnation(), before + 1);
  EXPECT_EQ(b().stats().refutations, 1u);
  // The refutation reaches a with b's next packets.
  net_.RunFor(1 * kS);
  EXPECT_EQ(net_["a"].Members()[0].incarnation, before + 1);
  EXPECT_EQ(net_["a"].Members()[0].state, MemberState::kAlive);
}

}  // namespace
}  // namespace drover::membership
