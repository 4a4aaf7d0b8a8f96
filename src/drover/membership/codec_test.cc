#include "drover/membership/codec.h"

#include <gtest/gtest.h>

#include <string>

namespace drover::membership {
namespace {

const WireKey kKey{0x0123456789abcdefULL, "k"};

Packet Sample(MessageType type) {
  Packet p;
  p.type = type;
  p.seq = 77;
  p.sender = "gpu-01";
  p.incarnation = 1'700'000'000'123ULL;
  p.beat = 1'700'000'000'456LL;
  if (type == MessageType::kLeaseAck) {
    p.lease_beat = 1'700'000'000'400LL;
  } else {
    p.target = "gpu-02.rack-3";
  }
  p.updates = {Update{"gpu-03", MemberState::kAlive, 4, ""}, Update{"gpu-04", MemberState::kSuspect, 0, "gpu-01"},
               Update{"gpu-05", MemberState::kDead, 9, "gpu-02.rack-3"}};
  return p;
}

// The packet with its body replaced by `body` and signed again, so that
// the parser behind the MAC is what decides.
std::string Resigned(std::string body) { return body + PacketMac(kKey.key, body); }

DropReason ReasonOf(std::string_view bytes) {
  auto d = Decode(bytes, kKey, 1400);
  EXPECT_TRUE(std::holds_alternative<DropReason>(d));
  return std::holds_alternative<DropReason>(d) ? std::get<DropReason>(d) : DropReason::kMalformed;
}

TEST(Codec, RoundTripsEveryType) {
  for (MessageType t : {MessageType::kPing, MessageType::kAck, MessageType::kPingReq, MessageType::kLeaseAck}) {
    const Packet p = Sample(t);
    const std::string bytes = Encode(p, kKey);
    EXPECT_EQ(bytes.size(), EncodedSize(p));
    auto d = Decode(bytes, kKey, 1400);
    ASSERT_TRUE(std::holds_alternative<Packet>(d)) << static_cast<int>(t);
    EXPECT_EQ(std::get<Packet>(d), p);
  }
}

TEST(Codec, UpdateSizeIsWhatItAdds) {
  Packet p = Sample(MessageType::kPing);
  const size_t before = Encode(p, kKey).size();
  const Update u{"gpu-99", MemberState::kDead, 1, "gpu-01"};
  p.updates.push_back(u);
  EXPECT_EQ(Encode(p, kKey).size(), before + EncodedSize(u));
}

TEST(Codec, EveryPrefixAndEveryBitFlipIsRefused) {
  const std::string bytes = Encode(Sample(MessageType::kPingReq), kKey);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(std::holds_alternative<DropReason>(Decode(bytes.substr(0, n), kKey, 1400))) << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = bytes;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      EXPECT_TRUE(std::holds_alternative<DropReason>(Decode(f, kKey, 1400))) << i << ":" << bit;
    }
  }
}

TEST(Codec, ReasonsInOrderOfChecking) {
  const std::string bytes = Encode(Sample(MessageType::kPing), kKey);
  EXPECT_EQ(ReasonOf(std::string(kMinPacketBytes - 1, 'x')), DropReason::kBadLength);
  EXPECT_EQ(Decode(bytes, kKey, bytes.size() - 1).index(), 1u);  // longer than the limit
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_EQ(ReasonOf(magic), DropReason::kMalformed);
  std::string version = bytes;
  version[4] = 2;
  EXPECT_EQ(ReasonOf(version), DropReason::kMalformed);
  EXPECT_EQ(ReasonOf(Encode(Sample(MessageType::kPing), WireKey{1, kKey.key})), DropReason::kWrongCluster);
  EXPECT_EQ(ReasonOf(Encode(Sample(MessageType::kPing), WireKey{kKey.cluster_id, "other"})), DropReason::kBadMac);
}

TEST(Codec, StrictParsingBehindTheMac) {
  const std::string body = [] {
    std::string b = Encode(Sample(MessageType::kPing), kKey);
    return b.substr(0, b.size() - kMacBytes);
  }();
  // Offsets: type 5, beat 30..37, sender name length 38, sender from 39.
  std::string type = body;
  type[5] = 9;
  EXPECT_EQ(ReasonOf(Resigned(type)), DropReason::kMalformed);
  std::string negative_beat = body;
  negative_beat[30] = static_cast<char>(0x80);
  EXPECT_EQ(ReasonOf(Resigned(negative_beat)), DropReason::kMalformed);
  std::string upper = body;
  upper[39] = 'G';  // "Gpu-01" is not a node name
  EXPECT_EQ(ReasonOf(Resigned(upper)), DropReason::kMalformed);
  std::string long_name = body;
  long_name[38] = static_cast<char>(200);  // runs past the end
  EXPECT_EQ(ReasonOf(Resigned(long_name)), DropReason::kMalformed);
  EXPECT_EQ(ReasonOf(Resigned(body + "x")), DropReason::kMalformed);  // trailing byte

  // An Alive update naming who raised it, a Suspect not naming it, a state
  // past Dead, too many updates: all refused.
  auto with_update = [](Update u) {
    Packet p = Sample(MessageType::kAck);
    p.updates = {std::move(u)};
    std::string b = Encode(p, kKey);
    return b.substr(0, b.size() - kMacBytes);
  };
  EXPECT_EQ(ReasonOf(Resigned(with_update(Update{"gpu-03", MemberState::kAlive, 1, "gpu-01"}))),
            DropReason::kMalformed);
  EXPECT_EQ(ReasonOf(Resigned(with_update(Update{"gpu-03", MemberState::kSuspect, 1, ""}))), DropReason::kMalformed);
  std::string state = with_update(Update{"gpu-03", MemberState::kDead, 1, "gpu-01"});
  const size_t state_at = state.size() - (1 + 6) - 8 - 1;  // before the incarnation and "gpu-01"
  state[state_at] = 3;
  EXPECT_EQ(ReasonOf(Resigned(state)), DropReason::kMalformed);

  Packet many = Sample(MessageType::kPing);
  many.updates.assign(kMaxUpdatesPerPacket, Update{"a", MemberState::kAlive, 1, ""});
  std::string b = Encode(many, kKey);
  ASSERT_TRUE(std::holds_alternative<Packet>(Decode(b, kKey, 1400)));
  b = b.substr(0, b.size() - kMacBytes);
  const size_t count_at = b.size() - kMaxUpdatesPerPacket * EncodedSize(many.updates[0]) - 1;
  b[count_at] = static_cast<char>(kMaxUpdatesPerPacket + 1);
  EXPECT_EQ(ReasonOf(Resigned(b + std::string(EncodedSize(many.updates[0]), 'x'))), DropReason::kMalformed);
}

TEST(Codec, EmptyKeyStillChecksIntegrity) {
  const WireKey open{5, ""};
  const std::string bytes = Encode(Sample(MessageType::kLeaseAck), open);
  EXPECT_TRUE(std::holds_alternative<Packet>(Decode(bytes, open, 1400)));
  EXPECT_EQ(std::get<DropReason>(Decode(bytes, WireKey{5, "set"}, 1400)), DropReason::kBadMac);
}

}  // namespace
}  // namespace drover::membership
