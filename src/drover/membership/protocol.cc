#include "drover/membership/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "drover/common/ids.h"

namespace drover::membership {
namespace {

// "10.0.0.2:7946", "[fd00::2]:7946": the Group only stores and hands these
// to the Transport, which parses them; here they are only bounded.
constexpr size_t kMaxAddressBytes = 64;

Status ValidateAddress(const std::string& member, const std::string& address) {
  if (address.empty() || address.size() > kMaxAddressBytes) {
    return InvalidArgument(
        fmt::format("member '{}' has address of {} bytes, want 1 to {}", member, address.size(), kMaxAddressBytes));
  }
  for (char c : address) {
    if (c <= ' ' || c > '~') {
      return InvalidArgument(fmt::format("member '{}' has an address with a space or control character", member));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateConfig(const Config& c) {
  if (c.protocol_period_ns <= 0) return InvalidArgument("membership protocol period must be positive");
  if (c.probe_timeout_ns <= 0 || c.probe_timeout_ns >= c.protocol_period_ns) {
    return InvalidArgument("membership probe timeout must be positive and shorter than the protocol period");
  }
  if (c.indirect_probes < 0 || c.indirect_probes > 16) {
    return InvalidArgument(fmt::format("membership indirect probes {} not in 0..16", c.indirect_probes));
  }
  if (c.suspicion_mult < 1 || c.suspicion_max_mult < 1 || c.retransmit_mult < 1) {
    return InvalidArgument("membership suspicion and retransmit multipliers must be at least 1");
  }
  // Room for the largest header and one update with 63-byte names.
  if (c.max_packet_bytes < 512 || c.max_packet_bytes > kMaxDatagramBytes) {
    return InvalidArgument(
        fmt::format("membership max packet bytes {} not in 512..{}", c.max_packet_bytes, kMaxDatagramBytes));
  }
  if (c.replay_window_beats < 0) return InvalidArgument("membership replay window must not be negative");
  // Beats go on the wire as non-negative int64; leave centuries of headroom.
  if (c.initial_beat < 0 || c.initial_beat > std::numeric_limits<int64_t>::max() / 2) {
    return InvalidArgument("membership initial beat out of range");
  }
  return Status::Ok();
}

int64_t SuspicionTimeoutNs(const Config& config, size_t group_size, size_t confirmations) {
  const double n = static_cast<double>(std::max<size_t>(group_size, 1));
  const double min =
      config.suspicion_mult * std::max(1.0, std::log10(n)) * static_cast<double>(config.protocol_period_ns);
  const double max = config.suspicion_max_mult * min;
  // Lifeguard expects up to k independent suspicions: the probers' own
  // and those of the members they asked. Without any to expect, no decay.
  const int64_t k = std::min<int64_t>(config.indirect_probes, static_cast<int64_t>(group_size) - 2);
  if (k < 1) return static_cast<int64_t>(min);
  const double frac = std::log(static_cast<double>(confirmations) + 1) / std::log(static_cast<double>(k) + 1);
  return static_cast<int64_t>(std::max(min, max - (max - min) * frac));
}

int RetransmitLimit(const Config& config, size_t group_size) {
  const double scale = std::ceil(std::log10(static_cast<double>(group_size) + 1));
  return config.retransmit_mult * std::max(1, static_cast<int>(scale));
}

Result<std::unique_ptr<Group>> Group::Create(std::string name, Config config, Transport* transport) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(name));
  DROVER_RETURN_IF_ERROR(ValidateConfig(config));
  if (transport == nullptr) return InvalidArgument("membership group needs a transport");
  return std::unique_ptr<Group>(new Group(std::move(name), std::move(config), transport));
}

Group::Group(std::string name, Config config, Transport* transport)
    : name_(std::move(name)),
      config_(std::move(config)),
      wire_key_{config_.cluster_id, config_.key},
      transport_(transport),
      rng_(config_.seed),
      incarnation_(config_.initial_incarnation),
      beat_(config_.initial_beat) {}

Status Group::SetPeers(const std::map<std::string, std::string>& peers) {
  for (const auto& [n, address] : peers) {
    if (n == name_) continue;
    DROVER_RETURN_IF_ERROR(ValidateNodeName(n));
    DROVER_RETURN_IF_ERROR(ValidateAddress(n, address));
  }
  for (auto it = members_.begin(); it != members_.end();) {
    const std::string& gone = it->first;
    if (peers.contains(gone)) {
      ++it;
      continue;
    }
    ForgetGossip(gone);
    heard_.erase(gone);
    if (probe_ && probe_->target == gone) probe_.reset();
    std::erase_if(relays_, [&](const auto& r) { return r.second.target == gone || r.second.requester == gone; });
    const auto pos = std::find(probe_order_.begin(), probe_order_.end(), gone);
    if (static_cast<size_t>(pos - probe_order_.begin()) < probe_next_) --probe_next_;
    probe_order_.erase(pos);
    it = members_.erase(it);
  }
  next_expiry_ns_ = 0;  // the group size, so every suspicion timeout, may have changed
  for (const auto& [n, address] : peers) {
    if (n == name_) continue;
    auto [it, inserted] = members_.try_emplace(n);
    it->second.address = address;
    if (!inserted) continue;
    // SWIM: a newcomer goes to a random place in the current round, so it
    // is probed within this round or the next.
    const auto at = static_cast<size_t>(rng_.Uniform(0, static_cast<int64_t>(probe_order_.size())));
    probe_order_.insert(probe_order_.begin() + static_cast<std::ptrdiff_t>(at), n);
    if (at < probe_next_) ++probe_next_;
  }
  return Status::Ok();
}

void Group::Tick(int64_t now_ns) {
  if (next_period_ns_ < 0 || now_ns >= next_period_ns_) StartPeriod(now_ns);
  if (probe_ && !probe_->acked && !probe_->indirect_sent && now_ns - probe_->sent_ns >= config_.probe_timeout_ns) {
    SendIndirectProbes();
  }
  ExpireSuspicions(now_ns);
  std::erase_if(relays_, [&](const auto& r) { return r.second.expires_ns <= now_ns; });
}

void Group::StartPeriod(int64_t now_ns) {
  if (probe_ && !probe_->acked) {
    Member& m = members_.at(probe_->target);
    ++m.counters.failed_probes;
    if (m.state != MemberState::kDead) Suspect(probe_->target, m, name_, now_ns);
  }
  probe_.reset();

  const int64_t period = config_.protocol_period_ns;
  if (next_period_ns_ >= 0) ++beat_;
  beat_started_ns_[static_cast<size_t>(beat_) % kBeatHistory] = now_ns;
  // Keep the schedule when a Tick is a little late; after a long stall
  // start afresh rather than run the missed periods back to back.
  next_period_ns_ =
      (next_period_ns_ < 0 || now_ns - next_period_ns_ >= period) ? now_ns + period : next_period_ns_ + period;

  if (probe_order_.empty()) return;
  if (probe_next_ >= probe_order_.size()) {
    std::shuffle(probe_order_.begin(), probe_order_.end(), rng_.engine());
    probe_next_ = 0;
  }
  const std::string& target = probe_order_[probe_next_++];
  probe_ = Probe{target, next_seq_++, now_ns, false, false};
  Member& m = members_.at(target);
  ++m.counters.probes;
  ++stats_.probes;
  Packet ping;
  ping.type = MessageType::kPing;
  ping.seq = probe_->seq;
  ping.target = target;
  Send(m.address, target, std::move(ping));
}

void Group::SendIndirectProbes() {
  probe_->indirect_sent = true;
  std::vector<std::string> helpers;
  std::vector<std::string> candidates;
  for (const auto& [n, m] : members_) {
    if (n != probe_->target && m.state == MemberState::kAlive) candidates.push_back(n);
  }
  std::sample(candidates.begin(), candidates.end(), std::back_inserter(helpers),
              static_cast<size_t>(config_.indirect_probes), rng_.engine());
  for (const std::string& helper : helpers) {
    Packet req;
    req.type = MessageType::kPingReq;
    req.seq = probe_->seq;
    req.target = probe_->target;
    ++stats_.ping_reqs_sent;
    Send(members_.at(helper).address, helper, std::move(req));
  }
}

int64_t Group::SuspicionDeadlineNs(const Member& m) const {
  const size_t confirmations = m.suspecters.empty() ? 0 : m.suspecters.size() - 1;
  return m.suspect_since_ns + SuspicionTimeoutNs(config_, GroupSize(), confirmations);
}

void Group::ExpireSuspicions(int64_t now_ns) {
  // Every Tick, and a thousand simulated nodes of a thousand members each
  // share one thread (udp_hub.h): walk the members only when one may expire.
  if (now_ns < next_expiry_ns_) return;
  next_expiry_ns_ = std::numeric_limits<int64_t>::max();
  for (auto& [n, m] : members_) {
    if (m.state != MemberState::kSuspect) continue;
    const int64_t deadline = SuspicionDeadlineNs(m);
    if (now_ns < deadline) {
      next_expiry_ns_ = std::min(next_expiry_ns_, deadline);
      continue;
    }
    m.state = MemberState::kDead;
    m.suspecters.clear();
    ++stats_.deaths;
    Gossip(Update{n, MemberState::kDead, m.incarnation, name_});
  }
}

void Group::Suspect(const std::string& name, Member& m, const std::string& from, int64_t now_ns) {
  if (m.state == MemberState::kAlive) {
    m.state = MemberState::kSuspect;
    m.suspect_since_ns = now_ns;
    m.suspecters = {from};
    ++m.counters.suspected;
    if (from == name_) ++stats_.suspicions;
    next_expiry_ns_ = std::min(next_expiry_ns_, SuspicionDeadlineNs(m));
    Gossip(Update{name, MemberState::kSuspect, m.incarnation, from});
  } else if (m.state == MemberState::kSuspect && m.suspecters.insert(from).second) {
    // An independent confirmation: it shortens the timeout here, and passed
    // on, everywhere else too.
    next_expiry_ns_ = std::min(next_expiry_ns_, SuspicionDeadlineNs(m));
    Gossip(Update{name, MemberState::kSuspect, m.incarnation, from});
  }
}

void Group::Refute(uint64_t claimed) {
  incarnation_ = std::max(incarnation_, claimed) + 1;
  ++stats_.refutations;
  Gossip(Update{name_, MemberState::kAlive, incarnation_, ""});
}

void Group::Gossip(Update u) {
  auto [it, inserted] = gossip_.try_emplace(u.member);
  if (!inserted) gossip_order_.erase(it);
  it->second = Pending{std::move(u), 0};
  gossip_order_.insert(it);
}

void Group::ForgetGossip(const std::string& member) {
  auto it = gossip_.find(member);
  if (it == gossip_.end()) return;
  gossip_order_.erase(it);
  gossip_.erase(it);
}

// SWIM's ordering: a higher incarnation wins; at the same incarnation Dead
// beats Suspect beats Alive. Only the member itself raises its incarnation,
// so a claim about us at or above ours (or Alive above ours: an earlier
// life's) is refuted, never accepted.
void Group::Apply(const Update& u, int64_t now_ns) {
  if (u.member == name_) {
    if (u.incarnation >= incarnation_ && (u.state != MemberState::kAlive || u.incarnation > incarnation_)) {
      Refute(u.incarnation);
    }
    return;
  }
  auto it = members_.find(u.member);
  if (it == members_.end()) return;  // the control plane decides who is a member
  Member& m = it->second;
  switch (u.state) {
    case MemberState::kAlive:
      if (u.incarnation <= m.incarnation) return;
      m.incarnation = u.incarnation;
      m.state = MemberState::kAlive;
      m.suspecters.clear();
      Gossip(u);
      return;
    case MemberState::kSuspect:
      if (u.incarnation < m.incarnation) return;
      if (u.incarnation > m.incarnation) {
        m.incarnation = u.incarnation;
        m.state = MemberState::kAlive;  // Suspect() below starts a fresh suspicion
        m.suspecters.clear();
      }
      Suspect(u.member, m, u.from, now_ns);
      return;
    case MemberState::kDead:
      if (u.incarnation < m.incarnation || (m.state == MemberState::kDead && u.incarnation == m.incarnation)) return;
      m.incarnation = u.incarnation;
      m.state = MemberState::kDead;
      m.suspecters.clear();
      Gossip(u);
      return;
  }
}

std::optional<DropReason> Group::Screen(const Packet& p, const Member& sender) const {
  // The sender never sends an incarnation below one it already announced,
  // nor (within one incarnation) a beat below one it already used; a small
  // window lets UDP reorder across a period boundary.
  if (p.incarnation < std::max(sender.incarnation, sender.heard_incarnation)) return DropReason::kReplay;
  if (p.incarnation == sender.heard_incarnation && sender.heard_beat >= 0 &&
      p.beat < sender.heard_beat - config_.replay_window_beats) {
    return DropReason::kReplay;
  }
  switch (p.type) {
    case MessageType::kPing:
      // Meant for whoever had our address before us: do not answer for it.
      if (p.target != name_) return DropReason::kMisdirected;
      break;
    case MessageType::kPingReq:
      if (p.target == p.sender || !members_.contains(p.target)) return DropReason::kMisdirected;
      break;
    case MessageType::kLeaseAck:
      if (next_period_ns_ < 0 || p.lease_beat > beat_ || p.lease_beat < config_.initial_beat ||
          p.lease_beat <= beat_ - static_cast<int64_t>(kBeatHistory)) {
        return DropReason::kBadLeaseAck;
      }
      break;
    case MessageType::kAck: break;
  }
  return std::nullopt;
}

void Group::OnPacket(const std::string& from_address, std::string_view bytes, int64_t now_ns) {
  auto decoded = Decode(bytes, wire_key_, config_.max_packet_bytes);
  if (const DropReason* reason = std::get_if<DropReason>(&decoded)) {
    ++stats_.dropped[static_cast<size_t>(*reason)];
    return;
  }
  const Packet& p = std::get<Packet>(decoded);
  auto it = members_.find(p.sender);  // we are not in members_: our own packets echoed back land here too
  if (it == members_.end()) {
    ++stats_.dropped[static_cast<size_t>(DropReason::kUnknownSender)];
    return;
  }
  Member& sender = it->second;
  if (auto reason = Screen(p, sender)) {
    ++stats_.dropped[static_cast<size_t>(*reason)];
    return;
  }

  ++stats_.packets_received;
  ++sender.counters.packets;
  if (p.incarnation > sender.heard_incarnation) sender.heard_beat = -1;
  sender.heard_incarnation = p.incarnation;
  sender.heard_beat = std::max(sender.heard_beat, p.beat);
  auto [heard, first] = heard_.try_emplace(p.sender, p.beat);
  if (!first) heard->second = std::max(heard->second, p.beat);

  for (const Update& u : p.updates) Apply(u, now_ns);
  // A member speaks for itself. Its newer incarnation is news to gossip
  // when it refutes what we believed (suspect, dead); to a view that has
  // it alive it is not: members come from the control plane, so there is
  // no join to spread, and gossiping every member's first-heard
  // incarnation would be N^2 updates at start-up (a thousand simulated
  // nodes drowned in them; docs/membership.md). Its own refutation, in
  // `p.updates` above, was gossiped on already.
  if (p.incarnation > sender.incarnation) {
    if (sender.state == MemberState::kAlive) {
      sender.incarnation = p.incarnation;
    } else {
      Apply(Update{p.sender, MemberState::kAlive, p.incarnation, ""}, now_ns);
    }
  }

  switch (p.type) {
    case MessageType::kPing: {
      Packet ack;
      ack.type = MessageType::kAck;
      ack.seq = p.seq;
      ack.target = name_;
      // To where it came from: that is where the prober listens.
      Send(from_address, p.sender, std::move(ack));
      break;
    }
    case MessageType::kPingReq: {
      // A flood of ping-reqs must not grow memory; refusing makes the
      // requester suspect the target, which the target can refute.
      if (relays_.size() >= kMaxRelays) break;
      const uint64_t seq = next_seq_++;
      relays_[seq] = Relay{p.sender, p.seq, p.target, now_ns + config_.probe_timeout_ns};
      ++stats_.relays;
      Packet ping;
      ping.type = MessageType::kPing;
      ping.seq = seq;
      ping.target = p.target;
      Send(members_.at(p.target).address, p.target, std::move(ping));
      break;
    }
    case MessageType::kAck: HandleAck(p); break;
    case MessageType::kLeaseAck:
      ++stats_.lease_acks;
      if (on_lease_ack_)
        on_lease_ack_(p.lease_beat, beat_started_ns_[static_cast<size_t>(p.lease_beat) % kBeatHistory]);
      break;
  }
}

void Group::HandleAck(const Packet& p) {
  if (probe_ && !probe_->acked && p.seq == probe_->seq && p.target == probe_->target) {
    probe_->acked = true;
    MemberCounters& c = members_.at(probe_->target).counters;
    ++(p.sender == p.target ? c.acks : c.indirect_acks);
    return;
  }
  // Otherwise the answer to a ping we sent for someone else, or a late one.
  auto r = relays_.find(p.seq);
  if (r == relays_.end() || r->second.target != p.target || p.sender != p.target) return;
  Packet forward;
  forward.type = MessageType::kAck;
  forward.seq = r->second.requester_seq;
  forward.target = p.target;
  const std::string requester = r->second.requester;
  relays_.erase(r);
  Send(members_.at(requester).address, requester, std::move(forward));
}

Status Group::SendLeaseAck(const std::string& member, int64_t beat) {
  auto it = members_.find(member);
  if (it == members_.end()) return NotFound(fmt::format("member '{}' not found", member));
  if (beat < 0) return InvalidArgument(fmt::format("lease beat {} for member '{}' is negative", beat, member));
  Packet p;
  p.type = MessageType::kLeaseAck;
  p.lease_beat = beat;
  Send(it->second.address, member, std::move(p));
  return Status::Ok();
}

void Group::Announce(int64_t now_ns, size_t fanout) {
  if (next_period_ns_ < 0 || fanout == 0) return;
  ++beat_;
  beat_started_ns_[static_cast<size_t>(beat_) % kBeatHistory] = now_ns;
  std::vector<std::string> alive;
  std::vector<std::string> others;
  for (const auto& [n, m] : members_) (m.state == MemberState::kAlive ? alive : others).push_back(n);
  std::vector<std::string> to;
  std::sample(alive.begin(), alive.end(), std::back_inserter(to), fanout, rng_.engine());
  if (to.size() < fanout)
    std::sample(others.begin(), others.end(), std::back_inserter(to), fanout - to.size(), rng_.engine());
  for (const std::string& member : to) {
    Packet ping;
    ping.type = MessageType::kPing;
    ping.seq = next_seq_++;  // no probe or relay has it: the ack is only news
    ping.target = member;
    Send(members_.at(member).address, member, std::move(ping));
  }
}

std::map<std::string, int64_t> Group::TakeHeardDirectly() { return std::exchange(heard_, {}); }

std::vector<MemberView> Group::Members() const {
  std::vector<MemberView> out;
  out.reserve(members_.size());
  for (const auto& [n, m] : members_)
    out.push_back(MemberView{n, m.address, m.state, m.incarnation, m.heard_beat, m.counters});
  return out;
}

void Group::Send(const std::string& to_address, const std::string& about, Packet p) {
  p.sender = name_;
  p.incarnation = incarnation_;
  p.beat = beat_;
  size_t size = EncodedSize(p);
  const auto fits = [&](const Update& u) {
    return p.updates.size() < kMaxUpdatesPerPacket && size + EncodedSize(u) <= config_.max_packet_bytes;
  };
  if (auto it = members_.find(about); it != members_.end() && it->second.state != MemberState::kAlive) {
    Update u{about, it->second.state, it->second.incarnation, name_};
    size += EncodedSize(u);
    p.updates.push_back(std::move(u));
  }
  // Least-sent first, so that news goes out before what most already know.
  // An update that does not fit is passed over for smaller ones after it,
  // until not even the smallest possible one would fit.
  const size_t smallest = EncodedSize(Update{});
  std::vector<GossipMap::iterator> carried;
  for (GossipMap::iterator it : gossip_order_) {
    if (p.updates.size() >= kMaxUpdatesPerPacket || size + smallest > config_.max_packet_bytes) break;
    const Update& u = it->second.update;
    if (!fits(u) || (!p.updates.empty() && p.updates.front() == u)) continue;
    size += EncodedSize(u);
    p.updates.push_back(u);
    carried.push_back(it);
  }
  const int limit = RetransmitLimit(config_, GroupSize());
  for (GossipMap::iterator it : carried) {
    gossip_order_.erase(it);
    if (++it->second.transmits >= limit) {
      gossip_.erase(it);
    } else {
      gossip_order_.insert(it);
    }
  }
  ++stats_.packets_sent;
  transport_->Send(to_address, Encode(p, wire_key_));
}

}  // namespace drover::membership
