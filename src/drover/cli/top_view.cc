#include "drover/cli/top_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "drover/cli/node_view.h"
#include "drover/cli/terminal.h"

namespace drover::cli {
namespace {

constexpr int kBarCells = 20;
// An OpenCL device names itself at length ("pthread-skylake-avx512-Intel(R) Xeon(R) ...").
constexpr size_t kModelWidth = 20;

std::optional<double> Utilization(const v1::Gpu& g) {
  const v1::GpuTelemetry& t = g.telemetry();
  if (!t.has_utilization_pct() || !std::isfinite(t.utilization_pct())) return std::nullopt;
  return std::clamp(t.utilization_pct(), 0.0, 100.0);
}

std::string WithUnit(const std::string& cell, const char* unit) { return cell == "-" ? cell : cell + unit; }

// Cuts to `width` bytes without splitting a UTF-8 sequence.
std::string CutToWidth(std::string s, size_t width) {
  if (width == 0 || s.size() <= width) return s;
  size_t end = width;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  s.resize(end);
  return s;
}

std::string Header(const TopSnapshot& s) {
  int ready = 0, healthy = 0, total = 0, busy = 0, with_util = 0;
  double util_sum = 0;
  for (const v1::Node& n : s.nodes.nodes()) {
    ready += n.state() == v1::NODE_STATE_READY ? 1 : 0;
    for (const v1::Gpu& g : n.gpus()) {
      ++total;
      healthy += g.health() == v1::GPU_HEALTH_HEALTHY ? 1 : 0;
      busy += g.job_id().empty() ? 0 : 1;
      if (auto u = Utilization(g)) {
        util_sum += *u;
        ++with_util;
      }
    }
  }
  std::string util = with_util > 0 ? fmt::format("{}%", std::llround(util_sum / with_util)) : "-";
  std::string jobs = s.jobs_running && s.jobs_pending
                         ? fmt::format("{} running, {} pending", *s.jobs_running, *s.jobs_pending)
                         : std::string("-");
  return fmt::format("nodes {}/{} ready   gpus {}/{} healthy, {} busy   util {} mean   jobs {}", ready,
                     s.nodes.nodes_size(), healthy, total, busy, util, jobs);
}

}  // namespace

std::string UtilBar(std::optional<double> pct, int cells) {
  int filled = 0;
  if (pct && std::isfinite(*pct)) {
    filled = static_cast<int>(std::lround(std::clamp(*pct, 0.0, 100.0) / 100.0 * cells));
  }
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(cells - filled), '.') +
         "]";
}

std::vector<TopLine> RenderTopLines(const TopSnapshot& s, const TopFrameOptions& o) {
  using Kind = TopLine::Kind;
  std::vector<TopLine> lines;
  std::string title = fmt::format(
      "drover top  {}  every {}", o.addr,
      o.interval_ms % 1000 == 0 ? fmt::format("{}s", o.interval_ms / 1000) : fmt::format("{}ms", o.interval_ms));
  if (o.interactive) title += "  (q to quit)";
  lines.push_back({Kind::kTitle, title});
  lines.push_back({Kind::kSummary, Header(s)});
  // What the server said (a node name, a reason, an error) is escaped: its
  // control characters would be the terminal's (terminal.h).
  if (!s.error.empty()) lines.push_back({Kind::kError, "error: " + EscapeTerminal(s.error)});
  lines.push_back({Kind::kOther, ""});

  // GPU rows as cells first, so that every node's rows share column widths.
  constexpr size_t kColumns = 8;
  const std::array<std::string, kColumns> headers = {"GPU",  "MODEL", "UTIL", "MEMORY",
                                                     "TEMP", "POWER", "JOB",  "HEALTH"};
  struct Row {
    const v1::Node* node = nullptr;  // set on a node's header line
    bool unhealthy = false;
    std::array<std::string, kColumns> cells;
  };
  std::vector<Row> rows;
  std::array<size_t, kColumns> width{};
  for (size_t c = 0; c < kColumns; ++c) width[c] = headers[c].size();
  for (const v1::Node* n : SortedNodes(s.nodes)) {
    rows.push_back({n, false, {}});
    for (const v1::Gpu* g : SortedGpus(*n)) {
      auto util = Utilization(*g);
      std::string pct = util ? fmt::format("{:>4}", fmt::format("{}%", std::llround(*util))) : "   -";
      Row r{nullptr,
            g->health() == v1::GPU_HEALTH_UNHEALTHY,
            {std::to_string(g->index()), Cut(g->model(), kModelWidth), UtilBar(util, kBarCells) + " " + pct,
             MemUsedText(*g), WithUnit(TempText(*g), "C"), WithUnit(PowerText(*g), "W"),
             g->job_id().empty() ? "-" : g->job_id(), GpuHealthText(*g)}};
      for (std::string& cell : r.cells) cell = EscapeTerminal(cell);
      for (size_t c = 0; c + 1 < kColumns; ++c) width[c] = std::max(width[c], r.cells[c].size());
      rows.push_back(std::move(r));
    }
  }
  auto format_row = [&](const std::string& marker, const std::array<std::string, kColumns>& cells) {
    // The index is right-aligned under "GPU"; the rest left-aligned.
    std::string line = marker + fmt::format("{:>{}}", cells[0], width[0]);
    for (size_t c = 1; c < kColumns; ++c) {
      line += "  " + (c + 1 < kColumns ? fmt::format("{:<{}}", cells[c], width[c]) : cells[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line;
  };
  lines.push_back({Kind::kColumns, format_row("  ", headers)});
  if (rows.empty()) lines.push_back({Kind::kOther, "no nodes"});
  for (const Row& r : rows) {
    if (r.node != nullptr) {
      const v1::Node& n = *r.node;
      std::string state = n.state() == v1::NODE_STATE_READY ? "Ready" : "NotReady";
      if (n.drained()) state += ",Drained";
      std::string line = EscapeTerminal(fmt::format("{}  {}  {}  {}", n.name(), state,
                                                    n.gpus().empty() ? "no GPUs" : GpuHealthSummary(n),
                                                    TopologySummary(n.topology())));
      lines.push_back({Kind::kNode, line});
      continue;
    }
    lines.push_back({r.unhealthy ? Kind::kUnhealthyGpu : Kind::kGpu, format_row(r.unhealthy ? "! " : "  ", r.cells)});
  }

  for (TopLine& l : lines) l.text = CutToWidth(std::move(l.text), o.width);
  if (o.height > 0 && lines.size() > o.height) {
    size_t hidden = lines.size() - o.height + 1;
    lines.resize(o.height - 1);
    lines.push_back({Kind::kOther, CutToWidth(fmt::format("... {} more lines", hidden), o.width)});
  }
  return lines;
}

std::string RenderTop(const TopSnapshot& s, const TopFrameOptions& o) {
  std::string out;
  for (const TopLine& l : RenderTopLines(s, o)) out += l.text + "\n";
  return out;
}

}  // namespace drover::cli
