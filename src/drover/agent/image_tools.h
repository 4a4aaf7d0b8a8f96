#pragma once
// The image store's way of running its tools (skopeo): posix_spawn, the
// output kept within bounds, a tick while it runs that may stop it
// (image_store.cc, image_load.cc).

#include <functional>
#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

// What a tool printed and how it ended.
struct ToolResult {
  int status = 0;
  std::string out, err;
};

// Runs `argv` (posix_spawn: safe in this threaded process) with the
// agent's environment and `env` ("K=V", overriding), its output kept up to
// bounds; `tick` is called about every 250 ms while it runs, and when it
// answers a reason, the tool is killed and that is the error.
Result<ToolResult> RunTool(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                           const std::function<std::string()>& tick = nullptr);

// The last line a tool wrote to stderr, trimmed of its log prefix.
std::string LastLine(const std::string& err);

bool Exited0(const ToolResult& r);

}  // namespace drover::agent
