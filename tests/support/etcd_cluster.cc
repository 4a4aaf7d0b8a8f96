#include "support/etcd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "etcd/etcdserverpb/rpc.grpc.pb.h"

extern char** environ;

namespace drover::testing {
namespace {

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

std::string EtcdBinary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

std::unique_ptr<EtcdCluster> EtcdCluster::Start(int members) {
  const std::string binary = EtcdBinary();
  if (binary.empty()) {
    ADD_FAILURE() << "etcd is not installed (Debian's etcd-server; scripts/install-deps.sh installs it)";
    return nullptr;
  }
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  std::string templ = (std::filesystem::temp_directory_path() / "drover-etcd-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return nullptr;
  }
  cluster->dir_ = templ;
  std::vector<std::string> peers;
  std::string initial;
  for (int i = 0; i < members; ++i) {
    cluster->endpoints_.push_back("127.0.0.1:" + std::to_string(FreeLoopbackPort()));
    peers.push_back("http://127.0.0.1:" + std::to_string(FreeLoopbackPort()));
    initial += (i ? "," : "") + std::string("m") + std::to_string(i) + "=" + peers.back();
  }
  for (int i = 0; i < members; ++i) {
    const std::string name = "m" + std::to_string(i);
    const std::string client = "http://" + cluster->endpoints_[i];
    std::vector<std::string> args = {binary,
                                     "--name",
                                     name,
                                     "--data-dir",
                                     cluster->dir_ + "/" + name,
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peers[i],
                                     "--initial-advertise-peer-urls",
                                     peers[i],
                                     "--initial-cluster",
                                     initial,
                                     "--initial-cluster-state",
                                     "new",
                                     "--initial-cluster-token",
                                     "drover-test",
                                     "--logger",
                                     "zap",
                                     "--log-level",
                                     "error",
                                     "--log-outputs",
                                     cluster->dir_ + "/" + name + ".log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    const std::string out = cluster->dir_ + "/" + name + ".out";
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << binary << ": " << strerror(rc);
      return nullptr;
    }
    cluster->pids_.push_back(pid);
  }
  for (int i = 0; i < members; ++i) {
    if (!cluster->WaitReady(i)) {
      ADD_FAILURE() << "etcd member " << i << " did not elect a leader; see " << cluster->dir_;
      return nullptr;
    }
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (pid_t pid : pids_) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string EtcdCluster::Url(const std::string& prefix) const {
  std::string url = "etcd://";
  for (size_t i = 0; i < endpoints_.size(); ++i) url += (i ? "," : "") + endpoints_[i];
  return url + "/" + prefix;
}

void EtcdCluster::Signal(int member, int sig) { kill(pids_.at(member), sig); }

bool EtcdCluster::WaitReady(int member, std::chrono::milliseconds timeout) const {
  auto channel = grpc::CreateChannel(endpoints_.at(member), grpc::InsecureChannelCredentials());
  auto stub = etcdserverpb::Maintenance::NewStub(channel);
  const auto deadline = std::chrono::system_clock::now() + timeout;
  while (std::chrono::system_clock::now() < deadline) {
    // Waits for the connection (an event), then asks; a member without a
    // leader yet answers leader 0, and is asked again after a short pause.
    if (!channel->WaitForConnected(deadline)) return false;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    etcdserverpb::StatusResponse response;
    if (stub->Status(&context, {}, &response).ok() && response.leader() != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace drover::testing
