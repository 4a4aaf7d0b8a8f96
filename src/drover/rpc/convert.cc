#include "drover/rpc/convert.h"

#include <arpa/inet.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <set>

#include "drover/common/ids.h"
#include "drover/common/image_ref.h"
#include "drover/common/quantity.h"
#include "drover/rpc/container.h"

namespace drover::rpc {
namespace {

constexpr int64_t kMaxBytes = 1024 * kTiB;

bool IsEnvName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Variables the agent sets to confine a job to its GPUs; a job may not set them.
bool IsReservedEnv(std::string_view s) {
  static const std::set<std::string_view> kReserved = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                                                       "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                       "GPU_DEVICE_ORDINAL",   "ZE_AFFINITY_MASK"};
  // DROVER_SIM_LOAD is the job's own word to a simulated GPU (how busy it
  // keeps it), DROVER_GPU_MEMORY_LIMIT its request for the memory-limit shim
  // (docs/memory.md; a share's own limit wins); every other DROVER_ name is
  // the agent's to set.
  return (s.starts_with("DROVER_") && s != "DROVER_SIM_LOAD" && s != "DROVER_GPU_MEMORY_LIMIT") ||
         kReserved.contains(s);
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

bool IsAsciiAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// 1-63 of [A-Za-z0-9_.-], starting and ending with a letter or digit.
bool IsLabelToken(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAsciiAlnum(s.front()) || !IsAsciiAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

// What a printable excerpt of untrusted text looks like in an error.
std::string Excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 64 ? out + "..." : out;
}

// gpus 0: CPU-only work, placed by CPU and host memory alone; one CPU
// when it asks for none, so that it is placed by something.
Status ValidateCpuOnly(v1::JobSpec* spec) {
  if (spec->gpus() != 0) return Status::Ok();
  if (spec->gpu_milli() != 0 || spec->gpu_memory_bytes() != 0 || !spec->gpu_model().empty() ||
      !spec->gpu_vendor().empty()) {
    return InvalidArgument("gpus 0 (CPU-only) takes no gpu_milli, gpu_memory_bytes, gpu_model or gpu_vendor");
  }
  if (spec->cpu_millis() == 0) spec->set_cpu_millis(kDefaultCpuOnlyMillis);
  return Status::Ok();
}

// after: each names a job once ("j-000003"), with "ok" (the default) or
// "any"; whether it exists, is the caller's and makes no cycle is the
// control loop's to check.
Status ValidateDependencies(v1::JobSpec* spec) {
  if (spec->after_size() > kMaxDependencies) {
    return InvalidArgument(fmt::format("after names {} jobs, more than {}", spec->after_size(), kMaxDependencies));
  }
  std::set<std::string> seen;
  for (v1::JobDependency& d : *spec->mutable_after()) {
    if (!ParseJobId(d.job_id()).ok()) {
      return InvalidArgument(fmt::format("after: '{}' is not a job id (j-000003)", Excerpt(d.job_id())));
    }
    if (d.condition().empty()) d.set_condition("ok");
    if (d.condition() != "ok" && d.condition() != "any") {
      return InvalidArgument(
          fmt::format("after {}: condition '{}' is unknown (use ok or any)", d.job_id(), Excerpt(d.condition())));
    }
    if (!seen.insert(d.job_id()).second) return InvalidArgument(fmt::format("after names {} twice", d.job_id()));
  }
  return Status::Ok();
}

Status ValidateSchedulingFields(v1::JobSpec* spec) {
  DROVER_RETURN_IF_ERROR(ValidateDependencies(spec));
  if (spec->time_limit_seconds() < 0 || spec->time_limit_seconds() > kMaxEstimateSeconds) {
    return InvalidArgument(fmt::format("time_limit_seconds {} is outside 0..{} (0: none)", spec->time_limit_seconds(),
                                       kMaxEstimateSeconds));
  }
  if (spec->gpu_milli() < 0 || spec->gpu_milli() > sched::kWholeGpu) {
    return InvalidArgument(fmt::format("gpu_milli {} is outside 0..{} (0 or {} means whole GPUs)", spec->gpu_milli(),
                                       sched::kWholeGpu, sched::kWholeGpu));
  }
  if (spec->gpu_milli() == sched::kWholeGpu) spec->set_gpu_milli(0);
  if (spec->replicas() < 0 || spec->replicas() > kMaxReplicas) {
    return InvalidArgument(fmt::format("replicas {} is outside 1..{}", spec->replicas(), kMaxReplicas));
  }
  if (spec->replicas() == 0) spec->set_replicas(1);
  if (int64_t total = int64_t{spec->replicas()} * spec->gpus(); total > kMaxGpusPerGang) {
    return InvalidArgument(fmt::format("replicas x gpus is {} GPUs, more than {}", total, kMaxGpusPerGang));
  }
  if (spec->gpu_milli() > 0) {
    if (spec->gpus() != 1) {
      return InvalidArgument(fmt::format("gpu_milli {} is a share of one GPU, but gpus is {} (must be 1)",
                                         spec->gpu_milli(), spec->gpus()));
    }
    if (spec->replicas() != 1) {
      return InvalidArgument(fmt::format("gpu_milli {} is a share of one GPU, but replicas is {} (must be 1)",
                                         spec->gpu_milli(), spec->replicas()));
    }
    if (spec->gpu_memory_bytes() <= 0) {
      return InvalidArgument(fmt::format(
          "gpu_milli {} shares a GPU and needs gpu_memory_bytes > 0: the memory reserved on it", spec->gpu_milli()));
    }
  }
  if (spec->node_selector_size() > kMaxSelectorLabels) {
    return InvalidArgument(
        fmt::format("node_selector has {} labels, more than {}", spec->node_selector_size(), kMaxSelectorLabels));
  }
  for (const auto& [k, v] : spec->node_selector()) DROVER_RETURN_IF_ERROR(ValidateLabel("node_selector", k, v));
  if (!spec->topology().empty()) {
    auto topology = sched::ParseTopology(spec->topology());
    if (!topology.ok()) {
      return InvalidArgument(fmt::format("topology '{}' is unknown (use best-effort, island, numa, switch or rack)",
                                         Excerpt(spec->topology())));
    }
    spec->set_topology(std::string(sched::TopologyName(*topology)));
  }
  if (spec->restart_policy().empty()) spec->set_restart_policy("never");
  if (spec->restart_policy() != "never" && spec->restart_policy() != "on-failure") {
    return InvalidArgument(
        fmt::format("restart_policy '{}' is unknown (use never or on-failure)", Excerpt(spec->restart_policy())));
  }
  if (spec->max_restarts() < 0 || spec->max_restarts() > kMaxRestarts) {
    return InvalidArgument(fmt::format("max_restarts {} is outside 0..{} (0 means {})", spec->max_restarts(),
                                       kMaxRestarts, kDefaultMaxRestarts));
  }
  if (spec->restart_policy() == "never" && spec->max_restarts() != 0) {
    return InvalidArgument("max_restarts needs restart_policy on-failure");
  }
  if (spec->restart_policy() == "on-failure" && spec->max_restarts() == 0) spec->set_max_restarts(kDefaultMaxRestarts);
  if (spec->runtime_estimate_seconds() < 0 || spec->runtime_estimate_seconds() > kMaxEstimateSeconds) {
    return InvalidArgument(fmt::format("runtime_estimate_seconds {} is outside 0..{} (0 means unknown)",
                                       spec->runtime_estimate_seconds(), kMaxEstimateSeconds));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateModelName(std::string_view what, std::string_view name) {
  bool ok =
      !name.empty() && name.size() <= kMaxModelNameBytes && IsAsciiAlnum(name.front()) &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '@' || c == '+';
      });
  if (!ok) {
    return InvalidArgument(
        fmt::format("{} '{}' is not 1-{} letters, digits or '-_.:/@+' starting with a letter or digit", what,
                    Excerpt(name), kMaxModelNameBytes));
  }
  return Status::Ok();
}

Status ValidateProbe(std::string_view what, const v1::Probe& probe) {
  const std::string& path = probe.http_path();
  if (!path.empty()) {
    bool printable = std::all_of(path.begin(), path.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (path[0] != '/' || path.size() > kMaxProbePathBytes || !printable) {
      return InvalidArgument(
          fmt::format("{} probe path '{}' must start with '/' and be at most {} printable characters without spaces",
                      what, Excerpt(path), kMaxProbePathBytes));
    }
    if (probe.tcp()) return InvalidArgument(fmt::format("{} probe sets both http_path and tcp; choose one", what));
  }
  auto check = [&](const char* field, int32_t v, int32_t max) -> Status {
    if (v < 0 || v > max) {
      return InvalidArgument(fmt::format("{} probe {} {} is outside 0..{} (0 means the default)", what, field, v, max));
    }
    return Status::Ok();
  };
  DROVER_RETURN_IF_ERROR(check("initial_delay_ms", probe.initial_delay_ms(), kMaxProbeMs));
  DROVER_RETURN_IF_ERROR(check("period_ms", probe.period_ms(), kMaxProbeMs));
  DROVER_RETURN_IF_ERROR(check("timeout_ms", probe.timeout_ms(), kMaxProbeMs));
  DROVER_RETURN_IF_ERROR(check("failure_threshold", probe.failure_threshold(), kMaxFailureThreshold));
  return Status::Ok();
}

Status ValidateService(const v1::ServiceSpec& service) {
  DROVER_RETURN_IF_ERROR(ValidateProbe("readiness", service.readiness()));
  DROVER_RETURN_IF_ERROR(ValidateProbe("liveness", service.liveness()));
  if (!service.model().empty()) DROVER_RETURN_IF_ERROR(ValidateModelName("service model", service.model()));
  auto check = [](const char* field, int32_t v, int32_t max) -> Status {
    if (v < 0 || v > max) {
      return InvalidArgument(fmt::format("service {} {} is outside 0..{} (0 means the default)", field, v, max));
    }
    return Status::Ok();
  };
  DROVER_RETURN_IF_ERROR(check("restart_backoff_ms", service.restart_backoff_ms(), kMaxProbeMs));
  DROVER_RETURN_IF_ERROR(check("max_restart_backoff_ms", service.max_restart_backoff_ms(), kMaxProbeMs));
  DROVER_RETURN_IF_ERROR(check("ready_timeout_ms", service.ready_timeout_ms(), kMaxReadyTimeoutMs));
  if (service.restart_backoff_ms() > 0 && service.max_restart_backoff_ms() > 0 &&
      service.max_restart_backoff_ms() < service.restart_backoff_ms()) {
    return InvalidArgument(fmt::format("service max_restart_backoff_ms {} is below restart_backoff_ms {}",
                                       service.max_restart_backoff_ms(), service.restart_backoff_ms()));
  }
  return ValidateEngineKey(service.api_key());
}

Status ValidateEngineKey(std::string_view key) {
  if (key.empty()) return Status::Ok();
  const bool base64url = std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  // The key itself is never put in a message.
  if (!base64url || key.size() < kMinEngineKeyBytes || key.size() > kMaxEngineKeyBytes) {
    return InvalidArgument(fmt::format("service api_key must be {} to {} base64url characters ({} given)",
                                       kMinEngineKeyBytes, kMaxEngineKeyBytes, key.size()));
  }
  return Status::Ok();
}

void BlankSecrets(v1::Job* job) {
  if (job->spec().has_service()) job->mutable_spec()->mutable_service()->clear_api_key();
}

Status ValidateLabel(std::string_view what, std::string_view name, std::string_view value) {
  std::string_view local = name;
  if (size_t slash = name.find('/'); slash != std::string_view::npos) {
    std::string_view prefix = name.substr(0, slash);
    local = name.substr(slash + 1);
    bool ok = !prefix.empty() && prefix.size() <= 253;
    for (size_t i = 0; ok && i < prefix.size();) {
      size_t dot = prefix.find('.', i);
      if (dot == std::string_view::npos) dot = prefix.size();
      std::string_view part = prefix.substr(i, dot - i);
      ok = ValidateName("label prefix", part).ok();
      i = dot + 1;
      if (dot == prefix.size() - 1) ok = false;  // a trailing dot
    }
    if (!ok) {
      return InvalidArgument(
          fmt::format("{} label '{}' has a bad prefix (expected a DNS name like example.com/)", what, Excerpt(name)));
    }
  }
  if (!IsLabelToken(local)) {
    return InvalidArgument(fmt::format(
        "{} label name '{}' is not 1-63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit",
        what, Excerpt(name)));
  }
  if (!value.empty() && !IsLabelToken(value)) {
    return InvalidArgument(
        fmt::format("{} label '{}' has value '{}': not 0-63 letters, digits, '-', '_' or '.' starting and ending with "
                    "a letter or digit",
                    what, Excerpt(name), Excerpt(value)));
  }
  return Status::Ok();
}

Status NormalizeJobSpec(v1::JobSpec* spec) {
  if (!spec->name().empty()) DROVER_RETURN_IF_ERROR(ValidateName("job name", spec->name()));
  if (spec->tenant().empty()) spec->set_tenant(std::string(kDefaultTenant));
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", spec->tenant()));
  if (spec->priority() < 0 || spec->priority() > kMaxPriority) {
    return InvalidArgument(fmt::format("priority {} is outside 0..{}", spec->priority(), kMaxPriority));
  }
  if (spec->gpus() < 0 || spec->gpus() > kMaxGpusPerJob) {
    return InvalidArgument(fmt::format("gpus {} is outside 0..{}", spec->gpus(), kMaxGpusPerJob));
  }
  DROVER_RETURN_IF_ERROR(ValidateCpuOnly(spec));
  if (spec->gpu_memory_bytes() < 0 || spec->gpu_memory_bytes() > kMaxBytes) {
    return InvalidArgument(fmt::format("gpu_memory_bytes {} is outside 0..1PiB", spec->gpu_memory_bytes()));
  }
  if (spec->gpu_model().size() > 128 || HasNul(spec->gpu_model())) {
    return InvalidArgument("gpu_model is longer than 128 characters or holds a NUL byte");
  }
  static const std::set<std::string_view> kVendors = {"", "nvidia", "amd", "intel", "opencl"};
  if (!kVendors.contains(spec->gpu_vendor())) {
    return InvalidArgument(
        fmt::format("gpu_vendor '{}' is unknown (use nvidia, amd, intel or opencl)", spec->gpu_vendor()));
  }
  // A container's image has a command of its own, which runs when the job
  // names none.
  if (spec->command().empty() && !spec->has_container()) return InvalidArgument("command is empty");
  if (spec->command_size() > kMaxCommandArgs) {
    return InvalidArgument(
        fmt::format("command has {} arguments, more than {}", spec->command_size(), kMaxCommandArgs));
  }
  size_t total = 0;
  for (const std::string& arg : spec->command()) {
    if (HasNul(arg)) return InvalidArgument("command holds a NUL byte");
    total += arg.size();
  }
  if (!spec->command().empty() && spec->command(0).empty()) return InvalidArgument("command[0] is empty");
  if (total > kMaxCommandBytes) {
    return InvalidArgument(fmt::format("command is {} bytes, more than {}", total, kMaxCommandBytes));
  }
  if (spec->env_size() > kMaxEnvVars) {
    return InvalidArgument(fmt::format("env has {} variables, more than {}", spec->env_size(), kMaxEnvVars));
  }
  for (const auto& [k, v] : spec->env()) {
    if (!IsEnvName(k))
      return InvalidArgument(fmt::format("env name '{}' is not a valid variable name", k.substr(0, 64)));
    if (IsReservedEnv(k))
      return InvalidArgument(fmt::format("env name '{}' is set by drover and may not be overridden", k));
    if (HasNul(v) || v.size() > 32 * 1024)
      return InvalidArgument(fmt::format("env value of '{}' holds a NUL byte or is over 32KiB", k));
  }
  if (!spec->working_dir().empty() &&
      (spec->working_dir()[0] != '/' || spec->working_dir().size() > 4096 || HasNul(spec->working_dir()))) {
    return InvalidArgument(fmt::format("working_dir '{}' is not an absolute path", spec->working_dir().substr(0, 128)));
  }
  if (spec->cpu_millis() < 0 || spec->cpu_millis() > kMaxCpuMillis) {
    return InvalidArgument(
        fmt::format("cpu_millis {} is outside 0..{} (0 means not asked)", spec->cpu_millis(), kMaxCpuMillis));
  }
  if (spec->memory_bytes() < 0 || spec->memory_bytes() > kMaxBytes) {
    return InvalidArgument(fmt::format("memory_bytes {} is outside 0..1PiB (0 means not asked)", spec->memory_bytes()));
  }
  if (spec->checkpoint_signal().empty()) spec->set_checkpoint_signal("SIGUSR1");
  DROVER_RETURN_IF_ERROR(ParseSignal(spec->checkpoint_signal()).status());
  if (spec->checkpoint_grace_seconds() == 0) spec->set_checkpoint_grace_seconds(kDefaultCheckpointGraceSeconds);
  if (spec->checkpoint_grace_seconds() < 0 || spec->checkpoint_grace_seconds() > kMaxGraceSeconds) {
    return InvalidArgument(fmt::format("checkpoint_grace_seconds {} is outside 1..{}", spec->checkpoint_grace_seconds(),
                                       kMaxGraceSeconds));
  }
  if (spec->termination_grace_seconds() < 0 || spec->termination_grace_seconds() > kMaxGraceSeconds) {
    return InvalidArgument(fmt::format("termination_grace_seconds {} is outside 0..{}",
                                       spec->termination_grace_seconds(), kMaxGraceSeconds));
  }
  DROVER_RETURN_IF_ERROR(ValidateSchedulingFields(spec));
  if (spec->has_container()) DROVER_RETURN_IF_ERROR(ValidateContainer(spec->container()));
  if (!spec->deployment().empty()) DROVER_RETURN_IF_ERROR(ValidateName("deployment", spec->deployment()));
  if (spec->has_service()) {
    DROVER_RETURN_IF_ERROR(ValidateService(spec->service()));
    if (spec->replicas() != 1) {
      return InvalidArgument(fmt::format(
          "a service runs one process per job, but replicas is {} (a deployment runs replicas of a service)",
          spec->replicas()));
    }
  } else if (!spec->deployment().empty()) {
    return InvalidArgument("a deployment's replica must be a service");
  }
  return Status::Ok();
}

sched::JobRequest ToJobRequest(const v1::Job& job) {
  sched::JobRequest r = ToJobRequest(job.id(), job.spec());
  const v1::JobStatus& st = job.status();
  r.attained_gpu_ms = std::max<int64_t>(0, st.attained_gpu_ms());
  if (st.attempts_size() > 0)
    r.queued_ms = std::max<int64_t>(0, st.attempts(st.attempts_size() - 1).end_time_unix_nanos() / 1'000'000);
  return r;
}

sched::JobRequest ToJobRequest(const std::string& id, const v1::JobSpec& spec) {
  sched::JobRequest r;
  r.id = id;
  r.tenant = spec.tenant().empty() ? std::string(kDefaultTenant) : spec.tenant();
  r.priority = spec.priority();
  r.may_preempt = !spec.never_preempt();
  r.replicas = spec.replicas() > 0 ? spec.replicas() : 1;
  r.gpus = spec.gpus();
  r.gpu_milli = spec.gpu_milli() > 0 && spec.gpu_milli() < sched::kWholeGpu ? spec.gpu_milli() : sched::kWholeGpu;
  r.gpu_memory_bytes = spec.gpu_memory_bytes();
  r.gpu_model = spec.gpu_model();
  r.gpu_vendor = spec.gpu_vendor();
  r.cpu_milli = spec.cpu_millis();
  r.memory_bytes = spec.memory_bytes();
  r.node_selector = {spec.node_selector().begin(), spec.node_selector().end()};
  // Normalized specs hold a valid name; an unreadable one (an old record)
  // asks for nothing rather than failing the job.
  auto topology = sched::ParseTopology(spec.topology());
  r.topology = spec.topology().empty() || !topology.ok() ? sched::Topology::kBestEffort : *topology;
  r.runtime_estimate_ms = spec.runtime_estimate_seconds() * 1000;
  r.preemptible = spec.preemptible();
  // The key nodes' stores list it under (rpc::ImageKeys).
  if (spec.has_container()) {
    if (auto ref = ParseImageRef(spec.container().image()); ref.ok()) {
      r.image = ref->digest.empty() ? ref->String() : ref->digest;
    }
  }
  return r;
}

sched::Binding ToBinding(const v1::Job& job) {
  sched::Binding b;
  b.job_id = job.id();
  auto one = [](const v1::Allocation& a) {
    sched::Placement p;
    p.node = a.node();
    p.gpu_indices.assign(a.gpu_indices().begin(), a.gpu_indices().end());
    p.gpu_milli = a.gpu_milli() > 0 ? a.gpu_milli() : sched::kWholeGpu;
    p.gpu_memory_bytes = a.gpu_memory_bytes();
    return p;
  };
  if (job.status().replicas_size() > 0) {
    for (const v1::Allocation& a : job.status().replicas()) b.replicas.push_back(one(a));
  } else {
    b.replicas.push_back(one(job.status().allocation()));
  }
  return b;
}

void SetAllocation(const sched::Binding& binding, v1::JobStatus* status) {
  status->clear_allocation();
  status->clear_replicas();
  auto fill = [](const sched::Placement& p, v1::Allocation* a) {
    a->set_node(p.node);
    for (int i : p.gpu_indices) a->add_gpu_indices(i);
    a->set_gpu_milli(p.gpu_milli);
    a->set_gpu_memory_bytes(p.gpu_milli < sched::kWholeGpu ? p.gpu_memory_bytes : 0);
  };
  if (binding.replicas.empty()) return;
  fill(binding.replicas.front(), status->mutable_allocation());
  if (binding.replicas.size() > 1) {
    for (const sched::Placement& p : binding.replicas) fill(p, status->add_replicas());
  }
}

sched::NodeInfo ToNodeInfo(const v1::Node& node, bool schedulable) {
  sched::NodeInfo out;
  out.name = node.name();
  out.schedulable = schedulable;
  for (const v1::Gpu& g : node.gpus()) {
    out.gpus.push_back(sched::GpuInfo{g.index(), g.vendor(), g.model(), g.memory_bytes(),
                                      g.health() != v1::GPU_HEALTH_UNHEALTHY, g.numa_node()});
  }
  // A matrix of the wrong shape (an old record) is dropped: the scheduler
  // then derives links from the NUMA nodes.
  if (node.links_size() == node.gpus_size() * node.gpus_size()) {
    for (int32_t l : node.links()) {
      out.links.push_back(
          static_cast<sched::Link>(std::clamp<int32_t>(l, 0, static_cast<int32_t>(sched::Link::kFabric))));
    }
  }
  out.labels = {node.labels().begin(), node.labels().end()};
  // Host capacity: jobs that ask for CPU or memory are placed by it.
  out.cpu_milli = node.cpu_millis();
  out.memory_bytes = node.memory_bytes();
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
      return InvalidArgument(
          fmt::format("node '{}' GPU {} reported {} bytes of memory", req.node_name(), i, g.memory_bytes()));
    }
    if (g.model().empty() || g.model().size() > 256 || g.vendor().empty() || g.vendor().size() > 32) {
      return InvalidArgument(
          fmt::format("node '{}' GPU {} has an empty or oversized model or vendor", req.node_name(), i));
    }
    if (g.numa_node() < 0 || g.numa_node() > 1023) {
      return InvalidArgument(
          fmt::format("node '{}' GPU {} reported NUMA node {}, outside 0..1023", req.node_name(), i, g.numa_node()));
    }
    if (g.uuid().size() > 128 || g.pci_bus_id().size() > 32 || g.architecture().size() > 64 ||
        g.driver_version().size() > 64 || g.backend().size() > 32 || g.health_reason().size() > kMaxReasonBytes) {
      return InvalidArgument(
          fmt::format("node '{}' GPU {} has an oversized uuid, pci bus id, architecture, driver "
                      "version, backend or health reason",
                      req.node_name(), i));
    }
    if (g.mig_instances_size() > 64) {
      return InvalidArgument(fmt::format("node '{}' GPU {} reported {} MIG instances, more than 64", req.node_name(), i,
                                         g.mig_instances_size()));
    }
  }
  const v1::HostTopology& t = req.topology();
  if (t.sockets() < 0 || t.sockets() > 1024 || t.numa_nodes() < 0 || t.numa_nodes() > 1024 || t.cores() < 0 ||
      t.cores() > 1 << 20 || t.nics_size() > 256) {
    return InvalidArgument(
        fmt::format("node '{}' reported an implausible topology ({} sockets, {} NUMA nodes, {} "
                    "cores, {} NICs)",
                    req.node_name(), t.sockets(), t.numa_nodes(), t.cores(), t.nics_size()));
  }
  for (const v1::Nic& nic : t.nics()) {
    if (nic.name().empty() || nic.name().size() > 64 || nic.pci_bus_id().size() > 32) {
      return InvalidArgument(fmt::format("node '{}' reported a NIC with an empty or oversized name", req.node_name()));
    }
  }
  int64_t n = req.gpus_size();
  if (req.links_size() != 0 && req.links_size() != n * n) {
    return InvalidArgument(fmt::format("node '{}' reported a link matrix of {} values, expected {} ({} GPUs squared)",
                                       req.node_name(), req.links_size(), n * n, n));
  }
  for (int i = 0; i < req.links_size(); ++i) {
    int32_t l = req.links(i);
    if (l < 0 || l > static_cast<int32_t>(sched::Link::kFabric)) {
      return InvalidArgument(fmt::format("node '{}' link between GPU {} and GPU {} is {}, outside 0..{}",
                                         req.node_name(), i / n, i % n, l, static_cast<int>(sched::Link::kFabric)));
    }
    if (l != req.links(static_cast<int>((i % n) * n + i / n))) {
      return InvalidArgument(
          fmt::format("node '{}' link matrix is not symmetric at GPUs {} and {}", req.node_name(), i / n, i % n));
    }
  }
  if (req.labels_size() > kMaxNodeLabels) {
    return InvalidArgument(
        fmt::format("node '{}' reported {} labels, more than {}", req.node_name(), req.labels_size(), kMaxNodeLabels));
  }
  for (const auto& [k, v] : req.labels()) {
    DROVER_RETURN_IF_ERROR(ValidateLabel(fmt::format("node '{}'", req.node_name()), k, v));
  }
  if (req.cpu_millis() < 0 || req.memory_bytes() < 0) {
    return InvalidArgument(fmt::format("node '{}' reported negative capacity", req.node_name()));
  }
  if (const std::string& g = req.gossip_address(); !g.empty()) {
    // host:port, the port a number; the host is the agent's to choose.
    size_t colon = g.rfind(':');
    int port = -1;
    if (colon != std::string::npos) std::from_chars(g.data() + colon + 1, g.data() + g.size(), port);
    bool printable = std::all_of(g.begin(), g.end(), [](char c) { return c > ' ' && c < 127; });
    if (g.size() > 262 || colon == std::string::npos || colon == 0 || port <= 0 || port > 65535 || !printable) {
      return InvalidArgument(fmt::format("node '{}' reported a malformed gossip address '{}' (expected host:port)",
                                         req.node_name(), Excerpt(g)));
    }
  }
  if (const std::string& h = req.advertise_host(); !h.empty() && !IsIpAddress(h)) {
    return InvalidArgument(
        fmt::format("node '{}' advertised '{}', which is not an IP address", req.node_name(), Excerpt(h)));
  }
  const int first = req.launch_port_first(), last = req.launch_port_last();
  if ((first != 0 || last != 0) && (first < 1 || last > 65535 || first > last)) {
    return InvalidArgument(fmt::format("node '{}' reported a launch port range {}-{} (expected FIRST-LAST in 1..65535)",
                                       req.node_name(), first, last));
  }
  return Status::Ok();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

Status ValidateHeartbeat(const std::string& node, int gpus, const v1::Heartbeat& hb) {
  if (hb.gpus_size() > gpus) {
    return InvalidArgument(
        fmt::format("node '{}' reported {} GPUs in a heartbeat, registered {}", node, hb.gpus_size(), gpus));
  }
  for (int i = 0; i < hb.gpus_size(); ++i) {
    const v1::GpuReport& r = hb.gpus(i);
    if (r.index() != i) {
      return InvalidArgument(fmt::format("node '{}' heartbeat reported GPU {} at position {}", node, r.index(), i));
    }
    if (r.health() != v1::GPU_HEALTH_HEALTHY && r.health() != v1::GPU_HEALTH_UNHEALTHY) {
      return InvalidArgument(fmt::format("node '{}' heartbeat reported GPU {} without a health", node, i));
    }
    if (r.health_reason().size() > kMaxReasonBytes || r.telemetry().processes_size() > 4096 ||
        r.telemetry().throttle_reasons_size() > 8) {
      return InvalidArgument(fmt::format("node '{}' heartbeat for GPU {} is oversized", node, i));
    }
  }
  if (hb.peers_size() > kMaxPeersPerHeartbeat) {
    return InvalidArgument(
        fmt::format("node '{}' heartbeat names {} peers, more than {}", node, hb.peers_size(), kMaxPeersPerHeartbeat));
  }
  for (const v1::PeerBeat& p : hb.peers()) {
    if (!ValidateNodeName(p.node_name()).ok() || p.beat() < 0) {
      return InvalidArgument(fmt::format("node '{}' heartbeat names a malformed peer", node));
    }
  }
  if (hb.checkpoints_size() > kMaxCheckpointsPerHeartbeat) {
    return InvalidArgument(fmt::format("node '{}' heartbeat names {} checkpoints, more than {}", node,
                                       hb.checkpoints_size(), kMaxCheckpointsPerHeartbeat));
  }
  for (const v1::CheckpointMark& c : hb.checkpoints()) {
    if (!ParseWorkloadId(c.workload_id()).ok() || c.time_unix_nanos() <= 0) {
      return InvalidArgument(fmt::format("node '{}' heartbeat names a malformed checkpoint", node));
    }
  }
  return Status::Ok();
}

Result<int> ParseSignal(std::string_view name) {
  static constexpr std::pair<std::string_view, int> kSignals[] = {
      {"none", 0},          {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGINT", SIGINT},     {"SIGHUP", SIGHUP},
      {"SIGQUIT", SIGQUIT}, {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM}, {"SIGWINCH", SIGWINCH}, {"SIGCONT", SIGCONT}};
  for (const auto& [n, sig] : kSignals) {
    if (n == name || (n.starts_with("SIG") && n.substr(3) == name)) return sig;
  }
  return InvalidArgument(
      fmt::format("checkpoint signal '{}' is not one of none, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, "
                  "SIGQUIT, SIGALRM, SIGTERM, SIGWINCH, SIGCONT",
                  Excerpt(name)));
}

std::string WorkloadId(const std::string& job_id, int replica, int replicas, int attempt) {
  std::string id = replicas > 1 ? fmt::format("{}.{}", job_id, replica) : job_id;
  return attempt > 0 ? fmt::format("{}@{}", id, attempt) : id;
}

namespace {

// Digits only, no sign, no leading zero (one spelling per number), < limit.
bool ParseSmallNumber(std::string_view digits, int limit, int* out) {
  if (digits.empty() || digits[0] < '0' || digits[0] > '9' || (digits.size() > 1 && digits[0] == '0')) return false;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  return ec == std::errc() && p == digits.data() + digits.size() && *out >= 0 && *out < limit;
}

}  // namespace

Result<WorkloadRef> ParseWorkloadId(std::string_view id) {
  const std::string_view whole = id;
  auto malformed = [whole] {
    return InvalidArgument(fmt::format(
        "workload id '{}' is malformed (expected j-000042, j-000042.3, j-000042@2 or j-000042.3@2)", Excerpt(whole)));
  };
  WorkloadRef ref;
  size_t at = id.find('@');
  if (at != std::string_view::npos) {
    // "@0" is not an attempt: the first binding is 1 and ids without one are 0.
    if (!ParseSmallNumber(id.substr(at + 1), kMaxAttempts, &ref.attempt) || ref.attempt == 0) return malformed();
    id = id.substr(0, at);
  }
  size_t dot = id.find('.');
  std::string_view job = id.substr(0, dot);
  DROVER_RETURN_IF_ERROR(ParseJobId(job).status());
  ref.job_id = std::string(job);
  if (dot == std::string_view::npos) return ref;
  if (!ParseSmallNumber(id.substr(dot + 1), kMaxReplicas, &ref.replica)) return malformed();
  ref.gang = true;
  return ref;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

bool HoldsGpus(v1::JobState state) {
  return state == v1::JOB_STATE_BOUND || state == v1::JOB_STATE_RUNNING || state == v1::JOB_STATE_CANCELLING ||
         state == v1::JOB_STATE_PREEMPTING;
}

const std::string& LastNode(const v1::Job& job) {
  if (!job.status().allocation().node().empty()) return job.status().allocation().node();
  const auto& attempts = job.status().attempts();
  if (!attempts.empty() && !attempts.rbegin()->nodes().empty()) return attempts.rbegin()->nodes(0);
  static const std::string kNone;
  return kNone;
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

Result<v1::ArraySpec> ParseArraySpec(std::string_view text) {
  DROVER_ASSIGN_OR_RETURN(ArrayRange r, ParseArrayRange(text));
  v1::ArraySpec a;
  a.set_first(r.first);
  a.set_last(r.last);
  a.set_step(r.step);
  a.set_max_running(r.max_running);
  return a;
}

Result<v1::JobState> ParseJobState(std::string_view text) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!upper.starts_with("JOB_STATE_")) upper = "JOB_STATE_" + upper;
  v1::JobState state;
  if (upper == "JOB_STATE_UNSPECIFIED" || !v1::JobState_Parse(upper, &state)) {
    return InvalidArgument(
        fmt::format("job state '{}' is unknown (use pending, bound, running, succeeded, failed, cancelling, cancelled, "
                    "preempting)",
                    text));
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
