#pragma once
// `drover submit`'s flags and the request they make, shared by the gRPC
// verb (commands.cc) and the small front program (fast_verbs.h), so that
// both accept the same flags and send the same job.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::cli {

// --image and the flags that go with it (submit and deploy): the job runs
// in an OCI container (docs/containers.md).
struct ContainerArgs {
  std::string image;                // a reference: busybox, vllm/vllm-openai:v0.6.3, 127.0.0.1:5000/tiny@sha256:...
  std::string pull;                 // if-not-present (default) or always
  std::string network;              // host (default) or none
  std::string shm_size;             // /dev/shm, e.g. 16g
  std::string disk;                 // the writable layer's limit, e.g. 20g
  std::vector<std::string> mounts;  // SRC:DST[:ro|:rw], repeatable
};

// Adds --image, --pull, --network, --shm-size, --disk and --mount to `cmd`.
void AddContainerFlags(CLI::App* cmd, ContainerArgs* a);
// The v1.ContainerSpec the flags ask for as proto3 JSON; null when --image
// is not given. kInvalidArgument, with the message to print, for a
// reference that does not parse, a flag without --image, or a --mount
// that is not SRC:DST[:ro] with absolute paths.
Result<nlohmann::json> ContainerJson(const ContainerArgs& a);
// "/data/set:/data:ro" -> {"source": "/data/set", "target": "/data", "read_only": true}.
Result<nlohmann::json> ParseMountSpec(const std::string& spec);

struct SubmitArgs {
  std::string name, tenant, gpu_memory = "0", gpu_model, gpu_vendor, workdir;
  std::string gpus = "1";
  std::string cpus = "0", memory = "0";  // host resources per replica
  int priority = 0;
  int replicas = 1;
  std::vector<std::string> selector;
  std::string topology;
  std::string estimate;
  std::string time_limit;          // "4h", "30m", "90s" or plain seconds
  std::vector<std::string> after;  // JOB[:ok|:any], repeatable
  bool preemptible = false;
  int grace = 0;
  std::string restart_policy;
  std::string checkpoint_signal;
  int checkpoint_grace = 0;
  int max_restarts = 0;
  bool wait = false;
  bool follow = false;  // --follow, `drover run`: the output streamed, then the job's exit code
  std::string array;  // "1-100%10"
  std::vector<std::string> env;
  ContainerArgs container;
  std::vector<std::string> command;  // optional with --image: the image's command runs
};

// --time-limit: "4h", "30m", "90s" or plain seconds -> seconds (> 0).
Result<int64_t> ParseTimeLimit(const std::string& text);
// --after: "j-000003", "j-000003:ok" or "j-000003:any" -> a v1.JobDependency
// as proto3 JSON; the server checks that the job exists.
Result<nlohmann::json> ParseAfter(const std::string& text);

// Adds every flag of `submit` but the common ones (flags.h AddCommon).
void AddSubmitFlags(CLI::App* submit, SubmitArgs* a);

// The v1.SubmitJobRequest the flags ask for, as proto3 JSON (the body of
// POST /api/v1/jobs); kInvalidArgument with the message to print for a
// flag that does not parse. The server checks the rest (quota, policy
// names, bounds).
Result<nlohmann::json> SubmitRequestJson(const SubmitArgs& a);

}  // namespace drover::cli
