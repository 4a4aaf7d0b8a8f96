#include "role_common.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <iostream>

#include "drover/cli/commands.h"

namespace drover::app {

int Fatal(const Status& s) {
  spdlog::critical("{}", s.ToString());
  return 1;
}

int BadConfig(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return cli::kExitUsage;
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "drover";
}

}  // namespace drover::app
