// drover: the command users run. `drover submit` and `drover jobs` run
// here, over REST (drover/cli/fast_verbs.h); everything else, and what this
// program cannot do (no HTTP address known, --help, a flag error), is handed
// to drover-core in the same directory with exec: same pid, same arguments.
//
// Deliberately thin: a small static program starts in about a millisecond,
// drover-core in 30 (docs/performance.md).

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "drover/cli/fast_verbs.h"

int main(int argc, char** argv) {
  const std::string_view verb = argc > 1 ? argv[1] : "";
  if (verb == "submit") {
    if (auto code = drover::cli::FastSubmit(argc, argv)) return *code;
  } else if (verb == "jobs") {
    if (auto code = drover::cli::FastJobs(argc, argv)) return *code;
  }
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string core = "drover-core";
  if (n > 0) {
    std::string path(self, static_cast<size_t>(n));
    core = path.substr(0, path.rfind('/') + 1) + core;
  }
  ::execv(core.c_str(), argv);
  std::fprintf(stderr, "drover: cannot run %s: %s\n", core.c_str(), std::strerror(errno));
  return 127;
}
