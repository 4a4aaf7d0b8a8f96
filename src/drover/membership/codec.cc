#include "drover/membership/codec.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>
#include <limits>

#include "drover/common/ids.h"

namespace drover::membership {
namespace {

constexpr unsigned char kMagic[4] = {'D', 'R', 'M', 'B'};
constexpr uint8_t kVersion = 1;

bool HasTarget(MessageType type) { return type != MessageType::kLeaseAck; }

void PutU64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void PutName(std::string& out, const std::string& name) {
  out += static_cast<char>(name.size());
  out += name;
}

size_t NameSize(const std::string& name) { return 1 + name.size(); }

// Reads fields front to back; the first failure sticks, so callers check
// ok() once at the end. Never reads past the input.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }

  uint8_t U8() {
    if (!Need(1)) return 0;
    uint8_t v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  uint64_t U64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in_[static_cast<size_t>(i)]);
    in_.remove_prefix(8);
    return v;
  }
  // A beat: the top bit set would be a negative int64_t.
  int64_t Beat() {
    uint64_t v = U64();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ok_ = false;
    return static_cast<int64_t>(v & 0x7fffffffffffffffULL);
  }
  // A node name; empty only where allow_empty.
  std::string Name(bool allow_empty) {
    size_t n = U8();
    if (!Need(n)) return {};
    std::string name(in_.substr(0, n));
    in_.remove_prefix(n);
    if (name.empty() ? !allow_empty : !ValidateNodeName(name).ok()) ok_ = false;
    return name;
  }
  void Fail() { ok_ = false; }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() < n) ok_ = false;
    return ok_;
  }
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace

const char* MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "unknown";
}

const char* DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kMalformed: return "malformed";
    case DropReason::kBadLength: return "bad_length";
    case DropReason::kWrongCluster: return "wrong_cluster";
    case DropReason::kBadMac: return "bad_mac";
    case DropReason::kUnknownSender: return "unknown_sender";
    case DropReason::kReplay: return "replay";
    case DropReason::kMisdirected: return "misdirected";
    case DropReason::kBadLeaseAck: return "bad_lease_ack";
  }
  return "unknown";
}

size_t EncodedSize(const Update& update) { return NameSize(update.member) + 1 + 8 + NameSize(update.from); }

size_t EncodedSize(const Packet& packet) {
  size_t n = 4 + 1 + 1 + 8 + 8 + 8 + 8 + NameSize(packet.sender);
  n += HasTarget(packet.type) ? NameSize(packet.target) : 8;
  n += 1;
  for (const Update& u : packet.updates) n += EncodedSize(u);
  return n + kMacBytes;
}

std::string PacketMac(std::string_view key, std::string_view data) {
  // HMAC() wants a non-null key pointer even for an empty key.
  static const unsigned char kEmpty = 0;
  const void* key_data = key.empty() ? &kEmpty : static_cast<const void*>(key.data());
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &mac_len) == nullptr ||
      mac_len < kMacBytes) {
    // Only a broken libcrypto gets here; sending unauthenticated packets
    // would be worse than stopping.
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(mac), kMacBytes);
}

std::string Encode(const Packet& packet, const WireKey& key) {
  std::string out;
  out.reserve(EncodedSize(packet));
  out.append(reinterpret_cast<const char*>(kMagic), sizeof(kMagic));
  out += static_cast<char>(kVersion);
  out += static_cast<char>(packet.type);
  PutU64(out, key.cluster_id);
  PutU64(out, packet.seq);
  PutU64(out, packet.incarnation);
  PutU64(out, static_cast<uint64_t>(packet.beat));
  PutName(out, packet.sender);
  if (HasTarget(packet.type)) {
    PutName(out, packet.target);
  } else {
    PutU64(out, static_cast<uint64_t>(packet.lease_beat));
  }
  out += static_cast<char>(packet.updates.size());
  for (const Update& u : packet.updates) {
    PutName(out, u.member);
    out += static_cast<char>(u.state);
    PutU64(out, u.incarnation);
    PutName(out, u.from);
  }
  out += PacketMac(key.key, out);
  return out;
}

std::variant<Packet, DropReason> Decode(std::string_view bytes, const WireKey& key, size_t max_bytes) {
  if (bytes.size() < kMinPacketBytes || bytes.size() > max_bytes || bytes.size() > kMaxDatagramBytes) {
    return DropReason::kBadLength;
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kMacBytes);
  Reader r(body);
  for (unsigned char m : kMagic) {
    if (r.U8() != m) return DropReason::kMalformed;
  }
  if (r.U8() != kVersion) return DropReason::kMalformed;
  const uint8_t type = r.U8();
  if (r.U64() != key.cluster_id) return DropReason::kWrongCluster;
  // Constant time, so that the comparison does not reveal how much of a
  // forged MAC was right.
  const std::string mac = PacketMac(key.key, body);
  if (CRYPTO_memcmp(mac.data(), bytes.data() + body.size(), kMacBytes) != 0) return DropReason::kBadMac;

  if (type < static_cast<uint8_t>(MessageType::kPing) || type > static_cast<uint8_t>(MessageType::kLeaseAck)) {
    return DropReason::kMalformed;
  }
  Packet p;
  p.type = static_cast<MessageType>(type);
  p.seq = r.U64();
  p.incarnation = r.U64();
  p.beat = r.Beat();
  p.sender = r.Name(/*allow_empty=*/false);
  if (HasTarget(p.type)) {
    p.target = r.Name(/*allow_empty=*/false);
  } else {
    p.lease_beat = r.Beat();
  }
  const size_t count = r.U8();
  if (!r.ok() || count > kMaxUpdatesPerPacket) return DropReason::kMalformed;
  // Each update is at least 12 bytes, so `count` is bounded by the input too.
  p.updates.reserve(count);
  for (size_t i = 0; i < count && r.ok(); ++i) {
    Update u;
    u.member = r.Name(/*allow_empty=*/false);
    const uint8_t state = r.U8();
    if (state > static_cast<uint8_t>(MemberState::kDead)) r.Fail();
    u.state = static_cast<MemberState>(state);
    u.incarnation = r.U64();
    u.from = r.Name(/*allow_empty=*/true);
    // Only suspicions and deaths name who raised them (canonical form).
    if ((u.state == MemberState::kAlive) != u.from.empty()) r.Fail();
    p.updates.push_back(std::move(u));
  }
  if (!r.ok() || !r.done()) return DropReason::kMalformed;
  return p;
}

}  // namespace drover::membership
