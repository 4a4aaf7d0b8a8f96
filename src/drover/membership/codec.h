#pragma once
// The membership wire format: one UDP datagram is one Packet, authenticated
// with a truncated HMAC-SHA256 under the cluster key. docs/membership.md has
// the byte layout; this header is its only implementation.
//
// Decoding is total: any byte string decodes to a Packet or to the reason it
// was dropped; it reads nothing past the input, and what it allocates is
// bounded by the input's length (at most max_packet_bytes, checked first).
// Encoding is canonical: re-encoding a decoded packet gives the same bytes.
//
// Pure functions; thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace drover::membership {

enum class MessageType : uint8_t {
  kPing = 1,      // "are you there?": target is the member meant to answer
  kAck = 2,       // answer to the ping with `seq`; target is the member that answered
  kPingReq = 3,   // "ping target for me": the indirect probe of SWIM
  kLeaseAck = 4,  // the control plane counted the receiver's liveness as of lease_beat
};

enum class MemberState : uint8_t { kAlive = 0, kSuspect = 1, kDead = 2 };
const char* MemberStateName(MemberState state);

// Why a received packet was dropped. The names are metric label values.
enum class DropReason : uint8_t {
  kMalformed,      // bad magic or version, a field that does not parse, trailing bytes
  kBadLength,      // shorter than the smallest packet or longer than max_packet_bytes
  kWrongCluster,   // another cluster's id
  kBadMac,         // the HMAC does not match: forged, corrupted, or another key
  kUnknownSender,  // the sender is not a peer the control plane named (or is us)
  kReplay,         // older than what this sender already sent (beat or incarnation)
  kMisdirected,    // a ping or ping-req naming a target that is not us / not a peer
  kBadLeaseAck,    // a lease ack for a beat we have not reached or no longer remember
};
inline constexpr size_t kDropReasonCount = 8;
const char* DropReasonName(DropReason reason);

// A piggybacked membership update ("gossip"): `member` is in `state` at
// `incarnation`, as `from` (who suspected it or declared it dead) said.
// `from` is empty for kAlive (only a member itself raises its incarnation).
struct Update {
  std::string member;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
  std::string from;
  bool operator==(const Update&) const = default;
};

struct Packet {
  MessageType type = MessageType::kPing;
  uint64_t seq = 0;          // the probe this ping/ack/ping-req belongs to
  std::string sender;        // node name of the member that sent the datagram
  uint64_t incarnation = 0;  // the sender's own incarnation
  int64_t beat = 0;          // the sender's beat counter when it sent this (>= 0)
  std::string target;        // kPing, kAck, kPingReq: a node name
  int64_t lease_beat = 0;    // kLeaseAck: the receiver's beat that was counted (>= 0)
  std::vector<Update> updates;
  bool operator==(const Packet&) const = default;
};

inline constexpr size_t kMacBytes = 16;
inline constexpr size_t kMaxUpdatesPerPacket = 64;
// Magic (4), version, type, cluster id, seq, incarnation, beat, sender name
// (1 + 1..63), payload (>= 2), update count, MAC.
inline constexpr size_t kMinPacketBytes = 4 + 1 + 1 + 8 + 8 + 8 + 8 + 2 + 2 + 1 + kMacBytes;
// The largest UDP payload over IPv4; no configuration may exceed it.
inline constexpr size_t kMaxDatagramBytes = 65507;

// Whom the bytes are for: packets of another cluster id or key do not decode.
struct WireKey {
  uint64_t cluster_id = 0;
  std::string key;  // HMAC key; empty = integrity only, no authentication (tests)
};

// The packet's encoded length, MAC included.
size_t EncodedSize(const Packet& packet);
// What one more update adds to EncodedSize.
size_t EncodedSize(const Update& update);

// Precondition: the packet is valid (names of node-name form, at most
// kMaxUpdatesPerPacket updates, beats >= 0), which everything the Group
// builds is. The bytes always decode back to `packet` under the same key.
std::string Encode(const Packet& packet, const WireKey& key);

// The packet, or why it is dropped. `max_bytes` (<= kMaxDatagramBytes)
// bounds the accepted length.
std::variant<Packet, DropReason> Decode(std::string_view bytes, const WireKey& key, size_t max_bytes);

// HMAC-SHA256 of `data` under `key`, first kMacBytes bytes. Exposed so that
// the fuzz target can sign mutated bodies and reach the parser behind the MAC.
std::string PacketMac(std::string_view key, std::string_view data);

}  // namespace drover::membership
