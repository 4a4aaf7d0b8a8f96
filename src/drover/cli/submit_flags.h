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

struct SubmitArgs {
  std::string name, tenant, gpu_memory = "0", gpu_model, gpu_vendor, workdir;
  std::string gpus = "1";
  std::string cpus = "0", memory = "0";  // host resources per replica
  int priority = 0;
  int replicas = 1;
  std::vector<std::string> selector;
  std::string topology;
  std::string estimate;
  bool preemptible = false;
  int grace = 0;
  std::string restart_policy;
  std::string checkpoint_signal;
  int checkpoint_grace = 0;
  int max_restarts = 0;
  bool wait = false;
  std::string array;  // "1-100%10"
  std::vector<std::string> env;
  std::vector<std::string> command;
};

// Adds every flag of `submit` but the common ones (flags.h AddCommon).
void AddSubmitFlags(CLI::App* submit, SubmitArgs* a);

// The v1.SubmitJobRequest the flags ask for, as proto3 JSON (the body of
// POST /api/v1/jobs); kInvalidArgument with the message to print for a
// flag that does not parse. The server checks the rest (quota, policy
// names, bounds).
Result<nlohmann::json> SubmitRequestJson(const SubmitArgs& a);

}  // namespace drover::cli
