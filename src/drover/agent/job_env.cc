#include "drover/agent/job_env.h"

namespace drover::agent {

bool EnvAllowed(std::string_view name, const std::vector<std::string>& allow) {
  for (const std::string& a : allow) {
    if (!a.empty() && a.back() == '*') {
      if (name.starts_with(std::string_view(a).substr(0, a.size() - 1))) return true;
    } else if (name == a) {
      return true;
    }
  }
  return false;
}

std::map<std::string, std::string> EnvMap(const char* const* environ) {
  std::map<std::string, std::string> out;
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

std::map<std::string, std::string> BuildJobEnv(const std::map<std::string, std::string>& agent_env,
                                               const std::vector<std::string>& allow,
                                               const std::map<std::string, std::string>& job_env,
                                               const std::map<std::string, std::string>& drover_env) {
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : agent_env) {
    if (EnvAllowed(k, allow)) env[k] = v;
  }
  env.emplace("PATH", std::string(kDefaultPath));
  for (const auto& [k, v] : job_env) env[k] = v;
  for (const auto& [k, v] : drover_env) env[k] = v;
  return env;
}

}  // namespace drover::agent
