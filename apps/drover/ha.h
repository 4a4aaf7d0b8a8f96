#pragma once
// The flags and process plumbing of servers that share an etcd store
// (docs/ha.md): --store and its etcd options, the leader lease, signals
// while standing by, and starting over as a standby after losing the lead.

#include <CLI/CLI.hpp>

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/server/server.h"
#include "drover/store/store.h"

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
// The server flags that `up --ha` passes on to each of its servers: those of
// `options` that were given (on the command line or in --config), as
// arguments, less the ones the group sets per server (addresses, data
// directory, store, log level).
std::vector<std::string> PassedServerFlags(const std::vector<CLI::Option*>& options);
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

// `drover up --ha N`: a whole HA control plane on this machine. N etcd
// members (client ports etcd_port, +2, +4, ...; peers one above each) and
// N `drover server`s (gRPC grpc_port, +1, ...; HTTP http_port, +1, ...),
// each a child process with its data under <data_dir>/ha/, restarted a
// second after it dies (as k0s supervises its etcd). The caller's agents
// connect to servers(); tokens are minted straight into etcd.
struct HaGroupOptions {
  int members = 3;
  std::string data_dir;
  int etcd_port = 2379;
  int grpc_port = 7070;
  int http_port = 8080;
  std::string log_level = "info";
  std::string self_exe;                   // this program (the servers run `<self_exe> server ...`)
  std::vector<std::string> server_flags;  // passed on to every server
};

class HaGroup {
 public:
  static Result<std::unique_ptr<HaGroup>> Start(HaGroupOptions options);
  ~HaGroup();  // Stop()

  // "127.0.0.1:7070,127.0.0.1:7071,...": every server, for agents and clients.
  const std::string& servers() const { return servers_; }
  // Their HTTP addresses, in the same order (the CLI's REST verbs).
  const std::string& http_servers() const { return http_servers_; }
  // Mints tokens (the store is etcd itself, no leader involved).
  auth::Authority* authority() { return authority_.get(); }
  // Waits until some server leads; its {"grpc": ..., "http": ...}.
  Result<std::string> WaitForLeader(std::chrono::seconds timeout);
  // Stops the servers (SIGTERM: the leader gives its lease up), then etcd.
  void Stop();

 private:
  struct Child {
    std::string name;
    std::vector<std::string> argv;
    std::string log;
    pid_t pid = -1;
    int64_t died_ns = 0;
  };
  HaGroup() = default;
  void Supervise();

  HaGroupOptions options_;
  std::string servers_;
  std::string http_servers_;
  std::string store_url_;
  std::vector<Child> etcd_;
  std::vector<Child> server_children_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<auth::Authority> authority_;
  Mutex mu_;
  CondVar wake_;
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  std::thread supervisor_;
};

// main() keeps its argv here, for StartOver.
void SaveArgv(char** argv);
// Replaces this process with a fresh run of the same command (which stands
// by, then campaigns): what a server does when it learns it no longer
// leads. Nothing of the old process's memory or sockets survives. Exits
// with status 3 if the exec fails.
[[noreturn]] void StartOver(const Status& why);

}  // namespace drover::app
