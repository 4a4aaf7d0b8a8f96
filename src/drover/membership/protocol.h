#pragma once
// Group: the SWIM membership protocol (Das et al., 2002) with Lifeguard's
// suspicion timeouts (Dadgar et al., 2018), as a pure core: it reads no
// clock, opens no socket and starts no thread. The owner feeds it time
// (Tick) and datagrams (OnPacket) and gives it a Transport to send with;
// udp_node.h does that over UDP, membership_test.cc over a fake network.
//
// One protocol period: probe the next member of a shuffled round-robin
// order with a ping; if no ack within probe_timeout, ask k other members to
// ping it (ping-req) and relay their ack; with no ack by the end of the
// period, suspect it. A suspicion turns into Dead unless the member refutes
// it (by gossiping a higher incarnation) within the suspicion timeout, which
// grows with log10 of the group size and shrinks as other members confirm
// the suspicion independently. Updates ride on every packet, each sent
// retransmit_mult * ceil(log10(N + 1)) times.
//
// Who is in the group is the control plane's decision (SetPeers), not the
// gossip's: updates about names we were not told of are ignored, and Dead
// members stay in the probe order, so a healed partition converges without
// anyone rejoining.
//
// Beats relay liveness to the control plane (docs/membership.md): every
// packet carries the sender's beat, a counter raised every period;
// TakeHeardDirectly() says which members were heard first-hand and at what
// beat; a LeaseAck{beat} tells a member that the control plane counted it
// alive as of that beat.
//
// Not thread-safe: owned by one thread (UdpNode's, or a test's).

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/rng.h"
#include "drover/common/status.h"
#include "drover/membership/codec.h"

namespace drover::membership {

// Sends one datagram, best effort: no error is reported and nothing is
// retried (the protocol copes with loss).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual void Send(const std::string& to_address, std::string bytes) = 0;
};

struct Config {
  uint64_t cluster_id = 0;
  std::string key;                           // shared cluster key; empty: no authentication (tests)
  int64_t protocol_period_ns = 200'000'000;  // one probe per member per period
  int64_t probe_timeout_ns = 100'000'000;    // direct ack wait; ping-reqs get the rest of the period
  int indirect_probes = 3;                   // k: members asked to ping-req a silent target
  int suspicion_mult = 4;                    // min timeout = mult * max(1, log10 N) * period
  int suspicion_max_mult = 6;                // max timeout = max_mult * min timeout
  int retransmit_mult = 4;                   // each update sent mult * ceil(log10(N + 1)) times
  size_t max_packet_bytes = 1400;            // below a 1500-byte MTU with IP and UDP headers
  int64_t replay_window_beats = 2;           // older beats than newest - window are replays
  // Where this life starts counting. Both must exceed any value of an
  // earlier life of the same member (UdpNode uses the wall clock in ms).
  uint64_t initial_incarnation = 0;
  int64_t initial_beat = 0;
  uint64_t seed = 1;  // probe order and ping-req helpers
};

Status ValidateConfig(const Config& config);

// Lifeguard's suspicion timeout for a group of `group_size` members (us
// included) after `confirmations` members besides the first suspected the
// same incarnation: from max down to min as confirmations reach k =
// min(indirect_probes, N - 2), on a log scale. Defaults, N = 3: 0.8 s, at
// most 4.8 s; N = 100: 1.6 s to 9.6 s.
int64_t SuspicionTimeoutNs(const Config& config, size_t group_size, size_t confirmations);
// How many packets carry each update: retransmit_mult * ceil(log10(N + 1)).
int RetransmitLimit(const Config& config, size_t group_size);

struct MemberCounters {
  uint64_t probes = 0;         // pings we sent it as the probe of a period
  uint64_t acks = 0;           // its acks to our probes, first-hand
  uint64_t indirect_acks = 0;  // acks to our probes relayed by another member
  uint64_t failed_probes = 0;  // periods that ended without an ack
  uint64_t suspected = 0;      // times it went from Alive to Suspect here
  uint64_t packets = 0;        // valid packets from it
};

struct MemberView {
  std::string name;
  std::string address;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
  int64_t last_beat = -1;  // newest beat heard directly; -1: never
  MemberCounters counters;
};

struct GroupStats {
  std::array<uint64_t, kDropReasonCount> dropped{};  // by DropReason
  uint64_t packets_received = 0;                     // valid ones
  uint64_t packets_sent = 0;
  uint64_t probes = 0;
  uint64_t ping_reqs_sent = 0;
  uint64_t relays = 0;       // ping-reqs we served for others
  uint64_t suspicions = 0;   // members we suspected ourselves
  uint64_t deaths = 0;       // suspicions that timed out here
  uint64_t refutations = 0;  // times we raised our incarnation
  uint64_t lease_acks = 0;   // accepted LeaseAcks
};

class Group {
 public:
  // `beat_started_ns` is the time Tick was given when that beat began:
  // the earliest moment any packet carrying it can have been sent.
  using LeaseAckFn = std::function<void(int64_t beat, int64_t beat_started_ns)>;

  // `name` is our node name; `transport` must outlive the Group.
  static Result<std::unique_ptr<Group>> Create(std::string name, Config config, Transport* transport);

  // Replaces the peer list (name -> "host:port"): new names join Alive at
  // incarnation 0, missing ones are forgotten, known ones keep their state
  // (and take a changed address). Our own name is skipped. An invalid name
  // or address rejects the whole list.
  Status SetPeers(const std::map<std::string, std::string>& peers);

  // Advances the protocol to `now_ns` (monotonic, never decreasing). Call
  // it at least every few milliseconds; late calls only delay timeouts.
  void Tick(int64_t now_ns);
  void OnPacket(const std::string& from_address, std::string_view bytes, int64_t now_ns);

  // Tells `member` that the control plane counted it alive as of its `beat`.
  Status SendLeaseAck(const std::string& member, int64_t beat);
  // Starts a new beat at `now_ns` and sends it at once to up to `fanout`
  // members (Alive ones first, at random), in pings whose acks nobody
  // waits for. A member whose own contact with the control plane lags
  // calls it every heartbeat: its peers then report a beat that began
  // moments ago, not one up to a period and a probe round old, so the
  // LeaseAck they relay moves its fence much further (docs/failures.md).
  // Before the first Tick it does nothing.
  void Announce(int64_t now_ns, size_t fanout);
  // Called from OnPacket for each valid LeaseAck.
  // Beats older than the last kBeatHistory are refused (their start times
  // are forgotten), as are beats we have not reached.
  void set_on_lease_ack(LeaseAckFn fn) { on_lease_ack_ = std::move(fn); }

  // Members heard from first-hand since the previous call, with the
  // newest beat of each; relayed acks and gossip do not count.
  std::map<std::string, int64_t> TakeHeardDirectly();

  std::vector<MemberView> Members() const;  // peers, by name; not us
  const GroupStats& stats() const { return stats_; }
  const std::string& name() const { return name_; }
  uint64_t incarnation() const { return incarnation_; }
  int64_t beat() const { return beat_; }

 private:
  struct Member {
    std::string address;
    MemberState state = MemberState::kAlive;
    uint64_t incarnation = 0;
    int64_t suspect_since_ns = 0;
    std::set<std::string> suspecters;  // who suspected this incarnation (first one included)
    // Replay guard: the newest (incarnation, beat) the member itself sent.
    uint64_t heard_incarnation = 0;
    int64_t heard_beat = -1;
    MemberCounters counters;
  };
  // The probe of the current period.
  struct Probe {
    std::string target;
    uint64_t seq = 0;
    int64_t sent_ns = 0;
    bool acked = false;
    bool indirect_sent = false;
  };
  // A ping we sent on another member's behalf (ping-req), by our seq.
  struct Relay {
    std::string requester;
    uint64_t requester_seq = 0;
    std::string target;
    int64_t expires_ns = 0;
  };
  struct Pending {
    Update update;
    int transmits = 0;
  };
  using GossipMap = std::map<std::string, Pending>;
  // Send's order: least-sent first, then by name.
  struct LeastSent {
    bool operator()(GossipMap::iterator a, GossipMap::iterator b) const {
      return a->second.transmits != b->second.transmits ? a->second.transmits < b->second.transmits
                                                        : a->first < b->first;
    }
  };

  Group(std::string name, Config config, Transport* transport);

  // Invariants:
  //   probe_order_ holds each key of members_ exactly once; probe_next_ <= its size.
  //   gossip_ holds updates about name_ or a key of members_ only.
  //   gossip_order_ holds each entry of gossip_ exactly once (so an entry's
  //   transmits change only while it is out of gossip_order_).
  //   After the first Tick, beat_started_ns_[b % kBeatHistory] is when beat b
  //   began, for initial_beat <= b <= beat_ and b > beat_ - kBeatHistory.
  //   probe_->target, and every relay's target, is a key of members_
  //   (SetPeers drops the probe or relay of a removed member).
  //   next_expiry_ns_ <= SuspicionDeadlineNs(m) for every Suspect member m.

  void StartPeriod(int64_t now_ns);
  void SendIndirectProbes();
  void ExpireSuspicions(int64_t now_ns);
  // When the suspicion of `m` (a Suspect) turns into Dead.
  int64_t SuspicionDeadlineNs(const Member& m) const;
  // Why `p` from `sender` must be dropped, if it must; checks only.
  std::optional<DropReason> Screen(const Packet& p, const Member& sender) const;
  void Apply(const Update& u, int64_t now_ns);
  void Suspect(const std::string& name, Member& m, const std::string& from, int64_t now_ns);
  void Refute(uint64_t claimed);
  void Gossip(Update u);
  void ForgetGossip(const std::string& member);
  void HandleAck(const Packet& p);
  // Builds the header and piggyback of `p` and sends it to `to_address`;
  // `about` is the receiving member, told first what we think of it when
  // that is not Alive (so it can refute without waiting for gossip).
  void Send(const std::string& to_address, const std::string& about, Packet p);

  size_t GroupSize() const { return members_.size() + 1; }

  const std::string name_;
  const Config config_;
  const WireKey wire_key_;
  Transport* const transport_;
  Rng rng_;
  LeaseAckFn on_lease_ack_;

  uint64_t incarnation_;
  int64_t beat_;
  // When each of the last kBeatHistory beats began, for LeaseAcks.
  static constexpr size_t kBeatHistory = 128;
  std::array<int64_t, kBeatHistory> beat_started_ns_{};
  int64_t next_period_ns_ = -1;  // -1: before the first Tick
  // ExpireSuspicions has nothing to do before this (see Invariants);
  // Suspect() lowers it, SetPeers resets it.
  int64_t next_expiry_ns_ = 0;
  uint64_t next_seq_ = 1;

  std::map<std::string, Member> members_;
  std::vector<std::string> probe_order_;  // shuffled; a new round reshuffles
  size_t probe_next_ = 0;
  std::optional<Probe> probe_;
  static constexpr size_t kMaxRelays = 256;
  std::map<uint64_t, Relay> relays_;
  GossipMap gossip_;  // newest update about each member
  // gossip_ in Send's order, kept so that a packet costs the updates it
  // carries, not the whole backlog (a thousand members each learning the
  // others' incarnations at start-up is a backlog of a thousand).
  std::set<GossipMap::iterator, LeastSent> gossip_order_;
  std::map<std::string, int64_t> heard_;  // since the last TakeHeardDirectly
  GroupStats stats_;
};

}  // namespace drover::membership
