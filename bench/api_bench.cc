// End-to-end submit through the real server: gRPC, validation, the control
// loop, and the durable group commit to SQLite (synchronous=FULL). With more
// client threads, more submits share one fsync.
//   ./build/bench/api_bench
// With DROVER_BENCH_STORE=etcd://HOST:PORT,.../NS the server keeps its state
// in that etcd instead, as the leader of an HA group (one member, so it leads
// at once; every write fenced): bench/ha_throughput.sh.

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <mutex>

#include "drover/rpc/channel.h"
#include "drover/server/server.h"
#include "drover/v1/agent.grpc.pb.h"
#include "drover/v1/api.grpc.pb.h"

namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct Fixture {
  std::string dir;
  std::unique_ptr<drover::server::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  Fixture() {
    std::string tmpl = "/tmp/drover-api-bench-XXXXXX";
    dir = ::mkdtemp(tmpl.data());
    drover::server::ServerOptions options{dir, "127.0.0.1:0", "127.0.0.1:0"};
    // The server's cost, not its rate limits (500 writes/s per token).
    options.security.per_token = {1e9, 1e9};
    options.security.per_tenant = {1e9, 1e9};
    if (const char* store = std::getenv("DROVER_BENCH_STORE"); store != nullptr) {
      // A leader is found by its address: fixed ports.
      options.store = store;
      options.grpc_listen = "127.0.0.1:" + std::to_string(FreePort());
      options.http_listen = "127.0.0.1:" + std::to_string(FreePort());
      options.etcd.max_txn_ops = 4096;
      options.etcd.max_request_bytes = 8 << 20;
    }
    auto s = drover::server::StartServer(options);
    if (!s.ok()) std::abort();
    server = std::move(*s);
    // Callers authenticate: an admin token for the submits, a node token for
    // the registration.
    auto mint = [&](const std::string& name, drover::auth::Role role, const std::string& node) {
      auto token = server->authority()->MintInternal({name, "default", role, node, drover::Duration(0)});
      if (!token.ok()) std::abort();
      return *token;
    };
    channel = drover::rpc::MakeChannel(server->grpc_address(), mint("bench", drover::auth::Role::kAdmin, ""));
    auto node_channel =
        drover::rpc::MakeChannel(server->grpc_address(), mint("gpu-01", drover::auth::Role::kNode, "gpu-01"));
    // A node that is registered but never connects: jobs fit, and stay pending.
    drover::v1::RegisterRequest reg;
    reg.set_node_name("gpu-01");
    for (int i = 0; i < 8; ++i) {
      auto* g = reg.add_gpus();
      g->set_index(i);
      g->set_vendor("nvidia");
      g->set_model("H100 80GB");
      g->set_memory_bytes(int64_t{80} << 30);
    }
    grpc::ClientContext ctx;
    drover::v1::RegisterResponse resp;
    if (!drover::v1::AgentService::NewStub(node_channel)->Register(&ctx, reg, &resp).ok()) std::abort();
  }
  ~Fixture() {
    server->Stop();
    server.reset();
    std::filesystem::remove_all(dir);
  }
};

Fixture* fixture = nullptr;
std::mutex fixture_mu;

void BM_Submit(benchmark::State& state) {
  {
    std::lock_guard lock(fixture_mu);
    if (fixture == nullptr) fixture = new Fixture();
  }
  auto stub = drover::v1::JobService::NewStub(fixture->channel);
  drover::v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(1);
  req.mutable_spec()->add_command("true");
  for (auto _ : state) {
    grpc::ClientContext ctx;
    drover::v1::SubmitJobResponse resp;
    if (!stub->Submit(&ctx, req, &resp).ok()) state.SkipWithError("submit failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Submit)->Threads(1)->Threads(8)->Threads(32)->Threads(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  delete fixture;
  benchmark::Shutdown();
  return 0;
}
