#pragma once
// `drover sim`: replays a cluster trace through the scheduler on a virtual
// clock (docs/simulator.md). Loads the inputs, runs the engine of
// drover/sim, prints a summary and (with --out) writes the report.
// Single-threaded; starts no server.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace drover::app {

struct SimFlags {
  std::string cluster;
  std::string workload;
  std::string mode = "time";
  std::string policy;
  uint64_t seed = 1;
  bool seed_given = false;
  double inflate = 0;
  std::string stop_delay = "0";
  std::string tick = "0";
  std::string out;
  std::string gnuplot = "gnuplot";
  bool check = false;
  bool resume = false;
  bool all_preemptible = false;
};

// `args`: the whole command line, for the report. Returns the exit code.
int RunSim(const SimFlags& f, const std::vector<std::string>& args);
// `args` must outlive the parse.
CLI::App* AddSimCommand(CLI::App& app, SimFlags* f, const std::vector<std::string>* args, int* exit_code);

}  // namespace drover::app
