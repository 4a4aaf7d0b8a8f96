#include "drover/cli/submit_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <string_view>

#include "drover/common/config.h"
#include "drover/common/image_ref.h"
#include "drover/common/quantity.h"

namespace drover::cli {

void AddContainerFlags(CLI::App* cmd, ContainerArgs* a) {
  cmd->add_option("--image", a->image,
                  "run in this OCI image (busybox, vllm/vllm-openai:v0.6.3, host:5000/repo@sha256:...); without a "
                  "command the image's own runs");
  cmd->add_option("--pull", a->pull,
                  "with --image: if-not-present (the default: a node that holds it runs it) or always (resolve the "
                  "tag again at every start)");
  cmd->add_option("--network", a->network,
                  "with --image: host (the default: the node's network, as NCCL and RDMA need) or none (loopback "
                  "only)");
  cmd->add_option("--shm-size", a->shm_size,
                  "with --image: size of /dev/shm, e.g. 16g (default: half of --memory, else 1GiB)");
  cmd->add_option("--disk", a->disk,
                  "with --image: the most the container may write outside its mounts, e.g. 20g (its writable "
                  "layer; over it the job is stopped; default: the node's --container-disk-limit)");
  cmd->add_option("--mount", a->mounts,
                  "with --image: SRC:DST[:ro], a node directory under one of the tenant's mount roots, repeatable");
}

Result<nlohmann::json> ParseMountSpec(const std::string& spec) {
  // Paths hold no ':' here (the split would be ambiguous); the server
  // checks the rest (normal paths, the reserved targets, the roots).
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(spec.substr(start, colon - start));
  }
  parts.push_back(spec.substr(start));
  bool read_only = false;
  if (parts.size() == 3 && (parts[2] == "ro" || parts[2] == "rw")) {
    read_only = parts[2] == "ro";
    parts.pop_back();
  }
  if (parts.size() != 2) {
    return InvalidArgument(
        fmt::format("--mount '{}' is not SRC:DST[:ro] (a node directory, where it appears in "
                    "the container, and ro for read-only)",
                    spec));
  }
  for (const std::string& p : parts) {
    if (p.empty() || p.front() != '/') {
      return InvalidArgument(fmt::format("--mount '{}': '{}' is not an absolute path", spec, p));
    }
  }
  return nlohmann::json{{"source", parts[0]}, {"target", parts[1]}, {"read_only", read_only}};
}

namespace {

// docker's --shm-size (and --disk here) reads "16g" as 16 GiB (k, m, g, t: powers of 1024);
// everything else as ParseBytes does ("16GiB", "512MB").
Result<int64_t> ParseShmSize(const std::string& text) {
  if (text.size() >= 2 && std::string_view("kmgt").find(text.back()) != std::string_view::npos &&
      std::isdigit(static_cast<unsigned char>(text[text.size() - 2]))) {
    std::string binary = text.substr(0, text.size() - 1);
    binary += static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    return ParseBytes(binary + "i");
  }
  return ParseBytes(text);
}

}  // namespace

Result<nlohmann::json> ContainerJson(const ContainerArgs& a) {
  if (a.image.empty()) {
    if (!a.pull.empty() || !a.network.empty() || !a.shm_size.empty() || !a.disk.empty() || !a.mounts.empty()) {
      return InvalidArgument("--pull, --network, --shm-size, --disk and --mount go with --image");
    }
    return nlohmann::json();
  }
  if (auto ref = ParseImageRef(a.image); !ref.ok()) return InvalidArgument("--image: " + ref.status().message());
  if (!a.pull.empty() && a.pull != "if-not-present" && a.pull != "always") {
    return InvalidArgument(fmt::format("--pull '{}' is unknown (use if-not-present or always)", a.pull));
  }
  if (!a.network.empty() && a.network != "host" && a.network != "none") {
    return InvalidArgument(fmt::format("--network '{}' is unknown (use host or none)", a.network));
  }
  nlohmann::json c = {{"image", a.image}, {"pull_policy", a.pull}, {"network", a.network}};
  if (!a.shm_size.empty()) {
    auto bytes = ParseShmSize(a.shm_size);
    if (!bytes.ok()) return InvalidArgument("--shm-size: " + bytes.status().message());
    c["shm_bytes"] = *bytes;
  }
  if (!a.disk.empty()) {
    auto bytes = ParseShmSize(a.disk);
    if (!bytes.ok() || *bytes <= 0) {
      return InvalidArgument("--disk: " + (bytes.ok() ? std::string("must be more than 0") : bytes.status().message()));
    }
    c["disk_bytes"] = *bytes;
  }
  nlohmann::json mounts = nlohmann::json::array();
  for (const std::string& m : a.mounts) {
    DROVER_ASSIGN_OR_RETURN(nlohmann::json mount, ParseMountSpec(m));
    mounts.push_back(std::move(mount));
  }
  c["mounts"] = std::move(mounts);
  return c;
}

Result<int64_t> ParseTimeLimit(const std::string& text) {
  // Plain seconds ("3600") or a duration ("4h", "1h30m", "90s").
  const bool digits = !text.empty() && text.size() <= 12 &&
                      std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  int64_t seconds = 0;
  if (digits) {
    seconds = std::stoll(text);
  } else {
    auto ms = ParseDurationMs(text);
    if (!ms.ok()) return InvalidArgument("--time-limit: " + ms.status().message());
    seconds = (*ms + 999) / 1000;
  }
  if (seconds <= 0) return InvalidArgument(fmt::format("--time-limit '{}' must be at least 1s", text));
  return seconds;
}

Result<nlohmann::json> ParseAfter(const std::string& text) {
  size_t colon = text.rfind(':');
  std::string id = colon == std::string::npos ? text : text.substr(0, colon);
  std::string condition = colon == std::string::npos ? "ok" : text.substr(colon + 1);
  if (id.empty() || (condition != "ok" && condition != "any")) {
    return InvalidArgument(fmt::format("--after '{}' is not JOB, JOB:ok or JOB:any", text));
  }
  return nlohmann::json{{"job_id", id}, {"condition", condition}};
}

void AddSubmitFlags(CLI::App* submit, SubmitArgs* a) {
  submit->add_option("--name", a->name, "job name");
  submit->add_option("--tenant", a->tenant, "tenant to charge (default: the token's; only an admin may name another)");
  submit->add_option("--priority", a->priority, "0..1000: higher runs first and may preempt --preemptible jobs");
  submit->add_option("--gpus", a->gpus, "GPUs per replica on one node (2), or a share of one GPU (0.25 or 250m)")
      ->capture_default_str();
  submit->add_option("--gpu-memory", a->gpu_memory,
                     "minimum memory per GPU, e.g. 40GiB; with a share, the memory reserved on the GPU");
  submit->add_option("--cpus,--cpu", a->cpus, "CPUs per replica (2, 0.5 or 500m): placed by, and its cgroup's cpu.max");
  submit->add_option("--memory", a->memory, "host memory per replica (16GiB): placed by, and its cgroup's memory.max");
  submit->add_option("--replicas", a->replicas, "gang size: replicas x --gpus, placed all or nothing");
  submit->add_option("--selector", a->selector, "node label NAME=VALUE the node must have, repeatable");
  submit->add_option("--topology", a->topology, "best-effort, island (one NVLink island), numa, switch or rack");
  submit->add_option("--estimate", a->estimate, "expected runtime, e.g. 90m or 2h (sjf queue, backfill)");
  submit->add_option("--time-limit", a->time_limit,
                     "the longest it may run, e.g. 4h, 30m, 90s or plain seconds; then it is stopped and ends FAILED");
  submit->add_option("--after", a->after,
                     "JOB[:ok|:any]: wait until JOB ended (ok, the default: succeeded; any: whatever its end); "
                     "repeatable. A job whose ok-dependency fails ends FAILED without running");
  submit->add_flag("--preemptible", a->preemptible, "may be stopped and queued again for more important work");
  submit->add_option("--grace", a->grace, "seconds between SIGTERM and SIGKILL when stopped (default 10)");
  submit->add_option("--restart-policy", a->restart_policy,
                     "when its GPU or node fails: never (end FAILED, the default) or on-failure (queue it again)");
  submit->add_option("--max-restarts", a->max_restarts, "with --restart-policy on-failure: at most N restarts (3)");
  submit->add_option("--checkpoint-signal", a->checkpoint_signal,
                     "sent before a preemption or drain stops the job, so it can save to $DROVER_CHECKPOINT_DIR "
                     "(default SIGUSR1; none)");
  submit->add_option("--checkpoint-grace", a->checkpoint_grace,
                     "seconds from the checkpoint signal to SIGTERM (default 10)");
  submit->add_option("--gpu-model", a->gpu_model, "exact GPU model, e.g. 'H100 80GB'");
  submit->add_option("--gpu-vendor", a->gpu_vendor, "nvidia, amd, intel or opencl");
  submit->add_option("--workdir", a->workdir, "absolute working directory on the node");
  submit->add_option("-e,--env", a->env, "NAME=VALUE, repeatable");
  submit->add_flag("--wait", a->wait,
                   "wait for the job and exit with its exit code (an array: until every task ended, the highest code)");
  submit->add_flag("--follow", a->follow,
                   "stream the job's output while it runs (a gang's replicas each line prefixed 'N: '), then exit "
                   "with its exit code, as srun and docker run do; the job's id goes to stderr (`drover run` is "
                   "submit --follow)");
  submit->add_option("--array", a->array,
                     "a job array: one task per index, FIRST-LAST[:STEP][%MAX] (1-1000%50: at most 50 at once); "
                     "each task sees its index in DROVER_ARRAY_INDEX");
  AddContainerFlags(submit, &a->container);
  submit->add_option("command", a->command, "the command and its arguments (optional with --image)");
  submit->positionals_at_end();
}

Result<nlohmann::json> SubmitRequestJson(const SubmitArgs& a) {
  nlohmann::json s = {{"name", a.name}, {"tenant", a.tenant}, {"priority", a.priority}};
  // Whole GPUs stay whole ("2"); a fraction below one ("0.25", "250m") is a
  // share of one GPU in thousandths.
  auto milli = ParseMilliGpu(a.gpus);
  if (!milli.ok()) return InvalidArgument("--gpus: " + milli.status().message());
  int64_t gpu_milli = 0;
  if (*milli % kMilliGpuPerGpu == 0) {
    s["gpus"] = std::min<int64_t>(*milli / kMilliGpuPerGpu, INT32_MAX);
  } else if (*milli < kMilliGpuPerGpu) {
    s["gpus"] = 1;
    gpu_milli = *milli;
    s["gpu_milli"] = gpu_milli;
  } else {
    return InvalidArgument(fmt::format("--gpus {}: ask for whole GPUs or a share of one GPU (below 1)", a.gpus));
  }
  auto mem = ParseBytes(a.gpu_memory);
  if (!mem.ok()) return InvalidArgument("--gpu-memory: " + mem.status().message());
  if (gpu_milli > 0 && *mem == 0) {
    return InvalidArgument(
        fmt::format("--gpus {} shares a GPU: also give --gpu-memory, the memory to reserve on it", a.gpus));
  }
  s["gpu_memory_bytes"] = *mem;
  // CPUs like GPUs: "2", "0.5" or "500m" (thousandths).
  auto cpus = ParseMilliGpu(a.cpus);
  if (!cpus.ok()) return InvalidArgument(fmt::format("--cpus '{}' is not a number of CPUs (2, 0.5 or 500m)", a.cpus));
  s["cpu_millis"] = *cpus;
  auto host_mem = ParseBytes(a.memory);
  if (!host_mem.ok()) return InvalidArgument("--memory: " + host_mem.status().message());
  s["memory_bytes"] = *host_mem;
  s["replicas"] = a.replicas;
  nlohmann::json selector = nlohmann::json::object();
  for (const std::string& kv : a.selector) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return InvalidArgument("--selector '" + kv + "' is not NAME=VALUE");
    selector[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  s["node_selector"] = std::move(selector);
  s["topology"] = a.topology;
  if (!a.estimate.empty()) {
    auto ms = ParseDurationMs(a.estimate);
    if (!ms.ok()) return InvalidArgument("--estimate: " + ms.status().message());
    s["runtime_estimate_seconds"] = (*ms + 999) / 1000;
  }
  if (!a.time_limit.empty()) {
    DROVER_ASSIGN_OR_RETURN(int64_t seconds, ParseTimeLimit(a.time_limit));
    s["time_limit_seconds"] = seconds;
  }
  nlohmann::json after = nlohmann::json::array();
  for (const std::string& dep : a.after) {
    DROVER_ASSIGN_OR_RETURN(nlohmann::json d, ParseAfter(dep));
    after.push_back(std::move(d));
  }
  s["after"] = std::move(after);
  s["preemptible"] = a.preemptible;
  s["termination_grace_seconds"] = a.grace;
  // The server checks the policy's name and the bound on restarts.
  s["restart_policy"] = a.restart_policy;
  s["checkpoint_signal"] = a.checkpoint_signal;
  s["checkpoint_grace_seconds"] = a.checkpoint_grace;
  s["max_restarts"] = a.max_restarts;
  s["gpu_model"] = a.gpu_model;
  s["gpu_vendor"] = a.gpu_vendor;
  s["working_dir"] = a.workdir;
  nlohmann::json env = nlohmann::json::object();
  for (const std::string& kv : a.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument("--env '" + kv + "' is not NAME=VALUE");
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  s["env"] = std::move(env);
  DROVER_ASSIGN_OR_RETURN(nlohmann::json container, ContainerJson(a.container));
  if (a.command.empty() && container.is_null()) {
    return InvalidArgument("a command is required: drover submit [flags] -- CMD ARGS... (or --image, whose own runs)");
  }
  if (!container.is_null()) s["container"] = std::move(container);
  s["command"] = a.command;
  nlohmann::json req = {{"spec", std::move(s)}};
  if (!a.array.empty()) {
    auto array = ParseArrayRange(a.array);
    if (!array.ok()) return InvalidArgument("--array: " + array.status().message());
    req["array"] = {
        {"first", array->first}, {"last", array->last}, {"step", array->step}, {"max_running", array->max_running}};
  }
  return req;
}

}  // namespace drover::cli
