#pragma once
// Model deployments, the pure part (docs/deployments.md): a deployment's
// spec checked and filled with its defaults, the replica job an engine
// template makes of it, whether a change is a new template revision, and
// the auto-scaling rule. The control loop (control_loop_deployments.cc)
// keeps the replicas alive with these; nothing here has state, a clock or
// I/O. Thread-safe (pure functions).

#include <cstdint>
#include <string>
#include <vector>

#include "drover/common/status.h"
#include "drover/v1/api.pb.h"
#include "drover/v1/common.pb.h"

namespace drover::server {

// How the server runs services (flags --service-priority and
// --services-preempt): the priority of a deployment's replicas unless its
// spec names one, and whether they may preempt lower-priority preemptible
// batch jobs. Times of the deployment controller.
struct DeploymentOptions {
  int32_t service_priority = 100;
  bool services_preempt = true;
  // A gateway's load report counts this long after it was sent.
  int64_t load_staleness_ms = 5'000;
  // Scale-down waits until the wanted count stayed lower this long.
  int64_t scale_down_window_ms = 30'000;
  // A replica that failed is replaced after 1 s, doubling per failure in a
  // row up to this (reset once a replica of the revision is ready).
  int64_t max_replace_backoff_ms = 60'000;
};

// kInvalidArgument naming the flag: a service priority outside 0..1000, a
// time that is not positive. ControlLoop::Start checks it.
Status ValidateDeploymentOptions(const DeploymentOptions& options);

inline constexpr int32_t kMaxDeploymentReplicas = 256;
inline constexpr double kDefaultTargetOutstanding = 4.0;
inline constexpr int32_t kDefaultScaleDownIdleSeconds = 300;
inline constexpr int32_t kMaxScaleDownIdleSeconds = 7 * 24 * 3600;
inline constexpr size_t kMaxModelPathBytes = 1024;
// RoutingSpec's defaults and bounds (docs/gateway.md, "Replica choice").
inline constexpr double kDefaultPrefixWeight = 2.0;
inline constexpr double kDefaultLoadWeight = 1.0;
inline constexpr int32_t kDefaultLoadBound = 12;
inline constexpr double kMaxRoutingWeight = 1000.0;
inline constexpr int32_t kMaxLoadBound = 100'000;
// The readiness probe of a deployment that names none.
inline constexpr std::string_view kDefaultReadinessPath = "/health";

// Checks every field and fills the defaults: served_model_name (the name),
// engine (custom when a command or an image is given), gpus 1 (unless a share),
// readiness GET /health, target_outstanding 4, scale_down_idle_seconds 300,
// routing prefix-load with prefix weight 2, load weight 1, a load bound of 12.
// The tenant and owner must already be set (the caller's). The replica job
// it makes is checked too (rpc::NormalizeJobSpec: env, selector, sizes).
// kInvalidArgument with the field's name and the rule.
Status NormalizeDeploymentSpec(v1::DeploymentSpec* spec, const DeploymentOptions& options);

// The command line of an engine template (docs/deployments.md):
//   vllm      vllm serve <model> --port $DROVER_PORT --served-model-name <name> --tensor-parallel-size <gpus>
//   llama.cpp llama-server -m <model> --port $DROVER_PORT --alias <name> --n-gpu-layers 999
//   sglang    python3 -m sglang.launch_server --model-path <model> --port $DROVER_PORT
//             --served-model-name <name> --tp <gpus>
//   custom    the spec's command, as given
// Extra `command` arguments follow a template's. Agents exec commands
// without a shell, so a template runs under `sh -c` for the port: the
// model, the name and the extra arguments are the script's positional
// parameters, never parsed by the shell:
//   sh -c 'm=$1; n=$2; shift 2; exec vllm serve "$m" --port "$DROVER_PORT" ... "$@"' drover-engine MODEL NAME EXTRA...
// The replica's secret, DROVER_ENGINE_API_KEY (the agent sets it when the
// job has one), reaches the engine as VLLM_API_KEY (vllm), LLAMA_API_KEY
// (llama.cpp) or "--api-key KEY" before the extra arguments (sglang, which
// reads no variable); the script does it only when the variable is set.
Result<std::vector<std::string>> EngineCommand(const v1::DeploymentSpec& spec);
Result<std::vector<std::string>> EngineCommand(const v1::DeploymentSpec& spec);

// The job of one replica of revision `revision`: a service (readiness,
// liveness, served model name) of the deployment's tenant and owner, at its
// priority (or options.service_priority), not preemptible, with the
// template's command. Normalized.
Result<v1::JobSpec> ReplicaSpec(const v1::DeploymentSpec& spec, int64_t revision, const DeploymentOptions& options);

// Whether `a` and `b` (normalized) differ in anything but the replica
// counts and the auto-scaling settings: such a change is a new revision.
bool TemplateChanged(const v1::DeploymentSpec& a, const v1::DeploymentSpec& b);

// Auto-scaling (max_replicas > 0), what the load asks for now:
//   want = ceil((outstanding + waiting) / target_outstanding)
//   want >= 1 while a request came within scale_down_idle_seconds or one waits
//   clamped to min_replicas..max_replicas.
// The controller scales up to `want` at once and down to it only when it
// stayed below the current count for the scale-down window.
// With target_queue_ms set, an engine queue time above it (queue_ms, -1 if
// not known) asks for desired + 1 once `ready` reaches `desired` (a
// replica still starting is awaited first), and never fewer than desired.
struct AutoscaleLoad {
  int64_t outstanding = 0;
  int64_t waiting = 0;
  double queue_ms = -1;
};
int32_t AutoscaleWant(const v1::DeploymentSpec& spec, const AutoscaleLoad& load, int64_t now_ns,
                      int64_t last_request_ns, int32_t ready = 0, int32_t desired = 0);

// Whether the deployment scales on load.
inline bool Autoscaled(const v1::DeploymentSpec& spec) { return spec.max_replicas() > 0; }

}  // namespace drover::server
