#pragma once
// Test support: a real etcd cluster (Debian's etcd-server binary) of one or
// more members on loopback, each a child process with its own data
// directory, for the etcd store's contract suite and the HA tests.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace drover::testing {

class EtcdCluster {
 public:
  // Starts `members` members (each on two free loopback ports) and waits
  // until they have elected a leader. Fails the calling test (and returns
  // null) when etcd is missing or does not come up.
  static std::unique_ptr<EtcdCluster> Start(int members = 1);
  ~EtcdCluster();  // kills every member and removes the data

  // "127.0.0.1:port" of each member's client listener.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // "etcd://a,b,c/" + prefix
  std::string Url(const std::string& prefix = "") const;

  void Signal(int member, int sig);
  // Waits until `member` answers a status request with a leader, or `timeout`.
  bool WaitReady(int member, std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

 private:
  EtcdCluster() = default;
  std::string dir_;
  std::vector<std::string> endpoints_;
  std::vector<pid_t> pids_;
};

}  // namespace drover::testing
