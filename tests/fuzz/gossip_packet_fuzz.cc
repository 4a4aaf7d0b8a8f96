// Membership datagrams from other agents (membership/codec.cc), and what a
// Group does with them (membership/protocol.cc OnPacket, then Tick).
//
// Input: one mode byte, then datagrams, each a 2-byte big-endian length and
// that many bytes (the last one takes what is left). Mode bit 0 set: each
// datagram is a body the target signs with the cluster key before sending
// it, so that mutations reach the parser behind the MAC (raw mutations
// almost never carry a valid HMAC). Between datagrams the clock moves 40 ms,
// so timeouts, suspicions and relays run too. The group is "fz-0" with
// peers a, b, c (addresses "a:1", ...), cluster id 42, key "fuzz key".
//
// Properties: a datagram that decodes re-encodes to the same bytes
// (canonical form) and never exceeds the limit; every datagram the group
// is given is either counted as received or as dropped for one reason;
// every datagram the group sends decodes under the key and fits the
// limit; its peers stay the three it was given; its incarnation never
// falls and its beat moves only with the clock.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "drover/membership/codec.h"
#include "drover/membership/protocol.h"
#include "fuzz_util.h"

namespace {

namespace ms = drover::membership;

constexpr uint64_t kClusterId = 42;
constexpr char kKey[] = "fuzz key";

// Checks every datagram the group sends.
class CheckingTransport final : public ms::Transport {
 public:
  explicit CheckingTransport(const ms::WireKey* key) : key_(key) {}
  void Send(const std::string& to_address, std::string bytes) override {
    FUZZ_CHECK(to_address == "a:1" || to_address == "b:1" || to_address == "c:1" || to_address == "sender:9");
    FUZZ_CHECK(bytes.size() <= ms::Config{}.max_packet_bytes);
    FUZZ_CHECK(std::holds_alternative<ms::Packet>(ms::Decode(bytes, *key_, ms::Config{}.max_packet_bytes)));
  }

 private:
  const ms::WireKey* key_;
};

uint64_t Total(const ms::GroupStats& s) {
  uint64_t n = s.packets_received;
  for (uint64_t d : s.dropped) n += d;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool sign = (data[0] & 1) != 0;
  std::string_view rest = drover::fuzz::AsText(data + 1, size - 1);

  const ms::WireKey key{kClusterId, kKey};
  CheckingTransport transport(&key);
  ms::Config config;
  config.cluster_id = kClusterId;
  config.key = kKey;
  config.initial_beat = 100;
  auto group = ms::Group::Create("fz-0", config, &transport);
  FUZZ_CHECK(group.ok());
  ms::Group& g = **group;
  FUZZ_CHECK(g.SetPeers({{"a", "a:1"}, {"b", "b:1"}, {"c", "c:1"}}).ok());
  int64_t now = 1'000'000'000;
  g.Tick(now);

  while (!rest.empty()) {
    size_t n = rest.size();
    if (rest.size() >= 2) {
      n = std::min<size_t>(rest.size() - 2, (static_cast<uint8_t>(rest[0]) << 8) | static_cast<uint8_t>(rest[1]));
      rest.remove_prefix(2);
    }
    std::string datagram(rest.substr(0, n));
    rest.remove_prefix(n);
    if (sign) datagram += ms::PacketMac(kKey, datagram);

    auto decoded = ms::Decode(datagram, key, config.max_packet_bytes);
    if (const auto* p = std::get_if<ms::Packet>(&decoded)) {
      FUZZ_CHECK(datagram.size() <= config.max_packet_bytes);
      FUZZ_CHECK(ms::EncodedSize(*p) == datagram.size());
      FUZZ_CHECK(ms::Encode(*p, key) == datagram);
    }

    const uint64_t before = Total(g.stats());
    const uint64_t received = g.stats().packets_received;
    const uint64_t incarnation = g.incarnation();
    const int64_t beat = g.beat();
    g.OnPacket("sender:9", datagram, now);
    FUZZ_CHECK(Total(g.stats()) == before + 1);
    FUZZ_CHECK(g.incarnation() >= incarnation);
    FUZZ_CHECK(g.beat() == beat);
    // What does not decode is never acted on.
    if (!std::holds_alternative<ms::Packet>(decoded)) FUZZ_CHECK(g.stats().packets_received == received);

    now += 40'000'000;
    g.Tick(now);
    const auto members = g.Members();
    FUZZ_CHECK(members.size() == 3);
    for (const ms::MemberView& m : members) {
      FUZZ_CHECK(m.state == ms::MemberState::kAlive || m.state == ms::MemberState::kSuspect ||
                 m.state == ms::MemberState::kDead);
    }
  }
  (void)g.TakeHeardDirectly();
  return 0;
}
