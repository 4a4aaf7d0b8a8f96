#pragma once
// One frame of `drover top`, as plain text: a pure function of what the
// server said, so tests can check it without a terminal. top.cc adds the
// escapes (alternate screen, colours) around it.
//
// A frame (width and height 0: no limit):
//
//   drover top  127.0.0.1:7070  every 2s
//   nodes 1/2 ready   gpus 3/4 healthy, 1 busy   util 50% mean   jobs 1 running, 2 pending
//
//     GPU  MODEL      UTIL                         MEMORY       TEMP  POWER     JOB       HEALTH
//   sim-1  Ready  1/2 healthy  2 sockets, 2 NUMA, 64 cores
//       0  H100 80GB  [####################] 100%  40GiB/80GiB  61C   350/700W  j-000001  Healthy
//   !   1  H100 80GB  [....................]   0%  -            -     -         -         Unhealthy: xid 79 (...)
//   sim-2  NotReady  2/2 healthy  -
//       0  H100 80GB  [....................]    -  -            -     -         -         Healthy
//
// Nodes sort by name and GPUs by index; '-' is a reading the agent did not
// report (a node that is not ready reports none).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/v1/api.pb.h"

namespace drover::cli {

// What one refresh fetched.
struct TopSnapshot {
  v1::ListNodesResponse nodes;
  // Job counts (JobService.List); absent when that call failed.
  std::optional<int> jobs_running;
  std::optional<int> jobs_pending;
  // Why the latest refresh failed ("" when it did not); the frame keeps
  // showing the previous nodes under it.
  std::string error;
};

struct TopFrameOptions {
  std::string addr;
  int64_t interval_ms = 2000;
  // Say how to quit (a live view, not --once).
  bool interactive = false;
  // Terminal size; 0: no limit. Lines longer than `width` are cut; past
  // `height`, the last line says how many lines did not fit.
  size_t width = 0;
  size_t height = 0;
};

struct TopLine {
  enum class Kind { kTitle, kSummary, kError, kColumns, kNode, kGpu, kUnhealthyGpu, kOther };
  Kind kind = Kind::kOther;
  std::string text;
};

// "[#####.....]" with `cells` cells; all '.' without a reading.
std::string UtilBar(std::optional<double> pct, int cells);

// The frame's lines (for colouring by kind).
std::vector<TopLine> RenderTopLines(const TopSnapshot& s, const TopFrameOptions& o);

// The frame, each line ending in '\n'.
std::string RenderTop(const TopSnapshot& s, const TopFrameOptions& o);

}  // namespace drover::cli
