#pragma once
// What `drover sim` writes: a short human summary for the terminal, and with
// --out DIR a directory of
//   summary.json     every metric, the command, seed, policy, cluster, workload
//   timeseries.csv   allocation, fragmentation, pending and running over time
//   jobs.csv         one row per job: submit, first start, end, preemptions
//   report.html      tables and charts (SVG drawn by gnuplot, embedded)
//
// Everything but WriteReport is a pure function of the run. WriteReport is
// the simulator's one edge: it writes files and runs gnuplot as a child
// process (posix_spawnp, see report.cc). The simulator may not use the
// runtime library (layers), and this is the only process it ever starts.

#include <cstdint>
#include <string>
#include <vector>

#include "drover/common/status.h"
#include "drover/sim/engine.h"

namespace drover::sim {

// What was run, for the record.
struct RunInfo {
  std::string command;  // the command line as given
  std::string cluster;  // names from the loaders
  std::string workload;
  std::string cluster_spec;
  std::string workload_spec;
  int64_t nodes = 0;
  int64_t gpus = 0;
  EngineOptions options;
};

// A few lines for stdout.
std::string HumanSummary(const RunInfo& info, const RunResult& run);
// summary.json, pretty-printed.
std::string SummaryJson(const RunInfo& info, const RunResult& run);
// The fields of a Summary that do not depend on the machine (no wall clock),
// one "key value" per line with fixed precision: what the golden tests compare.
std::string StableSummary(const Summary& s);
// At most `max_rows` samples on an even grid of t (the last sample at or
// before each grid point), plus the last sample; all of them when fewer.
std::string TimeseriesCsv(const std::vector<Sample>& samples, Mode mode, size_t max_rows = 4000);
std::string JobsCsv(const std::vector<SimJob>& jobs, const std::vector<JobRecord>& records);

struct ReportOptions {
  // The gnuplot to run; empty: draw no charts (the page says so).
  std::string gnuplot = "gnuplot";
};

// Creates `dir` if needed and writes the files above. Charts are optional:
// without gnuplot, report.html says why and keeps its tables.
Status WriteReport(const std::string& dir, const RunInfo& info, const RunResult& run,
                   const ReportOptions& options = {});

}  // namespace drover::sim
