#include "drover/agent/local_job.h"

#include <fmt/format.h>

#include <chrono>

namespace drover::agent {

std::string WorkloadKey(const v1::Workload& w) { return w.workload_id().empty() ? w.job_id() : w.workload_id(); }
std::string StopKey(const v1::Stop& s) { return s.workload_id().empty() ? s.job_id() : s.workload_id(); }

rpc::WorkloadRef RefOf(const std::string& key) {
  auto ref = rpc::ParseWorkloadId(key);
  if (ref.ok()) return *ref;
  return rpc::WorkloadRef{key, 0, false};
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MonoNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string DescribeExit(const ExitFile& e) {
  if (e.failed_to_start) return "failed to start: " + e.message;
  if (e.signal != 0) return fmt::format("killed by signal {}", e.signal);
  if (e.exit_code < 0 && !e.message.empty()) return e.message;  // no exit status: the agent's word
  return fmt::format("exit code {}", e.exit_code);
}

}  // namespace drover::agent
