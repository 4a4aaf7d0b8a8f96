#pragma once
// The environment a job starts with (docs/security.md, "Workload
// isolation"): only what its spec gives it, Drover's variables, and the
// variables of the agent's environment an allow-list names; nothing else of
// the agent's (its tokens, cloud credentials, proxy settings ...).
//
// Pure functions: the agent captures its environment once at start and
// builds each job's environment from it; the supervisor passes the result
// to the job as it is.

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace drover::agent {

// What jobs get from the agent's environment unless configured otherwise:
// the basics every process expects. A name ending in '*' is a prefix.
inline const std::vector<std::string> kDefaultEnvAllowList = {"PATH", "HOME",     "USER", "LOGNAME", "SHELL",
                                                              "LANG", "LANGUAGE", "LC_*", "TZ",      "TMPDIR"};

// The PATH of a job when the agent has none.
inline constexpr std::string_view kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Whether `name` is on `allow` (exact names, or prefixes written "NCCL_*").
bool EnvAllowed(std::string_view name, const std::vector<std::string>& allow);

// "NAME=VALUE" strings (environ) -> a map; entries without '=' are skipped.
std::map<std::string, std::string> EnvMap(const char* const* environ);

// The job's environment: the allow-listed part of `agent_env`, then PATH
// (kDefaultPath when still unset), then the job's own `job_env`, then
// Drover's variables `drover_env` (DROVER_JOB_ID, CUDA_VISIBLE_DEVICES ...):
// each later one wins.
std::map<std::string, std::string> BuildJobEnv(const std::map<std::string, std::string>& agent_env,
                                               const std::vector<std::string>& allow,
                                               const std::map<std::string, std::string>& job_env,
                                               const std::map<std::string, std::string>& drover_env);

}  // namespace drover::agent
