// End-to-end submit through the real server: gRPC, validation, the control
// loop, and the durable group commit to SQLite (synchronous=FULL). With more
// client threads, more submits share one fsync.
//   ./build/bench/api_bench

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <mutex>

#include "drover/server/server.h"
#include "drover/v1/agent.grpc.pb.h"
#include "drover/v1/api.grpc.pb.h"

namespace {

struct Fixture {
  std::string dir;
  std::unique_ptr<drover::server::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  Fixture() {
    std::string tmpl = "/tmp/drover-api-bench-XXXXXX";
    dir = ::mkdtemp(tmpl.data());
    auto s = drover::server::StartServer({dir, "127.0.0.1:0", "127.0.0.1:0"});
    if (!s.ok()) std::abort();
    server = std::move(*s);
    channel = grpc::CreateChannel(server->grpc_address(), grpc::InsecureChannelCredentials());
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
    if (!drover::v1::AgentService::NewStub(channel)->Register(&ctx, reg, &resp).ok()) std::abort();
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
BENCHMARK(BM_Submit)->Threads(1)->Threads(8)->Threads(32)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  delete fixture;
  benchmark::Shutdown();
  return 0;
}
