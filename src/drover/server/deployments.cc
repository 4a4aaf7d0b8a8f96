#include "drover/server/deployments.h"

#include <fmt/format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

std::string Excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 64 ? out + "..." : out;
}

// The routing policy's defaults filled in and its bounds checked.
Status NormalizeRouting(v1::RoutingSpec* r) {
  static const std::set<std::string> kPolicies = {"prefix-load", "prefix", "least-load", "affinity", "round-robin"};
  if (r->policy().empty()) r->set_policy("prefix-load");
  if (!kPolicies.contains(r->policy())) {
    return InvalidArgument(fmt::format(
        "routing.policy '{}' is unknown (use prefix-load, prefix, least-load, affinity or round-robin)",
        Excerpt(r->policy())));
  }
  if (r->prefix_weight() == 0) r->set_prefix_weight(kDefaultPrefixWeight);
  if (r->load_weight() == 0) r->set_load_weight(kDefaultLoadWeight);
  if (r->load_bound() == 0) r->set_load_bound(kDefaultLoadBound);
  for (auto [field, v] : {std::pair{"routing.prefix_weight", r->prefix_weight()}, {"routing.load_weight", r->load_weight()}}) {
    if (!std::isfinite(v) || v <= 0 || v > kMaxRoutingWeight) {
      return InvalidArgument(fmt::format("{} {} is outside (0, {}] (0 means the default)", field, v, kMaxRoutingWeight));
    }
  }
  if (r->load_bound() < 0 || r->load_bound() > kMaxLoadBound) {
    return InvalidArgument(fmt::format("routing.load_bound {} is outside 0..{} (0 means {})", r->load_bound(),
                                       kMaxLoadBound, kDefaultLoadBound));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateDeploymentOptions(const DeploymentOptions& o) {
  if (o.service_priority < 0 || o.service_priority > rpc::kMaxPriority) {
    return InvalidArgument(
        fmt::format("--service-priority {} is outside 0..{}", o.service_priority, rpc::kMaxPriority));
  }
  if (o.load_staleness_ms <= 0 || o.scale_down_window_ms < 0 || o.max_replace_backoff_ms < 1000) {
    return InvalidArgument(
        "deployment options: load staleness must be positive, the scale-down window not negative "
        "and the replace back-off at least 1 s");
  }
  return Status::Ok();
}

Status NormalizeDeploymentSpec(v1::DeploymentSpec* spec, const DeploymentOptions& options) {
  DROVER_RETURN_IF_ERROR(ValidateName("deployment name", spec->name()));
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", spec->tenant()));
  if (spec->served_model_name().empty()) spec->set_served_model_name(spec->name());
  DROVER_RETURN_IF_ERROR(rpc::ValidateModelName("served_model_name", spec->served_model_name()));
  // An image has a command of its own: with custom it may serve as it is.
  const bool image = spec->has_container();
  if (spec->engine().empty()) {
    if (spec->command().empty() && !image) {
      return InvalidArgument("engine is missing: use vllm, llama.cpp, sglang, or custom with a command or an image");
    }
    spec->set_engine("custom");
  }
  static const std::set<std::string> kEngines = {"vllm", "llama.cpp", "sglang", "custom"};
  if (!kEngines.contains(spec->engine())) {
    return InvalidArgument(
        fmt::format("engine '{}' is unknown (use vllm, llama.cpp, sglang or custom)", Excerpt(spec->engine())));
  }
  if (spec->engine() == "custom" && spec->command().empty() && !image) {
    return InvalidArgument("engine custom needs a command that serves the OpenAI API on $DROVER_PORT");
  }
  // A custom command names its model itself: the model is then only a label.
  if (spec->engine() == "custom" && spec->model().empty()) spec->set_model(spec->served_model_name());
  if (spec->model().empty() || spec->model().size() > kMaxModelPathBytes || !Printable(spec->model())) {
    return InvalidArgument(fmt::format("model '{}' must be 1-{} printable characters (a path or an engine's model id)",
                                       Excerpt(spec->model()), kMaxModelPathBytes));
  }
  if (spec->gpus() == 0 && spec->gpu_milli() == 0) spec->set_gpus(1);
  if (spec->gpus() == 0) spec->set_gpus(1);  // a share of one GPU
  if (spec->priority() < 0 || spec->priority() > rpc::kMaxPriority) {
    return InvalidArgument(fmt::format("priority {} is outside 0..{} (0 means the service priority {})",
                                       spec->priority(), rpc::kMaxPriority, options.service_priority));
  }
  auto count = [](const char* field, int32_t v) -> Status {
    if (v < 0 || v > kMaxDeploymentReplicas) {
      return InvalidArgument(fmt::format("{} {} is outside 0..{}", field, v, kMaxDeploymentReplicas));
    }
    return Status::Ok();
  };
  DROVER_RETURN_IF_ERROR(count("replicas", spec->replicas()));
  DROVER_RETURN_IF_ERROR(count("min_replicas", spec->min_replicas()));
  DROVER_RETURN_IF_ERROR(count("max_replicas", spec->max_replicas()));
  if (spec->max_replicas() == 0 && spec->min_replicas() > 0) {
    return InvalidArgument(
        fmt::format("min_replicas {} needs max_replicas (auto-scaling); a fixed deployment sets "
                    "replicas",
                    spec->min_replicas()));
  }
  if (spec->max_replicas() > 0 && spec->min_replicas() > spec->max_replicas()) {
    return InvalidArgument(
        fmt::format("min_replicas {} is above max_replicas {}", spec->min_replicas(), spec->max_replicas()));
  }
  if (spec->target_outstanding() == 0) spec->set_target_outstanding(kDefaultTargetOutstanding);
  if (!(spec->target_outstanding() > 0) || !(spec->target_outstanding() <= 100'000)) {
    return InvalidArgument(fmt::format("target_outstanding {} is outside (0, 100000]", spec->target_outstanding()));
  }
  if (!std::isfinite(spec->target_queue_ms()) || spec->target_queue_ms() < 0 || spec->target_queue_ms() > 3'600'000) {
    return InvalidArgument(fmt::format("target_queue_ms {} is outside 0..3600000 (0: off)", spec->target_queue_ms()));
  }
  if (spec->target_queue_ms() > 0 && spec->max_replicas() == 0) {
    return InvalidArgument("target_queue_ms needs max_replicas (auto-scaling)");
  }
  if (spec->scale_down_idle_seconds() == 0) spec->set_scale_down_idle_seconds(kDefaultScaleDownIdleSeconds);
  if (spec->scale_down_idle_seconds() < 0 || spec->scale_down_idle_seconds() > kMaxScaleDownIdleSeconds) {
    return InvalidArgument(fmt::format("scale_down_idle_seconds {} is outside 0..{} (0 means {})",
                                       spec->scale_down_idle_seconds(), kMaxScaleDownIdleSeconds,
                                       kDefaultScaleDownIdleSeconds));
  }
  DROVER_RETURN_IF_ERROR(NormalizeRouting(spec->mutable_routing()));
  if (!spec->readiness().tcp() && spec->readiness().http_path().empty()) {
    spec->mutable_readiness()->set_http_path(std::string(kDefaultReadinessPath));
  }
  DROVER_RETURN_IF_ERROR(rpc::ValidateProbe("readiness", spec->readiness()));
  DROVER_RETURN_IF_ERROR(rpc::ValidateProbe("liveness", spec->liveness()));
  // Everything the replica job carries (command, env, GPUs, selector) is
  // checked as a job's would be.
  return ReplicaSpec(*spec, 1, options).status();
}

namespace {

// The shell line that hands the replica's secret to an engine that reads
// `variable`.
std::string ExportEngineKey(std::string_view variable) {
  return fmt::format("if [ -n \"$DROVER_ENGINE_API_KEY\" ]; then export {}=\"$DROVER_ENGINE_API_KEY\"; fi; ", variable);
}
// SGLang reads no variable: the secret goes first among the extra
// arguments, so a user's own --api-key after it still wins (argparse).
constexpr std::string_view kEngineKeyArgument =
    "if [ -n \"$DROVER_ENGINE_API_KEY\" ]; then set -- --api-key \"$DROVER_ENGINE_API_KEY\" \"$@\"; fi; ";

}  // namespace

Result<std::vector<std::string>> EngineCommand(const v1::DeploymentSpec& spec) {
  const std::string& engine = spec.engine();
  if (engine == "custom") return std::vector<std::string>(spec.command().begin(), spec.command().end());
  const int gpus = std::max(1, spec.gpus());
  std::string script;
  // The replica's secret (DROVER_ENGINE_API_KEY, set by the agent when the
  // server made one) as each engine reads it: vLLM and llama-server from
  // their environment, SGLang from --api-key, put before the extra
  // arguments. Without it the engine is left as the job's env says.
  if (engine == "vllm") {
    script = fmt::format(
        "m=$1; n=$2; shift 2; {}exec vllm serve \"$m\" --port \"$DROVER_PORT\" --served-model-name \"$n\" "
        "--tensor-parallel-size {} \"$@\"",
        ExportEngineKey("VLLM_API_KEY"), gpus);
  } else if (engine == "llama.cpp") {
    script = fmt::format(
        "m=$1; n=$2; shift 2; {}exec llama-server -m \"$m\" --port \"$DROVER_PORT\" --alias \"$n\" "
        "--n-gpu-layers 999 \"$@\"",
        ExportEngineKey("LLAMA_API_KEY"));
  } else if (engine == "sglang") {
    script = fmt::format(
        "m=$1; n=$2; shift 2; {}exec python3 -m sglang.launch_server --model-path \"$m\" --port \"$DROVER_PORT\" "
        "--served-model-name \"$n\" --tp {} \"$@\"",
        kEngineKeyArgument, gpus);
  } else {
    return InvalidArgument(fmt::format("engine '{}' is unknown", Excerpt(engine)));
  }
  std::vector<std::string> argv = {"sh", "-c", script, "drover-engine", spec.model(), spec.served_model_name()};
  argv.insert(argv.end(), spec.command().begin(), spec.command().end());
  return argv;
}

Result<v1::JobSpec> ReplicaSpec(const v1::DeploymentSpec& spec, int64_t revision, const DeploymentOptions& options) {
  v1::JobSpec job;
  job.set_name(spec.name());
  job.set_tenant(spec.tenant());
  job.set_owner(spec.owner());
  job.set_priority(spec.priority() > 0 ? spec.priority() : options.service_priority);
  job.set_gpus(spec.gpus());
  job.set_gpu_milli(spec.gpu_milli());
  job.set_gpu_memory_bytes(spec.gpu_memory_bytes());
  job.set_gpu_model(spec.gpu_model());
  job.set_cpu_millis(spec.cpu_millis());
  job.set_memory_bytes(spec.memory_bytes());
  *job.mutable_node_selector() = spec.node_selector();
  *job.mutable_env() = spec.env();
  if (spec.has_container()) *job.mutable_container() = spec.container();
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> argv, EngineCommand(spec));
  for (std::string& a : argv) job.add_command(std::move(a));
  job.set_preemptible(false);
  job.set_never_preempt(!options.services_preempt);
  v1::ServiceSpec* svc = job.mutable_service();
  *svc->mutable_readiness() = spec.readiness();
  *svc->mutable_liveness() = spec.liveness();
  svc->set_model(spec.served_model_name());
  job.set_deployment(spec.name());
  job.set_deployment_revision(revision);
  DROVER_RETURN_IF_ERROR(rpc::NormalizeJobSpec(&job));
  return job;
}

bool TemplateChanged(const v1::DeploymentSpec& a, const v1::DeploymentSpec& b) {
  v1::DeploymentSpec x = a;
  v1::DeploymentSpec y = b;
  for (v1::DeploymentSpec* s : {&x, &y}) {
    s->clear_replicas();
    s->clear_min_replicas();
    s->clear_max_replicas();
    s->clear_target_outstanding();
    s->clear_target_queue_ms();
    s->clear_scale_down_idle_seconds();
    s->clear_owner();
    s->clear_routing();  // the gateways' business: no replica restarts for it
  }
  return !google::protobuf::util::MessageDifferencer::Equals(x, y);
}

int32_t AutoscaleWant(const v1::DeploymentSpec& spec, const AutoscaleLoad& in, int64_t now_ns, int64_t last_request_ns,
                      int32_t ready, int32_t desired) {
  const int64_t waiting = in.waiting;
  const double load = static_cast<double>(std::max<int64_t>(0, in.outstanding) + std::max<int64_t>(0, waiting));
  double target = spec.target_outstanding() > 0 ? spec.target_outstanding() : kDefaultTargetOutstanding;
  double raw = std::ceil(load / target);
  int32_t want = raw >= kMaxDeploymentReplicas ? kMaxDeploymentReplicas : static_cast<int32_t>(raw);
  const int64_t idle_ns =
      int64_t{spec.scale_down_idle_seconds() > 0 ? spec.scale_down_idle_seconds() : kDefaultScaleDownIdleSeconds} *
      1'000'000'000;
  if (want == 0 && (waiting > 0 || now_ns - last_request_ns < idle_ns)) want = 1;
  if (spec.target_queue_ms() > 0 && in.queue_ms > spec.target_queue_ms()) {
    want = std::max(want, ready >= desired ? std::min(desired + 1, kMaxDeploymentReplicas) : desired);
  }
  return std::clamp(want, spec.min_replicas(), std::max(spec.min_replicas(), spec.max_replicas()));
}

}  // namespace drover::server
