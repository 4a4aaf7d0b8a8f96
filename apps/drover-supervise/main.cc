// drover-supervise: the per-job supervisor as a small static program (see
// drover/agent/supervisor.h). The agent runs it as it runs `drover
// supervise`, with the same arguments: `drover-supervise supervise --dir D`
// (SupervisorAlive recognises a supervisor by that argv); `--dir D` alone
// works too, for a person trying it by hand. `supervise --spare` is a
// SupervisorPool's spare: it waits for its job directory on stdin.
//
// Deliberately thin: no flag library, no logging set-up, nothing that runs
// before RunSupervisor.

#include <cstdio>
#include <string>
#include <string_view>

#include "drover/agent/supervisor.h"

int main(int argc, char** argv) {
  int first = 1;
  if (argc > first && std::string_view(argv[first]) == "supervise") ++first;
  if (argc - first == 2 && std::string_view(argv[first]) == "--dir") {
    return drover::agent::RunSupervisor(argv[first + 1]);
  }
  if (argc - first == 1 && std::string_view(argv[first]) == "--spare") return drover::agent::RunSpareSupervisor();
  std::fputs("usage: drover-supervise [supervise] --dir JOB_DIR | [supervise] --spare\n", stderr);
  return 2;
}
