#include "ha.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>

#include "children.h"
#include "drover/common/config.h"
#include "drover/common/quantity.h"
#include "drover/store/leader.h"
#include "drover/store/open.h"

namespace drover::app {
namespace {
char** saved_argv = nullptr;
}  // namespace

std::vector<std::string> PassedServerFlags(const std::vector<CLI::Option*>& options) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : options) {
    const std::string name = "--" + opt->get_single_name();
    if (opt->count() == 0 || name == "--data-dir" || name == "--grpc-listen" || name == "--listen" ||
        name == "--log-level" || name == "--store" || name == "--config" ||
        name.starts_with("--gateway-")) {  // `up` runs the group's one gateway; its servers none
      continue;
    }
    if (opt->get_expected_min() == 0) {  // a flag
      out.push_back(name + "=" + (opt->results().empty() ? "true" : opt->results().back()));
      continue;
    }
    for (const std::string& value : opt->results()) out.insert(out.end(), {name, value});
  }
  return out;
}

void AddHaFlags(CLI::App* cmd, HaFlags* f) {
  cmd->add_option(
      "--store", f->store,
      "where the state lives: sqlite:PATH (default <data-dir>/drover.db) or "
      "etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]; with etcd, several servers elect a leader (docs/ha.md)");
  cmd->add_option("--etcd-cacert", f->etcd_cacert, "CA that signed the etcd members' certificates (TLS to etcd)");
  cmd->add_option("--etcd-cert", f->etcd_cert, "client certificate for etcd (PEM)");
  cmd->add_option("--etcd-key", f->etcd_key, "the private key of --etcd-cert (PEM)");
  cmd->add_option("--etcd-timeout", f->etcd_timeout, "deadline of one etcd request")->capture_default_str();
  cmd->add_option("--etcd-max-txn-ops", f->etcd_max_txn_ops,
                  "the etcd cluster's --max-txn-ops (a batch is split to fit)")
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
    return InvalidArgument("--store '" + f.store +
                           "' is neither sqlite:PATH nor etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]");
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

namespace drover::app {
namespace {

int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string FindEtcd() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<HaGroup>> HaGroup::Start(HaGroupOptions o) {
  if (o.members < 1 || o.members > 7) return InvalidArgument("--ha takes 1 to 7 members");
  if (o.grpc_port <= 0 || o.http_port <= 0) {
    return InvalidArgument("--ha needs fixed ports in --grpc-listen and --listen (clients find the leader by them)");
  }
  const std::string etcd = FindEtcd();
  if (etcd.empty()) return Unavailable("--ha needs etcd (Debian's etcd-server; scripts/install-deps.sh installs it)");
  std::unique_ptr<HaGroup> g(new HaGroup());
  const std::string dir = o.data_dir + "/ha";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot create '{}': {}", dir, ec.message()));
  std::string initial, clients;
  for (int i = 0; i < o.members; ++i) {
    initial += fmt::format("{}m{}=http://127.0.0.1:{}", i ? "," : "", i, o.etcd_port + 2 * i + 1);
    clients += fmt::format("{}127.0.0.1:{}", i ? "," : "", o.etcd_port + 2 * i);
    g->servers_ += fmt::format("{}127.0.0.1:{}", i ? "," : "", o.grpc_port + i);
    g->http_servers_ += fmt::format("{}127.0.0.1:{}", i ? "," : "", o.http_port + i);
  }
  g->store_url_ = "etcd://" + clients + "/drover";
  // etcd with a 500 ms election timeout (leases of 1 s), pre-vote (a member
  // that was cut off does not depose etcd's leader when it comes back) and
  // room for a batch of 1,000 jobs in one transaction (docs/ha.md, "etcd
  // settings").
  const std::string max_ops = "4096", max_bytes = "8388608";
  for (int i = 0; i < o.members; ++i) {
    const std::string client = fmt::format("http://127.0.0.1:{}", o.etcd_port + 2 * i);
    const std::string peer = fmt::format("http://127.0.0.1:{}", o.etcd_port + 2 * i + 1);
    g->etcd_.push_back({fmt::format("etcd member m{}", i),
                        {etcd,
                         "--name",
                         fmt::format("m{}", i),
                         "--data-dir",
                         fmt::format("{}/etcd-{}", dir, i),
                         "--listen-client-urls",
                         client,
                         "--advertise-client-urls",
                         client,
                         "--listen-peer-urls",
                         peer,
                         "--initial-advertise-peer-urls",
                         peer,
                         "--initial-cluster",
                         initial,
                         "--initial-cluster-state",
                         "new",
                         "--initial-cluster-token",
                         "drover-ha",
                         "--heartbeat-interval",
                         "100",
                         "--election-timeout",
                         "500",
                         "--pre-vote",
                         "--max-txn-ops",
                         max_ops,
                         "--max-request-bytes",
                         max_bytes,
                         "--logger",
                         "zap",
                         "--log-level",
                         "warn"},
                        fmt::format("{}/etcd-{}.log", dir, i)});
    // Each server lists "its own" member first, as on separate machines
    // (the store prefers it; the leader keeps etcd's leader elsewhere).
    std::string own_first;
    for (int k = 0; k < o.members; ++k) {
      own_first += fmt::format("{}127.0.0.1:{}", k ? "," : "", o.etcd_port + 2 * ((i + k) % o.members));
    }
    std::vector<std::string> server = {o.self_exe, "server", "--data-dir", fmt::format("{}/server-{}", dir, i),
                                       "--grpc-listen", fmt::format("127.0.0.1:{}", o.grpc_port + i), "--listen",
                                       fmt::format("127.0.0.1:{}", o.http_port + i), "--store",
                                       "etcd://" + own_first + "/drover", "--log-level", o.log_level,
                                       // `up` runs the group's one gateway itself.
                                       "--gateway-listen", "off"};
    // The group's settings, unless the caller's flags set them.
    for (const auto& [flag, value] :
         std::vector<std::pair<std::string, std::string>>{{"--leader-ttl", "1s"},
                                                          {"--lease-ttl", "6s"},
                                                          {"--etcd-max-txn-ops", max_ops},
                                                          {"--etcd-max-request-bytes", max_bytes}}) {
      if (std::find(o.server_flags.begin(), o.server_flags.end(), flag) == o.server_flags.end()) {
        server.insert(server.end(), {flag, value});
      }
    }
    server.insert(server.end(), o.server_flags.begin(), o.server_flags.end());
    g->server_children_.push_back(
        {fmt::format("server {}", i), std::move(server), fmt::format("{}/server-{}.log", dir, i)});
  }
  g->options_ = std::move(o);
  std::promise<void> started;
  g->supervisor_ = std::thread([raw = g.get(), &started] {
    for (Child& c : raw->etcd_) c.pid = SpawnChild(c.argv, c.log);
    for (Child& c : raw->server_children_) c.pid = SpawnChild(c.argv, c.log);
    started.set_value();
    raw->Supervise();
  });
  started.get_future().wait();
  // etcd answers once its members have met and elected a leader.
  store::EtcdOptions eo;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto opened = store::OpenStore(g->store_url_, "", eo, SystemClock::Get());
    if (opened.ok()) {
      g->store_ = std::move(*opened);
      break;
    }
    last = opened.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!g->store_)
    return Unavailable(fmt::format("etcd did not come up in 30 s ({}; logs in {}): {}", clients, dir, last.message()));
  g->authority_ = std::make_unique<auth::Authority>(g->store_.get(), SystemClock::Get());
  spdlog::info("HA control plane: {} etcd members ({}) and {} servers ({}); logs in {}", g->options_.members, clients,
               g->options_.members, g->servers_, dir);
  return g;
}

Result<std::string> HaGroup::WaitForLeader(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto leader = store::Leadership::CurrentLeader(store_.get());
    if (leader.ok() && !leader->empty()) return leader;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Unavailable("no server became leader");
}

void HaGroup::Supervise() {
  auto reap = [](Child& c) {
    int status = 0;
    if (c.pid > 0 && ::waitpid(c.pid, &status, WNOHANG) == c.pid) {
      spdlog::warn("{} (pid {}) exited ({}); starting it again in 1 s (log: {})", c.name, c.pid,
                   WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                                       : fmt::format("status {}", WEXITSTATUS(status)),
                   c.log);
      c.pid = -1;
      c.died_ns = MonoNs();
    }
  };
  MutexLock lock(&mu_);
  while (!wake_.WaitFor(&mu_, std::chrono::milliseconds(100), [this]() DROVER_REQUIRES(mu_) { return stopping_; })) {
    for (std::vector<Child>* group : {&etcd_, &server_children_}) {
      for (Child& c : *group) {
        reap(c);
        if (c.pid < 0 && MonoNs() - c.died_ns >= 1'000'000'000) c.pid = SpawnChild(c.argv, c.log);
      }
    }
  }
  lock.Unlock();
  // Servers first (a leader that stops gives its lease up), then etcd; each
  // gets 5 s after SIGTERM.
  for (std::vector<Child>* group : {&server_children_, &etcd_}) {
    std::vector<pid_t*> pids;
    for (Child& c : *group) pids.push_back(&c.pid);
    StopChildren(std::move(pids), std::chrono::seconds(5));
  }
}

void HaGroup::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (supervisor_.joinable()) supervisor_.join();
}

HaGroup::~HaGroup() { Stop(); }

}  // namespace drover::app
