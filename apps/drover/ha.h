#pragma once
// The flags and process plumbing of servers that share an etcd store
// (docs/ha.md): --store and its etcd options, the leader lease, signals
// while standing by, and starting over as a standby after losing the lead.

#include <CLI/CLI.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "drover/common/status.h"
#include "drover/server/server.h"

namespace drover::app {

struct HaFlags {
  std::string store;  // "" | sqlite:PATH | etcd://...
  std::string etcd_cacert;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_timeout = "5s";
  int64_t etcd_max_txn_ops = 128;
  int64_t etcd_max_request_bytes = 1536 * 1024;
  std::string leader_ttl = "1s";
  std::string advertise_host;
};

void AddHaFlags(CLI::App* cmd, HaFlags* f);
// Fills the store, etcd, leader and advertise options of `so`.
Status ApplyHaFlags(const HaFlags& f, server::ServerOptions* so);

// Waits for SIGINT or SIGTERM (blocked by main) on a thread of its own from
// construction on, so that a standby blocked in StartServer stops too.
class SignalWaiter {
 public:
  SignalWaiter();
  ~SignalWaiter();  // detaches when no signal came (the process is ending anyway)
  const std::atomic<bool>* stopped() const { return &stopped_; }
  void Wait();  // until a signal came

 private:
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

// main() keeps its argv here, for StartOver.
void SaveArgv(char** argv);
// Replaces this process with a fresh run of the same command (which stands
// by, then campaigns): what a server does when it learns it no longer
// leads. Nothing of the old process's memory or sockets survives. Exits
// with status 3 if the exec fails.
[[noreturn]] void StartOver(const Status& why);

}  // namespace drover::app
