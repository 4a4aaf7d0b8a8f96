// The protocol on a fake network with a manual clock: failure detection,
// indirect probes, refutation, suspicion timeouts, partitions, and the
// beats and lease acks that relay liveness to the control plane.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "drover/membership/fake_network.h"
#include "drover/membership/protocol.h"

namespace drover::membership {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000 * kMs;

Config TestConfig(uint64_t seed) {
  Config c;
  c.cluster_id = 42;
  c.key = "test cluster key";
  c.seed = seed;
  return c;
}

std::string Name(int i) { return "node-" + std::to_string(i); }

// n nodes node-0 .. node-(n-1), each with its own seed.
void AddNodes(FakeNetwork& net, int n) {
  for (int i = 0; i < n; ++i) net.Add(Name(i), TestConfig(static_cast<uint64_t>(i) + 1));
}

std::optional<MemberView> ViewOf(const Group& observer, const std::string& member) {
  for (MemberView& v : observer.Members()) {
    if (v.name == member) return v;
  }
  return std::nullopt;
}

MemberState StateOf(const Group& observer, const std::string& member) { return ViewOf(observer, member)->state; }

bool AllSee(FakeNetwork& net, const std::vector<std::string>& observers, const std::string& member, MemberState state) {
  for (const std::string& o : observers) {
    if (StateOf(net[o], member) != state) return false;
  }
  return true;
}

TEST(SuspicionTimeout, FollowsLifeguard) {
  const Config c = TestConfig(1);
  // N <= 10: min = 4 periods = 0.8 s; k = min(3, N - 2) = 1 for N = 3.
  EXPECT_EQ(SuspicionTimeoutNs(c, 3, 1), 800 * kMs);
  EXPECT_EQ(SuspicionTimeoutNs(c, 3, 0), 6 * 800 * kMs);
  // N = 100: log10 = 2; N = 1000: 3.
  EXPECT_EQ(SuspicionTimeoutNs(c, 100, 3), 1600 * kMs);
  EXPECT_EQ(SuspicionTimeoutNs(c, 1000, 3), 2400 * kMs);
  EXPECT_EQ(SuspicionTimeoutNs(c, 1000, 0), 6 * 2400 * kMs);
  // Two members: nobody else can confirm, so the minimum applies at once.
  EXPECT_EQ(SuspicionTimeoutNs(c, 2, 0), 800 * kMs);
  // Confirmations beyond k change nothing.
  EXPECT_EQ(SuspicionTimeoutNs(c, 100, 7), SuspicionTimeoutNs(c, 100, 3));
  EXPECT_EQ(RetransmitLimit(c, 3), 4);
  EXPECT_EQ(RetransmitLimit(c, 100), 12);
}

TEST(SuspicionTimeout, GrowsWithGroupSize) {
  const Config c = TestConfig(1);
  for (size_t confirmations = 0; confirmations <= 3; ++confirmations) {
    EXPECT_GT(SuspicionTimeoutNs(c, 64, confirmations), SuspicionTimeoutNs(c, 4, confirmations)) << confirmations;
  }
  // The same seen from the outside: how long a dead member stays Suspect
  // at one observer, in a group of 4 and one of 64.
  auto suspect_to_dead = [](int n) {
    FakeNetwork net;
    AddNodes(net, n);
    net.RunFor(2 * kS);
    const std::string victim = Name(n - 1);
    net.Down(victim);
    std::optional<int64_t> suspected;
    const bool dead = net.RunUntil(
        [&] {
          const MemberState s = StateOf(net[Name(0)], victim);
          if (s == MemberState::kSuspect && !suspected) suspected = net.now();
          return s == MemberState::kDead;
        },
        60 * kS);
    EXPECT_TRUE(dead && suspected) << n;
    return dead && suspected ? net.now() - *suspected : 0;
  };
  const int64_t small = suspect_to_dead(4);
  const int64_t large = suspect_to_dead(64);
  EXPECT_GE(small + 5 * kMs, SuspicionTimeoutNs(TestConfig(1), 4, 3));
  EXPECT_GE(large + 5 * kMs, SuspicionTimeoutNs(TestConfig(1), 64, 3));
  EXPECT_GT(large, small);
}

TEST(Group, DetectsDeadMemberAsSuspectThenDead) {
  constexpr int kN = 5;
  FakeNetwork net;
  AddNodes(net, kN);
  net.RunFor(2 * kS);
  for (int i = 0; i < kN; ++i) EXPECT_EQ(net[Name(i)].stats().suspicions, 0u) << i;

  const std::string victim = Name(kN - 1);
  const std::vector<std::string> live = {Name(0), Name(1), Name(2), Name(3)};
  net.Down(victim);
  const int64_t down_at = net.now();
  std::optional<int64_t> suspected;
  const bool all_dead = net.RunUntil(
      [&] {
        if (!suspected && StateOf(net[Name(0)], victim) == MemberState::kSuspect) suspected = net.now();
        return AllSee(net, live, victim, MemberState::kDead);
      },
      30 * kS);
  ASSERT_TRUE(all_dead);
  ASSERT_TRUE(suspected.has_value());
  EXPECT_LT(*suspected, net.now());
  // Round-robin: every prober reaches the victim within two rounds (N - 1
  // periods each); then at most the longest suspicion; then one period of
  // gossip.
  const Config c = TestConfig(1);
  const int64_t bound =
      2 * (kN - 1) * c.protocol_period_ns + c.protocol_period_ns + SuspicionTimeoutNs(c, kN, 0) + c.protocol_period_ns;
  EXPECT_LE(net.now() - down_at, bound);
  for (const std::string& o : live) {
    EXPECT_EQ(StateOf(net[o], victim), MemberState::kDead);
    for (const std::string& other : live) {
      if (other == o) continue;
      EXPECT_EQ(StateOf(net[o], other), MemberState::kAlive) << o << " sees " << other;
    }
  }
}

TEST(Group, IndirectProbeKeepsMemberWithOneCutLinkAlive) {
  FakeNetwork net;
  AddNodes(net, 4);
  net.Cut(Name(0), Name(1));
  net[Name(0)].TakeHeardDirectly();
  net.RunFor(60 * kS);  // 300 periods: node-0 probes node-1 about 100 times
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(net[Name(i)].stats().suspicions, 0u) << i;
    for (const MemberView& v : net[Name(i)].Members()) {
      EXPECT_EQ(v.state, MemberState::kAlive) << Name(i) << " sees " << v.name;
      EXPECT_EQ(v.counters.failed_probes, 0u) << Name(i) << " probing " << v.name;
    }
  }
  const MemberView one = *ViewOf(net[Name(0)], Name(1));
  EXPECT_GT(one.counters.probes, 50u);
  EXPECT_EQ(one.counters.acks, 0u);
  EXPECT_EQ(one.counters.indirect_acks, one.counters.probes);
  EXPECT_GT(net[Name(0)].stats().ping_reqs_sent, 0u);
  // node-0 never heard node-1 itself: this is what its lease relay is for.
  const auto heard = net[Name(0)].TakeHeardDirectly();
  EXPECT_FALSE(heard.contains(Name(1)));
  EXPECT_TRUE(heard.contains(Name(2)));
  EXPECT_TRUE(heard.contains(Name(3)));
}

TEST(Group, FalselySuspectedMemberRefutesWithHigherIncarnation) {
  FakeNetwork net;
  AddNodes(net, 4);
  net.RunFor(1 * kS);
  const std::string victim = Name(1);
  const uint64_t before = net[victim].incarnation();
  for (int i = 0; i < 4; ++i) {
    if (Name(i) != victim) net.Cut(Name(i), victim);
  }
  ASSERT_TRUE(net.RunUntil([&] { return StateOf(net[Name(0)], victim) == MemberState::kSuspect; }, 10 * kS));
  net.Heal();
  const std::vector<std::string> others = {Name(0), Name(2), Name(3)};
  ASSERT_TRUE(net.RunUntil([&] { return AllSee(net, others, victim, MemberState::kAlive); }, 10 * kS));
  EXPECT_GT(net[victim].incarnation(), before);
  EXPECT_GE(net[victim].stats().refutations, 1u);
  for (const std::string& o : others) EXPECT_EQ(ViewOf(net[o], victim)->incarnation, net[victim].incarnation()) << o;
}

TEST(Group, HealedPartitionConvergesToAllAlive) {
  FakeNetwork net;
  AddNodes(net, 6);
  net.RunFor(1 * kS);
  const std::vector<std::string> left = {Name(0), Name(1), Name(2)};
  const std::vector<std::string> right = {Name(3), Name(4), Name(5)};
  std::vector<std::string> all = left;
  all.insert(all.end(), right.begin(), right.end());
  for (const std::string& l : left) {
    for (const std::string& r : right) net.Cut(l, r);
  }
  auto sides_see = [&](MemberState state) {
    for (const std::string& l : left) {
      for (const std::string& r : right) {
        if (!AllSee(net, {l}, r, state) || !AllSee(net, {r}, l, state)) return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(net.RunUntil([&] { return sides_see(MemberState::kDead); }, 30 * kS));
  for (const std::string& l : left) {
    for (const std::string& m : left) {
      if (l == m) continue;
      EXPECT_EQ(StateOf(net[l], m), MemberState::kAlive);
    }
  }

  net.Heal();
  // Dead members stay in the probe order: within a round each side probes
  // the other, tells it it is thought dead, and takes its refutation; the
  // new incarnations then spread to everyone.
  auto converged = [&] {
    for (const std::string& m : all) {
      for (const std::string& o : all) {
        if (o == m) continue;
        const MemberView v = *ViewOf(net[o], m);
        if (v.state != MemberState::kAlive || v.incarnation != net[m].incarnation()) return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(net.RunUntil(converged, 10 * kS));
  net.RunFor(10 * kS);
  EXPECT_TRUE(converged());
}

TEST(Group, BeatsHeardDirectlyAndLeaseAck) {
  FakeNetwork net;
  AddNodes(net, 3);
  const std::string a = Name(0), b = Name(1), c = Name(2);
  // When each of a's beats began, as the test saw it (ticks happen in Step).
  std::map<int64_t, int64_t> a_beat_at;
  std::vector<std::pair<int64_t, int64_t>> acks;
  net[a].set_on_lease_ack([&](int64_t beat, int64_t started_ns) { acks.emplace_back(beat, started_ns); });
  auto run = [&](int64_t ns) {
    const int64_t until = net.now() + ns;
    while (net.now() < until) {
      net.Step();
      a_beat_at.try_emplace(net[a].beat(), net.now());
    }
  };
  run(1 * kS);
  auto heard = net[b].TakeHeardDirectly();
  ASSERT_TRUE(heard.contains(a));
  ASSERT_TRUE(heard.contains(c));
  EXPECT_GT(heard[a], 0);
  EXPECT_LE(heard[a], net[a].beat());
  EXPECT_GE(heard[a], net[a].beat() - 3);           // a ping or ack of a's from the last few periods
  EXPECT_TRUE(net[b].TakeHeardDirectly().empty());  // only news since the previous call

  // b loses its link to a; c still hears a and relays for it.
  net.Cut(a, b);
  run(1 * kS);
  EXPECT_FALSE(net[b].TakeHeardDirectly().contains(a));
  const auto heard_by_c = net[c].TakeHeardDirectly();
  ASSERT_TRUE(heard_by_c.contains(a));
  const int64_t h = heard_by_c.at(a);

  // The control plane counted a at beat h (reported by c); c tells a.
  ASSERT_TRUE(net[c].SendLeaseAck(a, h).ok());
  run(20 * kMs);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].first, h);
  EXPECT_EQ(acks[0].second, a_beat_at.at(h));
  EXPECT_EQ(net[a].stats().lease_acks, 1u);

  // A beat a has not reached, or one before its first, is refused.
  const uint64_t refused = net[a].stats().dropped[static_cast<size_t>(DropReason::kBadLeaseAck)];
  ASSERT_TRUE(net[c].SendLeaseAck(a, net[a].beat() + 5).ok());
  run(20 * kMs);
  EXPECT_EQ(acks.size(), 1u);
  EXPECT_EQ(net[a].stats().dropped[static_cast<size_t>(DropReason::kBadLeaseAck)], refused + 1);
  EXPECT_FALSE(net[c].SendLeaseAck("nobody", 1).ok());
  EXPECT_FALSE(net[c].SendLeaseAck(a, -1).ok());
}

TEST(Group, AnnounceSendsAFreshBeatThatALeaseAckDatesFromNow) {
  FakeNetwork net;
  AddNodes(net, 5);
  const std::string a = Name(0);
  std::vector<std::pair<int64_t, int64_t>> acks;
  net[a].set_on_lease_ack([&](int64_t beat, int64_t started_ns) { acks.emplace_back(beat, started_ns); });
  net.RunFor(1 * kS);
  for (int i = 1; i < 5; ++i) net[Name(i)].TakeHeardDirectly();

  // Mid-period: the announce starts a beat of its own, now.
  net.RunFor(90 * kMs);
  const int64_t before = net[a].beat();
  const int64_t at = net.now();
  std::vector<std::string> pinged;
  net.set_tap([&](const FakeNetwork::Datagram& d) {
    if (d.from == net.AddressOf(a)) pinged.push_back(d.to);
  });
  net[a].Announce(at, 3);
  net.set_tap(nullptr);
  EXPECT_EQ(net[a].beat(), before + 1);
  std::sort(pinged.begin(), pinged.end());
  EXPECT_EQ(std::unique(pinged.begin(), pinged.end()), pinged.end()) << "one ping per member";
  EXPECT_EQ(pinged.size(), 3u);

  // Exactly the three pinged members heard the new beat.
  net.RunFor(3 * kMs);
  int heard_new = 0;
  std::string reporter;
  for (int i = 1; i < 5; ++i) {
    auto heard = net[Name(i)].TakeHeardDirectly();
    if (heard.contains(a) && heard.at(a) == before + 1) {
      ++heard_new;
      reporter = Name(i);
    }
  }
  EXPECT_EQ(heard_new, 3);

  // The relayed LeaseAck for it dates from the announce, not the period.
  ASSERT_TRUE(net[reporter].SendLeaseAck(a, before + 1).ok());
  net.RunFor(3 * kMs);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0], std::make_pair(before + 1, at));
  // Nobody waited for the announce's acks: no suspicion, no failed probe.
  net.RunFor(2 * kS);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(net[Name(i)].stats().suspicions, 0u) << i;
}

TEST(Group, SetPeersAddsAndRemoves) {
  FakeNetwork net;
  AddNodes(net, 3);
  net.RunFor(1 * kS);
  Group& g = net[Name(0)];
  // Removing node-2 forgets it; an invalid list changes nothing.
  ASSERT_TRUE(
      g.SetPeers({{Name(0), FakeNetwork::AddressOf(Name(0))}, {Name(1), FakeNetwork::AddressOf(Name(1))}}).ok());
  ASSERT_EQ(g.Members().size(), 1u);
  EXPECT_EQ(g.Members()[0].name, Name(1));
  EXPECT_FALSE(g.SetPeers({{"Bad_Name", "x:1"}}).ok());
  EXPECT_FALSE(g.SetPeers({{Name(2), ""}}).ok());
  EXPECT_FALSE(g.SetPeers({{Name(2), "a b:1"}}).ok());
  ASSERT_EQ(g.Members().size(), 1u);
  net.RunFor(1 * kS);  // probing goes on without the removed member
  EXPECT_EQ(StateOf(g, Name(1)), MemberState::kAlive);
  // node-2 still knows node-0, but node-0 drops what it sends.
  EXPECT_GT(g.stats().dropped[static_cast<size_t>(DropReason::kUnknownSender)], 0u);
}

// Confirmations shorten a suspicion (Lifeguard); the member must die at the
// shortened deadline, not at the one set when the suspicion began.
TEST(Group, ConfirmedSuspicionExpiresEarly) {
  constexpr int kN = 8;
  FakeNetwork net;
  AddNodes(net, kN);
  net.RunFor(2 * kS);
  const std::string victim = Name(kN - 1);
  net.Down(victim);
  std::optional<int64_t> suspected;
  ASSERT_TRUE(net.RunUntil(
      [&] {
        const MemberState s = StateOf(net[Name(0)], victim);
        if (!suspected && s == MemberState::kSuspect) suspected = net.now();
        return s == MemberState::kDead;
      },
      30 * kS));
  ASSERT_TRUE(suspected.has_value());
  const Config c = TestConfig(1);
  EXPECT_LT(net.now() - *suspected, SuspicionTimeoutNs(c, kN, 0) - c.protocol_period_ns);
}

// Captures what a Group sends.
class RecordingTransport final : public Transport {
 public:
  void Send(const std::string&, std::string bytes) override { sent.push_back(std::move(bytes)); }
  std::vector<std::string> sent;
};

// A backlog of updates (every member's incarnation, news to us) goes out
// least-sent first, ties by name, as many per packet as fit, each
// RetransmitLimit times, and then no more.
TEST(Group, GossipBacklogGoesLeastSentFirstAndDrains) {
  for (size_t max_bytes : {size_t{512}, size_t{1400}}) {
    Config c = TestConfig(1);
    c.max_packet_bytes = max_bytes;
    const WireKey key{c.cluster_id, c.key};
    RecordingTransport transport;
    auto created = Group::Create("a", c, &transport);
    ASSERT_TRUE(created.ok());
    Group& a = **created;
    constexpr int kMembers = 150;
    std::vector<std::string> names;
    std::map<std::string, std::string> peers;
    for (int i = 0; i < kMembers; ++i) {
      names.push_back(fmt::format("m-{:03}", i));
      peers[names.back()] = FakeNetwork::AddressOf(names.back());
    }
    const std::string from = "zz-messenger";  // a member that only carries the news
    peers[from] = FakeNetwork::AddressOf(from);
    ASSERT_TRUE(a.SetPeers(peers).ok());
    for (size_t i = 0; i < names.size(); ++i) {
      // An ack to nothing of ours carrying news of member i: only the
      // update matters.
      Packet p;
      p.type = MessageType::kAck;
      p.seq = 77;
      p.sender = from;
      p.target = from;
      p.updates.push_back(Update{names[i], MemberState::kAlive, 5, ""});
      a.OnPacket(FakeNetwork::AddressOf(from), Encode(p, key), 0);
    }
    ASSERT_TRUE(transport.sent.empty());

    Packet bare;  // what SendLeaseAck sends, without updates
    bare.type = MessageType::kLeaseAck;
    bare.sender = "a";
    const size_t per_packet =
        std::min(kMaxUpdatesPerPacket,
                 (max_bytes - EncodedSize(bare)) / EncodedSize(Update{names[0], MemberState::kAlive, 5, ""}));
    const int limit = RetransmitLimit(c, kMembers + 2);
    const size_t total = static_cast<size_t>(kMembers * limit);
    std::map<std::string, int> carried;
    size_t next = 0;  // index into the endless sequence names[0], ..., names[149], names[0], ...
    for (size_t sent = 0; sent <= total + per_packet; ++sent) {
      ASSERT_TRUE(a.SendLeaseAck(names[0], 0).ok());
      auto decoded = Decode(transport.sent.back(), key, max_bytes);
      ASSERT_TRUE(std::holds_alternative<Packet>(decoded));
      const std::vector<Update>& updates = std::get<Packet>(decoded).updates;
      const size_t left = total - std::min(total, next);
      ASSERT_EQ(updates.size(), std::min(per_packet, left)) << max_bytes << " packet " << sent;
      for (const Update& u : updates) {
        EXPECT_EQ(u.member, names[next % kMembers]) << max_bytes << " packet " << sent;
        EXPECT_EQ(u.incarnation, 5u);
        ++carried[u.member];
        ++next;
      }
    }
    for (const std::string& n : names) EXPECT_EQ(carried[n], limit) << n;
  }
}

// Members come from the control plane: a member's own first-heard
// incarnation is not gossiped while we see it alive (a thousand nodes would
// otherwise start with a million updates), but it is when it refutes what
// we believed of it.
TEST(Group, OwnIncarnationIsGossipedOnlyWhenItRefutes) {
  Config c = TestConfig(1);
  const WireKey key{c.cluster_id, c.key};
  RecordingTransport transport;
  auto created = Group::Create("a", c, &transport);
  ASSERT_TRUE(created.ok());
  Group& a = **created;
  ASSERT_TRUE(a.SetPeers({{"b", FakeNetwork::AddressOf("b")}, {"c", FakeNetwork::AddressOf("c")}}).ok());
  auto ack_from = [&](const std::string& who, uint64_t incarnation, std::vector<Update> updates) {
    Packet p;
    p.type = MessageType::kAck;
    p.seq = 77;
    p.sender = who;
    p.target = who;
    p.incarnation = incarnation;
    p.updates = std::move(updates);
    a.OnPacket(FakeNetwork::AddressOf(who), Encode(p, key), 0);
  };
  auto carried = [&] {
    EXPECT_TRUE(a.SendLeaseAck("c", 0).ok());
    auto decoded = Decode(transport.sent.back(), key, c.max_packet_bytes);
    EXPECT_TRUE(std::holds_alternative<Packet>(decoded));
    return std::get<Packet>(decoded).updates;
  };
  ack_from("b", 7, {});
  EXPECT_TRUE(carried().empty()) << "b's first-heard incarnation went out as gossip";

  // c says b is suspect at 7: that is gossip; b's own packet at 8 refutes it.
  ack_from("c", 0, {Update{"b", MemberState::kSuspect, 7, "c"}});
  std::vector<Update> suspicion = carried();
  ASSERT_EQ(suspicion.size(), 1u);
  EXPECT_EQ(suspicion[0].state, MemberState::kSuspect);
  ack_from("b", 8, {});
  bool refuted = false;
  for (const Update& u : carried()) refuted |= u.member == "b" && u.state == MemberState::kAlive && u.incarnation == 8;
  EXPECT_TRUE(refuted) << "b's refutation was not passed on";
  for (const MemberView& m : a.Members()) {
    if (m.name == "b") {
      EXPECT_EQ(m.state, MemberState::kAlive);
    }
  }
}

}  // namespace

}  // namespace drover::membership
