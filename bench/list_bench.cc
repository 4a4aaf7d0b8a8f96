// list_bench: ListJobs as the server answers it, over one warm gRPC channel
// to a running server (DROVER_ADDR, DROVER_TOKEN), for page sizes and
// filters: the server's part of `drover jobs`, without the CLI's own start.
// bench/archive_bench.sh runs it against a server with a million archived
// jobs.
//   DROVER_ADDR=127.0.0.1:7070 DROVER_TOKEN=... ./build/bench/list_bench

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <string>

#include "drover/rpc/channel.h"
#include "drover/v1/api.grpc.pb.h"

namespace {

std::unique_ptr<drover::v1::JobService::Stub> Stub() {
  const char* addr = std::getenv("DROVER_ADDR");
  const char* token = std::getenv("DROVER_TOKEN");
  if (addr == nullptr || token == nullptr) {
    std::fprintf(stderr, "set DROVER_ADDR and DROVER_TOKEN\n");
    std::exit(2);
  }
  return drover::v1::JobService::NewStub(drover::rpc::MakeChannel(addr, token));
}

// Arg 0: page size; arg 1: 0 no filter, 1 tenant, 2 state failed, 3 node,
// 4 a deep page (from the middle of the ids), 5 ended in the last hour.
void BM_List(benchmark::State& state) {
  auto stub = Stub();
  drover::v1::ListJobsRequest req;
  req.set_page_size(static_cast<int32_t>(state.range(0)));
  switch (state.range(1)) {
    case 1: req.set_tenant("team-3"); break;
    case 2: req.set_state(drover::v1::JOB_STATE_FAILED); break;
    case 3: req.set_node("sim-7"); break;
    case 4: req.set_page_token("500000"); break;
    case 5:
      req.set_ended_after_unix_nanos(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch() - std::chrono::hours(1))
                                         .count());
      break;
    default: break;
  }
  int64_t jobs = 0;
  for (auto _ : state) {
    grpc::ClientContext ctx;
    drover::v1::ListJobsResponse resp;
    grpc::Status s = stub->List(&ctx, req, &resp);
    if (!s.ok()) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
    jobs += resp.jobs_size();
  }
  state.counters["jobs_per_page"] =
      benchmark::Counter(static_cast<double>(jobs) / std::max<int64_t>(state.iterations(), 1));
}
BENCHMARK(BM_List)
    ->ArgNames({"page", "filter"})
    ->Args({1, 0})
    ->Args({500, 0})
    ->Args({5000, 0})
    ->Args({500, 1})
    ->Args({500, 2})
    ->Args({500, 3})
    ->Args({500, 4})
    ->Args({500, 5})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
