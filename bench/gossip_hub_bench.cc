// gossip_hub_bench: N membership nodes (udp_node.h) served by one UdpHub
// (udp_hub.h) on loopback, every node told of every other, for what gossip
// costs `drover up --simulate N`. Not a Google Benchmark: one run of a
// fixed length, and the figures are rates over it.
//
//   ./build/bench/gossip_hub_bench --nodes 1000 --seconds 30 --period-ms 200
//
// Prints, every --report-s and for the whole run (start-up excluded), the
// CPU seconds the process used (getrusage, user + system) per wall second,
// packets sent and received per second, and the false failures: no node
// stops, so every suspicion is false, and a death or a member not Alive
// means gossip did not keep up. "missed" counts hub timer periods that
// passed during a round: non-zero, the hub's thread is saturated.
//
// By default the hub is held while the nodes are told their peers, so that
// all start together; --staggered-start lets them gossip meanwhile, as
// agents that register one after another would.

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "drover/membership/udp_hub.h"
#include "drover/membership/udp_node.h"

namespace {

using drover::membership::MemberState;
using drover::membership::MemberView;
using drover::membership::UdpHub;
using drover::membership::UdpHubOptions;
using drover::membership::UdpHubStats;
using drover::membership::UdpNode;
using drover::membership::UdpNodeOptions;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One socket per node: 1,000 nodes pass the usual soft limit of 1,024.
void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

struct Totals {
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t dropped = 0;
  uint64_t send_errors = 0;
  uint64_t suspicions = 0;
  uint64_t deaths = 0;
  uint64_t not_alive = 0;  // (observer, member) pairs not Alive now
  uint64_t dead = 0;       // of which Dead
};

// `views`: also count the members each node does not see Alive (a copy of
// every node's member list: costly, so only at the end).
Totals Sum(const std::vector<std::unique_ptr<UdpNode>>& nodes, bool views) {
  Totals t;
  for (const auto& n : nodes) {
    const auto s = n->Stats();
    t.sent += s.group.packets_sent;
    t.received += s.group.packets_received;
    for (uint64_t d : s.group.dropped) t.dropped += d;
    t.send_errors += s.send_errors;
    t.suspicions += s.group.suspicions;
    t.deaths += s.group.deaths;
    if (!views) continue;
    for (const MemberView& m : n->Members()) {
      if (m.state != MemberState::kAlive) ++t.not_alive;
      if (m.state == MemberState::kDead) ++t.dead;
    }
  }
  return t;
}

// Holds the hub's thread (in the serve function of an fd of its own, as
// UdpHub::Attach allows) from Close until destroyed: no node ticks or
// receives meanwhile.
class Gate {
 public:
  ~Gate() {
    if (!attachment_) return;
    open_.set_value();
    attachment_->Detach();
    ::close(fd_);
  }

  // Returns once the hub's thread waits in the gate.
  drover::Status Close(UdpHub& hub) {
    fd_ = ::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);  // readable at once
    if (fd_ < 0) return drover::Unavailable("gate eventfd");
    auto attached = hub.Attach(fd_, [this](bool) {
      uint64_t count = 0;
      if (::read(fd_, &count, sizeof(count)) != sizeof(count) || count == 0) return;
      held_.set_value();
      open_future_.wait();
    });
    if (!attached.ok()) return attached.status();
    attachment_ = std::move(*attached);
    held_.get_future().wait();
    return drover::Status::Ok();
  }

 private:
  int fd_ = -1;
  std::promise<void> held_;
  std::promise<void> open_;
  std::shared_future<void> open_future_ = open_.get_future().share();
  std::unique_ptr<UdpHub::Attachment> attachment_;
};

}  // namespace

int main(int argc, char** argv) {
  int nodes_count = 1000;
  double seconds = 30;
  int64_t period_ms = 200;
  int64_t tick_ms = 10;
  double report_s = 5;
  bool staggered = false;
  CLI::App app{"N gossip nodes on one UdpHub on loopback"};
  app.add_option("--nodes", nodes_count, "nodes on the hub")->check(CLI::Range(2, 60000));
  app.add_option("--seconds", seconds, "steady gossip to measure, after start-up")->check(CLI::PositiveNumber);
  app.add_option("--period-ms", period_ms, "Config::protocol_period_ns, in ms (default config: 200)");
  app.add_option("--tick-ms", tick_ms, "UdpHubOptions::tick_interval_ns, in ms");
  app.add_option("--report-s", report_s, "seconds between progress lines")->check(CLI::PositiveNumber);
  app.add_flag("--staggered-start", staggered, "let nodes gossip while the others are still told their peers");
  CLI11_PARSE(app, argc, argv);

  RaiseFileLimit();
  auto hub = UdpHub::Start(UdpHubOptions{.tick_interval_ns = tick_ms * 1'000'000});
  if (!hub.ok()) {
    std::fprintf(stderr, "hub: %s\n", hub.status().ToString().c_str());
    return 1;
  }
  const double start_wall = WallSeconds();
  std::vector<std::unique_ptr<UdpNode>> nodes;
  std::map<std::string, std::string> peers;
  for (int i = 0; i < nodes_count; ++i) {
    UdpNodeOptions o;
    o.name = "sim-" + std::to_string(i);
    o.bind_address = "127.0.0.1:0";
    o.config.cluster_id = 1;
    o.config.key = "bench key";
    o.config.protocol_period_ns = period_ms * 1'000'000;
    o.config.seed = static_cast<uint64_t>(i) + 1;
    o.hub = hub->get();
    auto node = UdpNode::Start(std::move(o));
    if (!node.ok()) {
      std::fprintf(stderr, "node %d: %s\n", i, node.status().ToString().c_str());
      return 1;
    }
    peers["sim-" + std::to_string(i)] = (*node)->address();
    nodes.push_back(std::move(*node));
  }
  {
    // Telling a thousand nodes of a thousand peers takes seconds; meanwhile
    // the nodes told first probe the others, which drop packets from
    // members they have not been told of: false suspicions. Unless
    // --staggered-start, the hub's thread waits in Gate until all know.
    Gate gate;
    if (!staggered) {
      auto attached = gate.Close(**hub);
      if (!attached.ok()) {
        std::fprintf(stderr, "gate: %s\n", attached.ToString().c_str());
        return 1;
      }
    }
    for (auto& n : nodes) {
      if (auto s = n->SetPeers(peers); !s.ok()) {
        std::fprintf(stderr, "peers: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const double setup_s = WallSeconds() - start_wall;
  std::printf("nodes %d, protocol period %lld ms, hub tick %lld ms, %s start-up %.1f s\n", nodes_count,
              static_cast<long long>(period_ms), static_cast<long long>(tick_ms), staggered ? "staggered" : "gated",
              setup_s);
  std::printf("%6s %8s %9s %9s %11s %7s %7s %9s\n", "t s", "CPU/s", "sent/s", "recv/s", "suspicions", "deaths",
              "sweeps", "missed");

  // The first intervals also show every node learning every other's
  // incarnation (peers start at 0), gossip with a backlog of N updates.
  Totals previous = Sum(nodes, false);
  UdpHubStats hub_previous = (*hub)->Stats();
  const double wall0 = WallSeconds();
  const double cpu0 = CpuSeconds();
  double wall_previous = wall0;
  double cpu_previous = cpu0;
  while (WallSeconds() - wall0 < seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(report_s, seconds - (WallSeconds() - wall0))));
    const double wall_now = WallSeconds();
    const double cpu_now = CpuSeconds();
    const Totals now = Sum(nodes, false);
    const UdpHubStats hub_now = (*hub)->Stats();
    const double dt = wall_now - wall_previous;
    std::printf("%6.1f %8.3f %9.0f %9.0f %11llu %7llu %7llu %9llu\n", wall_now - wall0, (cpu_now - cpu_previous) / dt,
                (now.sent - previous.sent) / dt, (now.received - previous.received) / dt,
                static_cast<unsigned long long>(now.suspicions - previous.suspicions),
                static_cast<unsigned long long>(now.deaths - previous.deaths),
                static_cast<unsigned long long>(hub_now.sweeps - hub_previous.sweeps),
                static_cast<unsigned long long>(hub_now.missed_ticks - hub_previous.missed_ticks));
    std::fflush(stdout);
    previous = now;
    hub_previous = hub_now;
    wall_previous = wall_now;
    cpu_previous = cpu_now;
  }
  const double wall = WallSeconds() - wall0;
  const double cpu = CpuSeconds() - cpu0;
  previous = Sum(nodes, true);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("whole run %.1f s: CPU %.3f s per wall second (user + system, whole process), max RSS %ld MiB\n", wall,
              cpu / wall, u.ru_maxrss / 1024);
  std::printf("since start-up: packets sent %llu, received %llu, dropped %llu, send errors %llu\n",
              static_cast<unsigned long long>(previous.sent), static_cast<unsigned long long>(previous.received),
              static_cast<unsigned long long>(previous.dropped), static_cast<unsigned long long>(previous.send_errors));
  std::printf(
      "since start-up: false suspicions %llu, false deaths %llu; at the end not alive %llu (dead %llu) of %llu views\n",
      static_cast<unsigned long long>(previous.suspicions), static_cast<unsigned long long>(previous.deaths),
      static_cast<unsigned long long>(previous.not_alive), static_cast<unsigned long long>(previous.dead),
      static_cast<unsigned long long>(nodes.size() * (nodes.size() - 1)));
  std::printf("any false death: %s\n", previous.deaths > 0 ? "YES" : "no");
  nodes.clear();
  return 0;
}
