// A page of jobs as JSON (what GET /api/v1/jobs answers): protobuf's
// MessageToJsonString with always_print_primitive_fields against
// rpc::ToJson (drover/rpc/json.h). The jobs look like archived ones (as
// bench/archive_fill writes them).
//
//   ./build/bench/json_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>
#include <google/protobuf/util/json_util.h>

#include <string>

#include "drover/rpc/json.h"
#include "drover/v1/api.pb.h"

namespace {

drover::v1::ListJobsResponse Page(int n) {
  drover::v1::ListJobsResponse page;
  for (int i = 0; i < n; ++i) {
    drover::v1::Job* j = page.add_jobs();
    j->set_id("j-" + std::to_string(100000 + i));
    auto* spec = j->mutable_spec();
    spec->set_name("train-" + std::to_string(i % 1000));
    spec->set_tenant("team-" + std::to_string(i % 8));
    spec->set_priority(i % 5);
    spec->set_gpus(1);
    for (const char* arg : {"python3", "train.py", "--shard=99999"}) spec->add_command(arg);
    (*spec->mutable_env())["EPOCHS"] = "3";
    auto* st = j->mutable_status();
    st->set_state(drover::v1::JOB_STATE_SUCCEEDED);
    st->set_submit_time_unix_nanos(1'795'624'155'451'532'826);
    st->set_bind_time_unix_nanos(1'795'624'156'451'532'826);
    st->set_start_time_unix_nanos(1'795'624'156'461'532'826);
    st->set_end_time_unix_nanos(1'795'624'215'451'532'826);
    st->set_attempt(1);
    auto* a = st->add_attempts();
    a->set_number(1);
    a->add_nodes("sim-" + std::to_string(i % 64));
    a->set_outcome("succeeded");
  }
  page.set_next_page_token("99501");
  return page;
}

void BM_Protobuf(benchmark::State& state) {
  auto page = Page(static_cast<int>(state.range(0)));
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out;
    (void)google::protobuf::util::MessageToJsonString(page, &out, opts);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Protobuf)->Arg(1)->Arg(500)->Unit(benchmark::kMicrosecond);

void BM_ToJson(benchmark::State& state) {
  auto page = Page(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = drover::rpc::ToJson(page);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ToJson)->Arg(1)->Arg(500)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
