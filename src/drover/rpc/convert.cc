#include "drover/rpc/convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "drover/common/ids.h"
#include "drover/common/quantity.h"

namespace drover::rpc {
namespace {

constexpr int64_t kMaxBytes = 1024 * kTiB;

bool IsEnvName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Variables the agent sets to confine a job to its GPUs; a job may not set them.
bool IsReservedEnv(std::string_view s) {
  static const std::set<std::string_view> kReserved = {
      "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
      "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK"};
  return s.starts_with("DROVER_") || kReserved.contains(s);
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

}  // namespace

Status NormalizeJobSpec(v1::JobSpec* spec) {
  if (!spec->name().empty()) DROVER_RETURN_IF_ERROR(ValidateName("job name", spec->name()));
  if (spec->tenant().empty()) spec->set_tenant(std::string(kDefaultTenant));
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", spec->tenant()));
  if (spec->priority() < 0 || spec->priority() > kMaxPriority) {
    return InvalidArgument(fmt::format("priority {} is outside 0..{}", spec->priority(), kMaxPriority));
  }
  if (spec->gpus() < 1 || spec->gpus() > kMaxGpusPerJob) {
    return InvalidArgument(fmt::format("gpus {} is outside 1..{}", spec->gpus(), kMaxGpusPerJob));
  }
  if (spec->gpu_memory_bytes() < 0 || spec->gpu_memory_bytes() > kMaxBytes) {
    return InvalidArgument(fmt::format("gpu_memory_bytes {} is outside 0..1PiB", spec->gpu_memory_bytes()));
  }
  if (spec->gpu_model().size() > 128 || HasNul(spec->gpu_model())) {
    return InvalidArgument("gpu_model is longer than 128 characters or holds a NUL byte");
  }
  static const std::set<std::string_view> kVendors = {"", "nvidia", "amd", "intel", "opencl"};
  if (!kVendors.contains(spec->gpu_vendor())) {
    return InvalidArgument(fmt::format("gpu_vendor '{}' is unknown (use nvidia, amd, intel or opencl)", spec->gpu_vendor()));
  }
  if (spec->command().empty()) return InvalidArgument("command is empty");
  if (spec->command_size() > kMaxCommandArgs) {
    return InvalidArgument(fmt::format("command has {} arguments, more than {}", spec->command_size(), kMaxCommandArgs));
  }
  size_t total = 0;
  for (const std::string& arg : spec->command()) {
    if (HasNul(arg)) return InvalidArgument("command holds a NUL byte");
    total += arg.size();
  }
  if (spec->command(0).empty()) return InvalidArgument("command[0] is empty");
  if (total > kMaxCommandBytes) {
    return InvalidArgument(fmt::format("command is {} bytes, more than {}", total, kMaxCommandBytes));
  }
  if (spec->env_size() > kMaxEnvVars) {
    return InvalidArgument(fmt::format("env has {} variables, more than {}", spec->env_size(), kMaxEnvVars));
  }
  for (const auto& [k, v] : spec->env()) {
    if (!IsEnvName(k)) return InvalidArgument(fmt::format("env name '{}' is not a valid variable name", k.substr(0, 64)));
    if (IsReservedEnv(k)) return InvalidArgument(fmt::format("env name '{}' is set by drover and may not be overridden", k));
    if (HasNul(v) || v.size() > 32 * 1024) return InvalidArgument(fmt::format("env value of '{}' holds a NUL byte or is over 32KiB", k));
  }
  if (!spec->working_dir().empty() &&
      (spec->working_dir()[0] != '/' || spec->working_dir().size() > 4096 || HasNul(spec->working_dir()))) {
    return InvalidArgument(fmt::format("working_dir '{}' is not an absolute path", spec->working_dir().substr(0, 128)));
  }
  if (spec->termination_grace_seconds() < 0 || spec->termination_grace_seconds() > kMaxGraceSeconds) {
    return InvalidArgument(fmt::format("termination_grace_seconds {} is outside 0..{}",
                                       spec->termination_grace_seconds(), kMaxGraceSeconds));
  }
  return Status::Ok();
}

sched::JobRequest ToJobRequest(const std::string& id, const v1::JobSpec& spec) {
  return sched::JobRequest{id, spec.gpus(), spec.gpu_memory_bytes(), spec.gpu_model(), spec.gpu_vendor()};
}

sched::NodeInfo ToNodeInfo(const v1::Node& node, bool schedulable) {
  sched::NodeInfo out;
  out.name = node.name();
  out.schedulable = schedulable;
  for (const v1::Gpu& g : node.gpus()) {
    out.gpus.push_back(sched::GpuInfo{g.index(), g.vendor(), g.model(), g.memory_bytes(),
                                      g.health() != v1::GPU_HEALTH_UNHEALTHY});
  }
  return out;
}

Status ValidateRegister(const v1::RegisterRequest& req) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node_name()));
  if (req.gpus_size() > sched::kMaxGpusPerNode) {
    return InvalidArgument(fmt::format("node '{}' reported {} GPUs, more than {}", req.node_name(), req.gpus_size(),
                                       sched::kMaxGpusPerNode));
  }
  for (int i = 0; i < req.gpus_size(); ++i) {
    const v1::Gpu& g = req.gpus(i);
    if (g.index() != i) {
      return InvalidArgument(fmt::format("node '{}' reported GPU {} with index {}", req.node_name(), i, g.index()));
    }
    if (g.memory_bytes() < 0 || g.memory_bytes() > kMaxBytes) {
      return InvalidArgument(fmt::format("node '{}' GPU {} reported {} bytes of memory", req.node_name(), i, g.memory_bytes()));
    }
    if (g.model().empty() || g.model().size() > 256 || g.vendor().empty() || g.vendor().size() > 32) {
      return InvalidArgument(fmt::format("node '{}' GPU {} has an empty or oversized model or vendor", req.node_name(), i));
    }
  }
  if (req.cpu_millis() < 0 || req.memory_bytes() < 0) {
    return InvalidArgument(fmt::format("node '{}' reported negative capacity", req.node_name()));
  }
  return Status::Ok();
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

std::string JobStateDisplay(v1::JobState state) {
  std::string name = v1::JobState_Name(state);
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.starts_with(kPrefix)) name = name.substr(kPrefix.size());
  if (name.empty()) return "Unknown";
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    out += i == 0 ? name[i] : static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  }
  return out;
}

Result<v1::JobState> ParseJobState(std::string_view text) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!upper.starts_with("JOB_STATE_")) upper = "JOB_STATE_" + upper;
  v1::JobState state;
  if (upper == "JOB_STATE_UNSPECIFIED" || !v1::JobState_Parse(upper, &state)) {
    return InvalidArgument(fmt::format(
        "job state '{}' is unknown (use pending, bound, running, succeeded, failed, cancelling, cancelled)", text));
  }
  return state;
}

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  return Status(static_cast<Code>(status.error_code()), status.error_message());
}

}  // namespace drover::rpc
