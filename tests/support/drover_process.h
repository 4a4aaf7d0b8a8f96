#pragma once
// Test support: runs the real `drover` binary on loopback with port 0 and
// talks to it as users do (the CLI, gRPC, HTTP).

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/v1/api.grpc.pb.h"

namespace drover::testing {

// Path of the drover binary under test (set by CMake).
std::string DroverBinary();

// A fresh directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole file ("" when it cannot be read).
std::string ReadAll(const std::string& path);

// Polls `pred` until it holds or `timeout` passes; returns whether it held.
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(30));

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `drover args...` with DROVER_ADDR set to `addr` and DROVER_TOKEN to
// the admin token of the last DroverUp started (unless `env` sets it),
// plus `env` ("NAME=VALUE"), capturing output. `binary` runs in place of
// DroverBinary() when given.
CommandResult RunCli(const std::string& addr, const std::vector<std::string>& args,
                     const std::vector<std::string>& env = {}, const std::string& binary = "");
// The token RunCli passes by default ("" for none).
void SetCliToken(const std::string& token);

// A free TCP port on 127.0.0.1 (bound and released: for a server that must
// come back on the same address after a restart).
int FreePort();

// Starts `drover args...` with output to `out` and `err`; returns its pid.
pid_t SpawnDrover(const std::vector<std::string>& args, const std::string& out, const std::string& err);

// `drover up` (or `drover server`) in a child process: --data-dir, gRPC on
// `grpc_listen` and HTTP on port 0. When <data-dir>/tls/ca.crt exists
// (`drover certs init`), the server serves TLS and the stubs verify it with
// that CA.
class DroverUp {
 public:
  // Extra flags (e.g. {"--simulate", "2"}) follow the standard ones.
  DroverUp(std::string data_dir, std::vector<std::string> extra_flags, std::string role = "up",
           std::string grpc_listen = "127.0.0.1:0");
  ~DroverUp();  // SIGKILLs the process if still running

  // Variables ("NAME=VALUE") added to the environment it starts with (the
  // test's own) from the next Start() on.
  void SetEnv(std::vector<std::string> env) { env_ = std::move(env); }
  // Starts it and waits until it serves (endpoints.json); false on failure.
  bool Start();
  // The two halves of Start: a server that stands by (an etcd store) serves
  // only once it leads. Spawn() starts it; WaitServing() waits (failing the
  // test after `timeout`, or when it exits) and connects the stubs.
  bool Spawn();
  bool WaitServing(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // The HTTP listen address it starts with (default 127.0.0.1:0).
  void SetHttpListen(std::string listen) { http_listen_ = std::move(listen); }
  // Its --log-level (default warn).
  void SetLogLevel(std::string level) { log_level_ = std::move(level); }
  void Kill(int sig);
  // Waits until `nodes` nodes are Ready.
  bool WaitForReadyNodes(int nodes);

  const std::string& grpc_address() const { return grpc_; }
  // The --grpc-listen it starts with (known before it serves).
  const std::string& grpc_listen() const { return grpc_listen_; }
  const std::string& http_listen() const { return http_listen_; }
  const std::string& http_address() const { return http_; }
  v1::JobService::Stub* jobs() { return jobs_.get(); }
  v1::NodeService::Stub* nodes() { return nodes_.get(); }
  // The bootstrap admin token (<data-dir>/admin.token); the stubs carry it.
  const std::string& token() const { return token_; }
  const std::string& data_dir() const { return data_dir_; }
  pid_t pid() const { return pid_; }

 private:
  std::string data_dir_;
  std::vector<std::string> extra_;
  std::vector<std::string> env_;
  std::string role_;
  std::string grpc_listen_;
  std::string http_listen_ = "127.0.0.1:0";
  std::string log_level_ = "warn";
  pid_t pid_ = 0;
  std::string grpc_, http_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
};

// One gRPC call with a deadline.
std::unique_ptr<grpc::ClientContext> Ctx(std::chrono::seconds deadline = std::chrono::seconds(30));

// Fetches a job; aborts the test on error.
v1::Job GetJob(v1::JobService::Stub* stub, const std::string& id);

// Every job the server knows (live and archived), newest first.
std::vector<v1::Job> ListJobs(v1::JobService::Stub* stub);

// Cancels every job that has not ended and waits until all have: jobs run
// under supervisors that outlive `drover up`, so a test that leaves them
// running leaks processes.
void CancelAllJobs(v1::JobService::Stub* stub);

}  // namespace drover::testing
