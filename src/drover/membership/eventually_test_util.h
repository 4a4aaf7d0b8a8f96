#pragma once
// For tests of real sockets and threads (UdpNode, UdpHub): there is no event
// to wait on, so they poll a condition.

#include <chrono>
#include <functional>
#include <thread>

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

}  // namespace drover::membership
