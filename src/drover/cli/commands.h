#pragma once
// The client verbs of the `drover` CLI, over gRPC: submit, jobs, job,
// cancel, logs, version (commands.cc); nodes, gpus, drain, undrain, fault
// (node_commands.cc); top, a live full-screen view (top.cc).
//
// Exit codes: 0 success; 1 the request failed; 2 bad usage or a request the
// server rejected as invalid (or a failed precondition, such as a fault
// for a GPU that is not simulated); 3 not found; 4 the server cannot be
// reached.
// `submit --wait` exits with the job's exit code (128+N when killed by
// signal N).

#include <CLI/CLI.hpp>

namespace drover::cli {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitUnavailable = 4;

// Adds the verbs to `app`; the one that runs stores its exit code in *exit_code.
void AddClientCommands(CLI::App& app, int* exit_code);

}  // namespace drover::cli
