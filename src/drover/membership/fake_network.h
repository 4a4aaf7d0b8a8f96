#pragma once
// FakeNetwork: Groups on an in-memory network with a manual clock, for
// tests. Each Step() moves the clock by tick_ns, delivers the datagrams due
// by then (after latency_ns, in send order) and ticks every running node.
// Links are cut per direction; a node that is Down() neither ticks nor
// sends nor receives, as if its process were frozen.
//
// Not thread-safe: one test thread.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "drover/membership/protocol.h"

namespace drover::membership {

class FakeNetwork {
 public:
  struct Datagram {
    std::string from;  // addresses
    std::string to;
    std::string bytes;
    int64_t deliver_ns = 0;
  };

  explicit FakeNetwork(int64_t tick_ns = 5'000'000, int64_t latency_ns = 1'000'000)
      : tick_ns_(tick_ns), latency_ns_(latency_ns) {}

  static std::string AddressOf(const std::string& name) { return name + ":7946"; }

  // Adds a node; every node is told of every other (SetPeers) at once.
  Group& Add(const std::string& name, Config config) {
    auto node = std::make_unique<Node>();
    node->transport.net = this;
    node->transport.from = AddressOf(name);
    auto group = Group::Create(name, std::move(config), &node->transport);
    if (!group.ok()) throw std::runtime_error(group.status().ToString());
    node->group = std::move(group).value();
    Group& g = *node->group;
    nodes_[AddressOf(name)] = std::move(node);
    std::map<std::string, std::string> peers;
    for (const auto& [address, n] : nodes_) peers[n->group->name()] = address;
    for (const auto& [address, n] : nodes_) {
      if (!n->group->SetPeers(peers).ok()) throw std::runtime_error("set peers");
    }
    return g;
  }
  Group& operator[](const std::string& name) { return *nodes_.at(AddressOf(name))->group; }

  void CutOneWay(const std::string& from, const std::string& to) { cut_.emplace(AddressOf(from), AddressOf(to)); }
  void Cut(const std::string& a, const std::string& b) {
    CutOneWay(a, b);
    CutOneWay(b, a);
  }
  void Heal() { cut_.clear(); }
  void Down(const std::string& name) { nodes_.at(AddressOf(name))->down = true; }

  // Sees every datagram sent, before any cut applies (for replay tests).
  void set_tap(std::function<void(const Datagram&)> tap) { tap_ = std::move(tap); }

  int64_t now() const { return now_; }

  void Step() {
    now_ += tick_ns_;
    while (!in_flight_.empty() && in_flight_.front().deliver_ns <= now_) {
      Datagram d = std::move(in_flight_.front());
      in_flight_.pop_front();
      Deliver(d.from, d.to, d.bytes);
    }
    for (auto& [address, n] : nodes_) {
      if (!n->down) n->group->Tick(now_);
    }
  }
  void RunFor(int64_t ns) {
    const int64_t until = now_ + ns;
    while (now_ < until) Step();
  }
  // Steps until `done` holds (checked after each step); false past `max_ns`.
  bool RunUntil(const std::function<bool()>& done, int64_t max_ns) {
    const int64_t until = now_ + max_ns;
    while (now_ < until) {
      Step();
      if (done()) return true;
    }
    return false;
  }

  // Hands bytes to the node at `to` now, as if they came from `from`.
  void Deliver(const std::string& from, const std::string& to, std::string_view bytes) {
    auto it = nodes_.find(to);
    if (it == nodes_.end() || it->second->down || cut_.contains({from, to})) return;
    it->second->group->OnPacket(from, bytes, now_);
  }

 private:
  struct NetTransport final : Transport {
    FakeNetwork* net = nullptr;
    std::string from;
    void Send(const std::string& to_address, std::string bytes) override {
      Datagram d{from, to_address, std::move(bytes), net->now_ + net->latency_ns_};
      if (net->tap_) net->tap_(d);
      auto sender = net->nodes_.find(from);
      if (sender != net->nodes_.end() && sender->second->down) return;
      net->in_flight_.push_back(std::move(d));
    }
  };
  struct Node {
    NetTransport transport;
    std::unique_ptr<Group> group;
    bool down = false;
  };

  const int64_t tick_ns_;
  const int64_t latency_ns_;
  int64_t now_ = 1'000'000'000;
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by address
  std::set<std::pair<std::string, std::string>> cut_;   // (from, to) addresses
  std::deque<Datagram> in_flight_;
  std::function<void(const Datagram&)> tap_;
};

}  // namespace drover::membership
