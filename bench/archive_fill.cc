// archive_fill: writes N finished jobs into a Drover archive file, as the
// server's archiving writes them (store::Archive, one v1::Job record each,
// shaped like a real 1-GPU job that ran and ended), so that bench/archive_bench.sh
// can measure a server with a million archived jobs without running a
// million processes first. Sequence numbers start after the archive's
// highest; tenants, nodes, states and end times vary.
//
//   archive_fill ARCHIVE.db COUNT

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "drover/common/ids.h"
#include "drover/store/sqlite/archive.h"
#include "drover/v1/common.pb.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: archive_fill ARCHIVE.db COUNT\n");
    return 2;
  }
  const int64_t count = std::atoll(argv[2]);
  auto archive = drover::store::Archive::Open(argv[1]);
  if (!archive.ok()) {
    std::fprintf(stderr, "%s\n", archive.status().ToString().c_str());
    return 1;
  }
  auto max = (*archive)->MaxJobSeq();
  if (!max.ok()) return 1;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  constexpr int64_t kBatch = 10'000;
  auto started = std::chrono::steady_clock::now();
  std::vector<drover::store::ArchivedJob> batch;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t seq = *max + 1 + static_cast<uint64_t>(i);
    drover::v1::Job job;
    job.set_id(drover::FormatJobId(seq));
    auto* spec = job.mutable_spec();
    spec->set_name(fmt::format("train-{}", i % 977));
    spec->set_tenant(fmt::format("team-{}", i % 8));
    spec->set_gpus(1);
    spec->set_priority(static_cast<int32_t>(i % 5));
    spec->add_command("python3");
    spec->add_command("train.py");
    spec->add_command(fmt::format("--shard={}", i));
    (*spec->mutable_env())["EPOCHS"] = "3";
    auto* st = job.mutable_status();
    bool failed = i % 10 == 0;
    st->set_state(failed ? drover::v1::JOB_STATE_FAILED : drover::v1::JOB_STATE_SUCCEEDED);
    // Spread over the last 30 days, oldest first.
    int64_t end = now - (count - i) * (int64_t{30} * 86'400 * 1'000'000'000 / std::max<int64_t>(count, 1));
    st->set_submit_time_unix_nanos(end - 60'000'000'000);
    st->set_bind_time_unix_nanos(end - 59'000'000'000);
    st->set_start_time_unix_nanos(end - 58'990'000'000);
    st->set_end_time_unix_nanos(end);
    st->set_exit_code(failed ? 1 : 0);
    st->set_attempt(1);
    std::string node = fmt::format("sim-{}", i % 64 + 1);
    auto* a = st->add_attempts();
    a->set_number(1);
    a->add_nodes(node);
    a->set_bind_time_unix_nanos(st->bind_time_unix_nanos());
    a->set_start_time_unix_nanos(st->start_time_unix_nanos());
    a->set_end_time_unix_nanos(end);
    a->set_outcome(failed ? "failed: exit code 1" : "succeeded");
    drover::store::ArchivedJob rec;
    rec.seq = seq;
    rec.state = st->state();
    rec.tenant = spec->tenant();
    rec.node = node;
    rec.submit_ns = st->submit_time_unix_nanos();
    rec.end_ns = end;
    rec.value = job.SerializeAsString();
    batch.push_back(std::move(rec));
    if (static_cast<int64_t>(batch.size()) == kBatch || i + 1 == count) {
      if (auto s = (*archive)->PutJobs(batch); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      batch.clear();
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("archived %lld jobs (seq %llu..%llu) in %.1f s\n", static_cast<long long>(count),
              static_cast<unsigned long long>(*max + 1), static_cast<unsigned long long>(*max + count), secs);
  return 0;
}
