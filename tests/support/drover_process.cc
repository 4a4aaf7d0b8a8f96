#include "support/drover_process.h"

#include "drover/rpc/channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

extern char** environ;

namespace drover::testing {

std::string DroverBinary() { return DROVER_BINARY; }

TempDir::TempDir() {
  std::string tmpl = ::testing::TempDir() + "drover-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  path_ = p != nullptr ? p : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

pid_t SpawnProcess(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                   const std::string& out, const std::string& err) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

}  // namespace

namespace {
std::string& CliToken() {
  static std::string token;
  return token;
}
}  // namespace

void SetCliToken(const std::string& token) { CliToken() = token; }

CommandResult RunCli(const std::string& addr, const std::vector<std::string>& args, const std::vector<std::string>& env,
                     const std::string& binary) {
  TempDir dir;
  std::vector<std::string> argv = {binary.empty() ? DroverBinary() : binary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> full_env = {"DROVER_ADDR=" + addr};
  bool has_token = false;
  for (const std::string& e : env) has_token = has_token || e.starts_with("DROVER_TOKEN=");
  if (!has_token && !CliToken().empty()) full_env.push_back("DROVER_TOKEN=" + CliToken());
  full_env.insert(full_env.end(), env.begin(), env.end());
  pid_t pid = SpawnProcess(argv, full_env, dir.path() + "/out", dir.path() + "/err");
  CommandResult r;
  if (pid < 0) return r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadAll(dir.path() + "/out");
  r.err = ReadAll(dir.path() + "/err");
  return r;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

pid_t SpawnDrover(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<std::string> argv = {DroverBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return SpawnProcess(argv, {}, out, err);
}

DroverUp::DroverUp(std::string data_dir, std::vector<std::string> extra_flags, std::string role,
                   std::string grpc_listen)
    : data_dir_(std::move(data_dir)),
      extra_(std::move(extra_flags)),
      role_(std::move(role)),
      grpc_listen_(std::move(grpc_listen)) {}

DroverUp::~DroverUp() {
  Kill(SIGKILL);
  // A failed test's server log goes with its temporary directory: its end
  // is kept in the test's output, where CI shows it.
  if (::testing::Test::HasFailure()) {
    std::string err = ReadAll(data_dir_ + "/up.err");
    size_t from = err.size() > 16384 ? err.find('\n', err.size() - 16384) : 0;
    std::fprintf(stderr, "---- the end of %s/up.err ----\n%s---- end ----\n", data_dir_.c_str(),
                 err.substr(from == std::string::npos ? 0 : from).c_str());
  }
}

bool DroverUp::Start() { return Spawn() && WaitServing(); }

bool DroverUp::Spawn() {
  std::error_code ec;
  std::filesystem::create_directories(data_dir_, ec);
  std::filesystem::remove(data_dir_ + "/endpoints.json", ec);
  std::vector<std::string> args = {DroverBinary(), role_,      "--data-dir", data_dir_,     "--grpc-listen",
                                   grpc_listen_,   "--listen", http_listen_, "--log-level", log_level_};
  // A gateway on a port of its own (the default, 7080, would be shared by
  // tests running at once); extra flags may name another.
  if (std::find(extra_.begin(), extra_.end(), "--gateway-listen") == extra_.end()) {
    args.insert(args.end(), {"--gateway-listen", "127.0.0.1:0"});
  }
  args.insert(args.end(), extra_.begin(), extra_.end());
  pid_ = SpawnProcess(args, env_, data_dir_ + "/up.out", data_dir_ + "/up.err");
  return pid_ > 0;
}

bool DroverUp::WaitServing(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return false;
  bool up = WaitUntil(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = 0;
          return true;  // exited: stop waiting
        }
        return std::filesystem::exists(data_dir_ + "/endpoints.json");
      },
      timeout);
  if (!up || pid_ == 0) {
    ADD_FAILURE() << "drover up did not start: " << ReadAll(data_dir_ + "/up.err");
    return false;
  }
  auto j = nlohmann::json::parse(ReadAll(data_dir_ + "/endpoints.json"));
  grpc_ = j["grpc"];
  http_ = j["http"];
  std::ifstream token_in(data_dir_ + "/admin.token");
  std::getline(token_in, token_);
  SetCliToken(token_);
  // A server with the cluster CA of `drover certs init` serves TLS.
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (std::string ca = ReadAll(data_dir_ + "/tls/ca.crt"); !ca.empty()) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ca;
    creds = grpc::SslCredentials(tls);
  }
  channel_ = rpc::MakeChannel(grpc_, token_, creds);
  jobs_ = v1::JobService::NewStub(channel_);
  nodes_ = v1::NodeService::NewStub(channel_);
  return true;
}

void DroverUp::Kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = 0;
}

bool DroverUp::WaitForReadyNodes(int nodes) {
  return WaitUntil([&] {
    v1::ListNodesResponse resp;
    auto ctx = Ctx();
    if (!nodes_->List(ctx.get(), v1::ListNodesRequest(), &resp).ok()) return false;
    int ready = 0;
    for (const auto& n : resp.nodes()) ready += n.state() == v1::NODE_STATE_READY ? 1 : 0;
    return ready >= nodes;
  });
}

std::unique_ptr<grpc::ClientContext> Ctx(std::chrono::seconds deadline) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

v1::Job GetJob(v1::JobService::Stub* stub, const std::string& id) {
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job job;
  auto ctx = Ctx();
  grpc::Status s = stub->Get(ctx.get(), req, &job);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return job;
}

std::vector<v1::Job> ListJobs(v1::JobService::Stub* stub) {
  std::vector<v1::Job> out;
  v1::ListJobsRequest req;
  req.set_page_size(300);  // pages of 300, newest first: paging is exercised too
  while (true) {
    v1::ListJobsResponse resp;
    auto ctx = Ctx();
    grpc::Status s = stub->List(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!s.ok()) return out;
    out.insert(out.end(), resp.jobs().begin(), resp.jobs().end());
    if (resp.next_page_token().empty()) return out;
    req.set_page_token(resp.next_page_token());
  }
}

namespace {
bool Ended(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}
}  // namespace

void CancelAllJobs(v1::JobService::Stub* stub) {
  for (const v1::Job& job : ListJobs(stub)) {
    if (Ended(job.status().state())) continue;
    v1::CancelJobRequest req;
    req.set_id(job.id());
    v1::Job out;
    auto ctx = Ctx();
    (void)stub->Cancel(ctx.get(), req, &out);
  }
  EXPECT_TRUE(WaitUntil([&] {
    for (const v1::Job& job : ListJobs(stub)) {
      if (!Ended(job.status().state())) return false;
    }
    return true;
  })) << "jobs were still running after cancel";
}

}  // namespace drover::testing
