#pragma once
// For tests of real sockets and threads (UdpNode, UdpHub): there is no event
// to wait on, so they poll a condition; and the pairing of two nodes.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "drover/membership/udp_node.h"

namespace drover::membership {

// Polls `done` until it holds or 10 s pass.
inline bool Eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// Makes nodes "a" and "b" each other's peers and waits until b has heard a
// directly: a's beat as b heard it, -1 when it never did in 10 s.
inline int64_t PairAndHearA(UdpNode& a, UdpNode& b) {
  const std::map<std::string, std::string> peers = {{"a", a.address()}, {"b", b.address()}};
  if (!a.SetPeers(peers).ok() || !b.SetPeers(peers).ok()) return -1;
  int64_t a_beat = -1;
  Eventually([&] {
    auto heard = b.TakeHeardDirectly();
    if (heard.contains("a")) a_beat = heard["a"];
    return a_beat >= 0;
  });
  return a_beat;
}

}  // namespace drover::membership
