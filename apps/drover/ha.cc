#include "ha.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

#include "drover/common/config.h"
#include "drover/common/quantity.h"
#include "drover/store/open.h"

namespace drover::app {
namespace {
char** saved_argv = nullptr;
}  // namespace

void AddHaFlags(CLI::App* cmd, HaFlags* f) {
  cmd->add_option("--store", f->store,
                  "where the state lives: sqlite:PATH (default <data-dir>/drover.db) or "
                  "etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]; with etcd, several servers elect a leader (docs/ha.md)");
  cmd->add_option("--etcd-cacert", f->etcd_cacert, "CA that signed the etcd members' certificates (TLS to etcd)");
  cmd->add_option("--etcd-cert", f->etcd_cert, "client certificate for etcd (PEM)");
  cmd->add_option("--etcd-key", f->etcd_key, "the private key of --etcd-cert (PEM)");
  cmd->add_option("--etcd-timeout", f->etcd_timeout, "deadline of one etcd request")->capture_default_str();
  cmd->add_option("--etcd-max-txn-ops", f->etcd_max_txn_ops, "the etcd cluster's --max-txn-ops (a batch is split to fit)")
      ->capture_default_str();
  cmd->add_option("--etcd-max-request-bytes", f->etcd_max_request_bytes,
                  "the etcd cluster's --max-request-bytes (a batch is split to fit)")
      ->capture_default_str();
  cmd->add_option("--leader-ttl", f->leader_ttl,
                  "the leader's lease: a standby takes over this long after the leader stops renewing it (etcd raises "
                  "it to 1.5x its election timeout, rounded up to seconds)")
      ->capture_default_str();
  cmd->add_option("--advertise-host", f->advertise_host,
                  "the host clients and agents reach this server at, published while it leads (default: the listen "
                  "host, or the machine's name for a wildcard)");
}

Status ApplyHaFlags(const HaFlags& f, server::ServerOptions* so) {
  so->store = f.store;
  so->advertise_host = f.advertise_host;
  if (!f.store.empty() && !store::IsEtcdSpec(f.store) && f.store.rfind("sqlite:", 0) != 0) {
    return InvalidArgument("--store '" + f.store + "' is neither sqlite:PATH nor etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]");
  }
  DROVER_ASSIGN_OR_RETURN(int64_t ttl_ms, ParseDurationMs(f.leader_ttl));
  DROVER_ASSIGN_OR_RETURN(int64_t timeout_ms, ParseDurationMs(f.etcd_timeout));
  if (ttl_ms < 100) return InvalidArgument("--leader-ttl must be at least 100ms");
  if (timeout_ms < 10) return InvalidArgument("--etcd-timeout must be at least 10ms");
  if (f.etcd_max_txn_ops < 8) return InvalidArgument("--etcd-max-txn-ops must be at least 8");
  if (f.etcd_max_request_bytes < 64 * 1024) return InvalidArgument("--etcd-max-request-bytes must be at least 64KiB");
  so->leader_ttl = std::chrono::milliseconds(ttl_ms);
  so->etcd.request_timeout = std::chrono::milliseconds(timeout_ms);
  so->etcd.ca_file = f.etcd_cacert;
  so->etcd.cert_file = f.etcd_cert;
  so->etcd.key_file = f.etcd_key;
  so->etcd.max_txn_ops = f.etcd_max_txn_ops;
  so->etcd.max_request_bytes = f.etcd_max_request_bytes;
  return Status::Ok();
}

SignalWaiter::SignalWaiter() {
  thread_ = std::thread([this] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received signal {}, shutting down (jobs keep running under their supervisors)", sig);
    stopped_ = true;
  });
}

SignalWaiter::~SignalWaiter() {
  if (thread_.joinable()) thread_.detach();
}

void SignalWaiter::Wait() {
  if (thread_.joinable()) thread_.join();
}

void SaveArgv(char** argv) { saved_argv = argv; }

void StartOver(const Status& why) {
  spdlog::critical("{}; starting over as a standby", why.ToString());
  spdlog::default_logger()->flush();
  // Nothing open may leak into the new run: its listeners would hold the
  // ports it binds again once it leads.
  if (DIR* dir = opendir("/proc/self/fd")) {
    const int own = dirfd(dir);
    while (dirent* e = readdir(dir)) {
      int fd = std::atoi(e->d_name);
      if (fd > 2 && fd != own) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(dir);
  }
  if (saved_argv != nullptr) execv("/proc/self/exe", saved_argv);
  spdlog::critical("cannot start over: exec failed: {}", std::strerror(errno));
  std::_Exit(3);
}

}  // namespace drover::app
