#include "drover/membership/udp_node.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

namespace drover::membership {
namespace {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// "10.0.0.7:7946" or "[fd00::7]:7946"; numeric only (no resolver on this path).
Result<SocketAddress> ParseAddress(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return InvalidArgument(fmt::format("address '{}' has no port", text));
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port_text.empty() || port > 65535) {
    return InvalidArgument(fmt::format("address '{}' has an invalid port", text));
  }
  SocketAddress out;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    const std::string ip(host.substr(1, host.size() - 2));
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
    if (inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr) != 1) {
      return InvalidArgument(fmt::format("address '{}' has an invalid IPv6 host", text));
    }
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  const std::string ip(host);
  auto* in4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  if (inet_pton(AF_INET, ip.c_str(), &in4->sin_addr) != 1) {
    return InvalidArgument(fmt::format("address '{}' has an invalid IPv4 host", text));
  }
  in4->sin_family = AF_INET;
  in4->sin_port = htons(static_cast<uint16_t>(port));
  out.length = sizeof(sockaddr_in);
  return out;
}

std::string FormatAddress(const sockaddr_storage& a) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    return fmt::format("[{}]:{}", ip, ntohs(in6->sin6_port));
  }
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(&a);
  inet_ntop(AF_INET, &in4->sin_addr, ip, sizeof(ip));
  return fmt::format("{}:{}", ip, ntohs(in4->sin_port));
}

}  // namespace

// Sends on the node's socket. Called by the Group, so always under the
// node's mutex; Close() (also under it) makes later sends no-ops, so a
// closed descriptor number reused elsewhere is never written to.
class UdpNode::SocketTransport final : public Transport {
 public:
  explicit SocketTransport(int fd) : fd_(fd) {}
  ~SocketTransport() override { Close(); }

  void Send(const std::string& to_address, std::string bytes) override {
    if (fd_ < 0) return;
    auto to = ParseAddress(to_address);
    if (!to.ok() || ::sendto(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT, to->get(), to->length) < 0) {
      ++send_errors_;
    }
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }
  uint64_t send_errors() const { return send_errors_; }

 private:
  int fd_;
  uint64_t send_errors_ = 0;
};

Result<std::string> UdpNode::PickPort(const std::string& address) {
  DROVER_ASSIGN_OR_RETURN(SocketAddress want, ParseAddress(address));
  const uint16_t port = want.storage.ss_family == AF_INET6
                            ? reinterpret_cast<const sockaddr_in6*>(&want.storage)->sin6_port
                            : reinterpret_cast<const sockaddr_in*>(&want.storage)->sin_port;
  if (port != 0) return address;
  const int fd = ::socket(want.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  const bool ok = fd >= 0 && ::bind(fd, want.get(), want.length) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) return Unavailable(fmt::format("cannot find a free port on '{}': {}", address, std::strerror(err)));
  return FormatAddress(bound);
}

int64_t UdpNode::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Result<std::unique_ptr<UdpNode>> UdpNode::Start(UdpNodeOptions options) {
  const int64_t tick_interval_ns = options.hub ? options.hub->tick_interval_ns() : options.tick_interval_ns;
  if (tick_interval_ns <= 0 || tick_interval_ns >= options.config.probe_timeout_ns) {
    return InvalidArgument("membership tick interval must be positive and shorter than the probe timeout");
  }
  DROVER_ASSIGN_OR_RETURN(SocketAddress bind_to, ParseAddress(options.bind_address));
  const int fd = ::socket(bind_to.storage.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("membership socket: {}", std::strerror(errno)));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::bind(fd, bind_to.get(), bind_to.length) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    const int err = errno;
    ::close(fd);
    return Unavailable(fmt::format("membership cannot bind '{}': {}", options.bind_address, std::strerror(err)));
  }
  const auto wall_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  options.config.initial_incarnation = static_cast<uint64_t>(wall_ms);
  options.config.initial_beat = wall_ms;

  std::unique_ptr<UdpNode> node(
      new UdpNode(fd, FormatAddress(bound), options.tick_interval_ns, std::move(options.on_lease_ack)));
  DROVER_ASSIGN_OR_RETURN(std::unique_ptr<Group> group,
                          Group::Create(std::move(options.name), std::move(options.config), node->transport_.get()));
  group->set_on_lease_ack([n = node.get()](int64_t beat, int64_t started_ns) {
    n->mu_.AssertHeld();  // called from OnPacket, under mu_
    n->lease_acks_.push_back(LeaseAck{beat, started_ns});
  });
  {
    MutexLock lock(&node->mu_);  // not yet shared: for the analysis
    node->group_ = std::move(group);
  }
  if (options.hub) {
    DROVER_ASSIGN_OR_RETURN(node->attachment_,
                            options.hub->Attach(fd, [n = node.get()](bool readable) { n->Serve(readable); }));
  } else {
    node->thread_ = std::thread([n = node.get()] { n->Run(); });
  }
  return node;
}

UdpNode::UdpNode(int fd, std::string address, int64_t tick_interval_ns, Group::LeaseAckFn on_lease_ack)
    : address_(std::move(address)),
      tick_interval_ns_(tick_interval_ns),
      on_lease_ack_(std::move(on_lease_ack)),
      transport_(std::make_unique<SocketTransport>(fd)) {}

UdpNode::~UdpNode() { Stop(); }

void UdpNode::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (attachment_) attachment_->Detach();  // before the close: the hub must not poll a reused descriptor
  MutexLock lock(&mu_);
  transport_->Close();
}

void UdpNode::Run() {
  const int fd = transport_->fd();  // closed only by Stop, after this thread ends
  const int timeout_ms = std::max<int>(1, static_cast<int>(tick_interval_ns_ / 1'000'000));
  while (!stop_.load()) {
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, timeout_ms);
    Serve(/*drain=*/true);
  }
}

void UdpNode::Serve(bool drain) {
  // One buffer per serving thread (the node's own, or a hub's for all of
  // its nodes), not one per node.
  thread_local std::string buffer;
  std::vector<LeaseAck> acks;
  {
    MutexLock lock(&mu_);
    const int fd = transport_->fd();  // -1 once stopped (a hub round that began before Stop)
    // A bounded batch, so that a flood cannot starve the ticks (or, on a
    // hub, the other nodes).
    for (int i = 0; drain && fd >= 0 && i < 64; ++i) {
      // One byte more than any valid packet, so an oversized datagram stays
      // oversized (bad_length) instead of being cut to a plausible size.
      buffer.resize(kMaxDatagramBytes + 1);
      sockaddr_storage from{};
      socklen_t from_len = sizeof(from);
      const ssize_t n =
          ::recvfrom(fd, buffer.data(), buffer.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0) break;  // EAGAIN: drained; anything else: retry next round
      group_->OnPacket(FormatAddress(from), std::string_view(buffer.data(), static_cast<size_t>(n)), NowNs());
    }
    group_->Tick(NowNs());
    acks.swap(lease_acks_);
  }
  if (on_lease_ack_) {
    for (const LeaseAck& a : acks) on_lease_ack_(a.beat, a.started_ns);
  }
}

Status UdpNode::SetPeers(const std::map<std::string, std::string>& peers) {
  for (const auto& [name, address] : peers) {
    auto parsed = ParseAddress(address);
    if (!parsed.ok()) return InvalidArgument(fmt::format("member '{}': {}", name, parsed.status().message()));
  }
  MutexLock lock(&mu_);
  return group_->SetPeers(peers);
}

std::vector<MemberView> UdpNode::Members() const {
  MutexLock lock(&mu_);
  return group_->Members();
}

std::map<std::string, int64_t> UdpNode::TakeHeardDirectly() {
  MutexLock lock(&mu_);
  return group_->TakeHeardDirectly();
}

Status UdpNode::SendLeaseAck(const std::string& member, int64_t beat) {
  MutexLock lock(&mu_);
  return group_->SendLeaseAck(member, beat);
}

void UdpNode::Announce(size_t fanout) {
  MutexLock lock(&mu_);
  group_->Announce(NowNs(), fanout);
}

UdpNodeStats UdpNode::Stats() const {
  MutexLock lock(&mu_);
  return UdpNodeStats{group_->stats(), transport_->send_errors()};
}

int64_t UdpNode::Beat() const {
  MutexLock lock(&mu_);
  return group_->beat();
}

uint64_t UdpNode::Incarnation() const {
  MutexLock lock(&mu_);
  return group_->incarnation();
}

}  // namespace drover::membership
