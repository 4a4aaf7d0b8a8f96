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
inline constexpr int kDefaultCheckpointGraceSeconds = 10;
// Host resources a job may ask for per replica: 100,000 CPUs, 1 PiB.
inline constexpr int64_t kMaxCpuMillis = int64_t{100000} * 1000;
inline constexpr int kDefaultGraceSeconds = 10;
inline constexpr std::string_view kDefaultTenant = "default";
// Replicas of one gang job, and GPUs of one job in all.
inline constexpr int kMaxReplicas = 1024;
// Attempts of one job (bindings); max_restarts and preemptions stay far below.
inline constexpr int kMaxAttempts = 1 << 30;
// Peers one heartbeat may vouch for (a node hears a few directly per period).
inline constexpr int kMaxPeersPerHeartbeat = 1024;
inline constexpr int kMaxCheckpointsPerHeartbeat = 4096;
inline constexpr int64_t kMaxGpusPerGang = 16384;
inline constexpr int kMaxSelectorLabels = 32;
inline constexpr int kMaxNodeLabels = 64;
// A runtime estimate beyond a year is a typo.
inline constexpr int64_t kMaxEstimateSeconds = int64_t{366} * 24 * 3600;
inline constexpr int kMaxRestarts = 100;
// Jobs one job may wait for (JobSpec.after).
inline constexpr int kMaxDependencies = 64;
// The CPU a CPU-only job (gpus 0) asking for none is placed by.
inline constexpr int64_t kDefaultCpuOnlyMillis = 1000;
inline constexpr int kDefaultMaxRestarts = 3;
inline constexpr size_t kMaxReasonBytes = 1024;

// Fills defaults (tenant "default", replicas 1, gpu_milli 1000 -> 0, the
// topology's canonical name) and checks every field of `spec`, its service
// (ValidateService) included: a service runs one process per job (replicas
// 1; a deployment makes replicas of it as jobs of their own).
Status NormalizeJobSpec(v1::JobSpec* spec);

// Services (docs/deployments.md). Bounds of a probe and of a service's
// times: a probe path is an absolute URL path ('/', then at most 255
// printable characters without spaces); times are milliseconds from 0
// (the agent's default) up to an hour (a day for ready_timeout_ms).
inline constexpr size_t kMaxProbePathBytes = 256;
inline constexpr int32_t kMaxProbeMs = 3'600'000;
inline constexpr int32_t kMaxReadyTimeoutMs = 86'400'000;
inline constexpr int32_t kMaxFailureThreshold = 100;
// A served model name: 1-128 of letters, digits and "-_.:/@+", starting
// with a letter or digit ("llama-3-8b", "Qwen/Qwen2.5-0.5B", "qwen2.5:7b").
inline constexpr size_t kMaxModelNameBytes = 128;
Status ValidateModelName(std::string_view what, std::string_view name);
// `what` names the probe in errors ("readiness").
Status ValidateProbe(std::string_view what, const v1::Probe& probe);
Status ValidateService(const v1::ServiceSpec& service);
// A replica's secret (ServiceSpec.api_key): 16 to 128 base64url characters
// (the server makes 43: 32 random bytes), or empty (none: an older server's
// replica serves without one).
inline constexpr size_t kMinEngineKeyBytes = 16;
inline constexpr size_t kMaxEngineKeyBytes = 128;
Status ValidateEngineKey(std::string_view key);
// The job as a client may see it (REST, gRPC, the CLI, the dashboard, the
// watch streams): its replica's secret blanked. Only the agent that runs it
// (DesiredWorkloads) and the gateways (Endpoints) get the secret.
void BlankSecrets(v1::Job* job);
// A heartbeat of node `node`, which registered `gpus` GPUs: GPU reports in
// index order, each with a health, within size limits.
Status ValidateHeartbeat(const std::string& node, int gpus, const v1::Heartbeat& hb);

// A label as Kubernetes has them: the name an optional DNS-subdomain prefix
// and '/', then 1-63 letters, digits, '-', '_' or '.', starting and ending
// with a letter or digit; the value empty or the same rules. `what` names
// the map in errors ("node_selector").
Status ValidateLabel(std::string_view what, std::string_view name, std::string_view value);

// The scheduler's view of a job. `spec` must be normalized.
sched::JobRequest ToJobRequest(const std::string& id, const v1::JobSpec& spec);
// A stored job's also carries what its status says of earlier runs: the GPU
// service attained (LAS) and when it was last queued (its last attempt's
// end), so that a restarted server orders and promotes it as before.
sched::JobRequest ToJobRequest(const v1::Job& job);
sched::NodeInfo ToNodeInfo(const v1::Node& node, bool schedulable);

// The binding a bound job holds, from its status (recovery).
sched::Binding ToBinding(const v1::Job& job);
// Records where each replica runs: `allocation` is the first replica,
// `replicas` every one.
void SetAllocation(const sched::Binding& binding, v1::JobStatus* status);

// What agents call one workload: the job id for a job of one replica,
// "<job id>.<replica>" for a replica of a gang ("j-000007.1"), then
// "@<attempt>" (JobStatus.attempt, from 1): "j-000007@2", "j-000007.1@3".
// Every binding is its own workload: a job bound again to the same node is
// started again, and nothing of an older attempt changes a newer one.
std::string WorkloadId(const std::string& job_id, int replica, int replicas, int attempt);
// "SIGUSR1" or "USR1" (a signal a job may catch to checkpoint), "none": 0.
Result<int> ParseSignal(std::string_view name);
struct WorkloadRef {
  std::string job_id;
  int replica = 0;
  bool gang = false;  // the id named a replica
  int attempt = 0;    // 0: an id of an agent from before attempts ("j-000007")
};
// Splits a workload id; kInvalidArgument when malformed.
Result<WorkloadRef> ParseWorkloadId(std::string_view id);

// Checks an agent's inventory: name, GPU count, indices 0..n-1, sizes,
// NUMA nodes, the link matrix (n*n values of sched::Link) and labels.
Status ValidateRegister(const v1::RegisterRequest& req);
// Whether `host` is an IPv4 or IPv6 address (not a name).
bool IsIpAddress(const std::string& host);

bool IsTerminal(v1::JobState state);
// Bound, running, cancelling or preempting: the job holds GPUs.
bool HoldsGpus(v1::JobState state);
// Where the job runs, or last ran: its allocation's node, else its last
// attempt's first node; "" if it never ran.
const std::string& LastNode(const v1::Job& job);
// "JOB_STATE_RUNNING" -> "Running".
std::string JobStateDisplay(v1::JobState state);
// Accepts "running", "Running", "JOB_STATE_RUNNING".
Result<v1::JobState> ParseJobState(std::string_view text);
// A job array's indices as Slurm writes them: "0-99", "1-1000:10" (step),
// "1-10000%50" (at most 50 running at once), or one index "7".
Result<v1::ArraySpec> ParseArraySpec(std::string_view text);

grpc::Status ToGrpc(const Status& status);
Status FromGrpc(const grpc::Status& status);

}  // namespace drover::rpc
