#pragma once
// The only place that knows both the wire types (drover/v1) and the
// scheduler's model: conversions, input validation of wire messages, and the
// mapping of Status to and from gRPC.

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"
#include "drover/v1/common.pb.h"

namespace drover::rpc {

// Limits on what a job may ask for; beyond them a request is rejected.
inline constexpr int kMaxGpusPerJob = sched::kMaxGpusPerNode;
inline constexpr int kMaxPriority = 1000;
inline constexpr int kMaxCommandArgs = 1024;
inline constexpr size_t kMaxCommandBytes = 64 * 1024;
inline constexpr int kMaxEnvVars = 256;
inline constexpr int kMaxGraceSeconds = 3600;
inline constexpr int kDefaultGraceSeconds = 10;
inline constexpr std::string_view kDefaultTenant = "default";

// Fills defaults (tenant "default") and checks every field of `spec`.
Status NormalizeJobSpec(v1::JobSpec* spec);

// The scheduler's view of a job.
sched::JobRequest ToJobRequest(const std::string& id, const v1::JobSpec& spec);
inline sched::JobRequest ToJobRequest(const v1::Job& job) { return ToJobRequest(job.id(), job.spec()); }
sched::NodeInfo ToNodeInfo(const v1::Node& node, bool schedulable);

// Checks an agent's inventory: name, GPU count, indices 0..n-1, sizes.
Status ValidateRegister(const v1::RegisterRequest& req);

bool IsTerminal(v1::JobState state);
// "JOB_STATE_RUNNING" -> "Running".
std::string JobStateDisplay(v1::JobState state);
// Accepts "running", "Running", "JOB_STATE_RUNNING".
Result<v1::JobState> ParseJobState(std::string_view text);

grpc::Status ToGrpc(const Status& status);
Status FromGrpc(const grpc::Status& status);

}  // namespace drover::rpc
