#pragma once
// The client verbs of the `drover` CLI, over gRPC: submit, jobs, job,
// cancel, logs, version (commands.cc); nodes, gpus, drain, undrain, fault
// (node_commands.cc); top, a live full-screen view (top.cc). Exit codes are
// in flags.h. `drover submit` usually runs in the small front program
// instead (fast_verbs.h), over REST, with the same flags and output.

#include <CLI/CLI.hpp>

#include "drover/cli/flags.h"

namespace drover::cli {

// Adds the verbs to `app`; the one that runs stores its exit code in *exit_code.
void AddClientCommands(CLI::App& app, int* exit_code);

}  // namespace drover::cli
