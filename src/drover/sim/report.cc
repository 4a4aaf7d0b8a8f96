#include "drover/sim/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

extern char** environ;

namespace drover::sim {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

double R(double x, double scale = 1e4) { return std::round(x * scale) / scale; }

ordered_json Dist(const Distribution& d) {
  return {{"count", d.count}, {"mean", R(d.mean)}, {"p50", R(d.p50)},
          {"p95", R(d.p95)},  {"p99", R(d.p99)},   {"max", R(d.max)}};
}

std::string Hours(double seconds) {
  if (seconds < 120) return fmt::format("{:.1f}s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f}m", seconds / 60);
  return fmt::format("{:.2f}h", seconds / 3600);
}

std::string EndName(JobEnd e, const JobRecord& r) {
  switch (e) {
    case JobEnd::kCompleted: return "completed";
    case JobEnd::kRejected: return "rejected";
    case JobEnd::kFailed: return "failed";
    case JobEnd::kNone: break;
  }
  return r.first_start_ms >= 0 && r.end_ms < 0 ? "started" : "waiting";
}

}  // namespace

std::string HumanSummary(const RunInfo& info, const RunResult& run) {
  const Summary& s = run.summary;
  std::string out =
      fmt::format("drover sim: cluster {} ({} nodes, {} GPUs), workload {} ({} jobs), mode {}, seed {}\n", info.cluster,
                  info.nodes, info.gpus, info.workload, s.jobs, ModeName(s.mode), info.options.seed);
  out += fmt::format("policy: {}\n", PolicyString(info.options.config));
  if (s.mode == Mode::kPacking) {
    out += fmt::format("jobs: {} arrived ({:.1f}% of cluster GPUs), {} failed to bind ({:.1f}% of cluster GPUs)\n",
                       s.arrived, s.arrived_demand_pct, s.failed, s.failed_demand_pct);
    auto at100 = s.allocation_by_demand.find(100);
    out +=
        fmt::format("GPU allocation: {} at 100% arrived demand, {:.2f}% at the end; fragmentation {:.2f}% at the end\n",
                    at100 == s.allocation_by_demand.end() ? std::string("n/a") : fmt::format("{:.2f}%", at100->second),
                    s.allocation_final_pct, s.fragmentation_final_pct);
  } else {
    out +=
        fmt::format("jobs: {} arrived, {} completed, {} rejected (never fit), {} waiting and {} running at the end\n",
                    s.arrived, s.completed, s.rejected, s.pending_at_end, s.running_at_end);
    out += fmt::format("JCT: mean {}, p50 {}, p95 {}, p99 {}; queueing delay: mean {}, p50 {}, p99 {}; makespan {}\n",
                       Hours(s.jct_s.mean), Hours(s.jct_s.p50), Hours(s.jct_s.p95), Hours(s.jct_s.p99),
                       Hours(s.queue_delay_s.mean), Hours(s.queue_delay_s.p50), Hours(s.queue_delay_s.p99),
                       Hours(s.makespan_s));
    out += fmt::format(
        "GPU allocation: mean {:.2f}%, peak {:.2f}%; fragmentation mean {:.2f}%; preemptions {} ({} jobs)\n",
        s.allocation_mean_pct, s.allocation_peak_pct, s.fragmentation_mean_pct, s.preemptions, s.preempted_jobs);
    out += fmt::format(
        "fairness: Jain's index {:.3f} over {} tenants (share / entitlement)\n", s.jain_index,
        std::count_if(s.tenants.begin(), s.tenants.end(), [](const TenantSummary& t) { return t.jobs > 0; }));
  }
  out += fmt::format(
      "scheduler: {} passes, decision p50 {:.1f}us p99 {:.1f}us max {:.1f}us; {} events in {:.2f}s wall ({:.0f}/s)\n",
      s.passes, s.decision_us.p50, s.decision_us.p99, s.decision_us.max, s.events, s.wall_s, s.events_per_s);
  return out;
}

std::string SummaryJson(const RunInfo& info, const RunResult& run) {
  const Summary& s = run.summary;
  const EngineOptions& o = info.options;
  ordered_json j;
  j["command"] = info.command;
  j["seed"] = o.seed;
  j["mode"] = std::string(ModeName(s.mode));
  j["policy"] = PolicyString(o.config);
  j["inflate"] = o.inflate;
  j["stop_delay_ms"] = o.stop_delay_ms;
  j["resume"] = o.resume;
  j["all_preemptible"] = o.all_preemptible;
  j["tick_ms"] = o.tick_ms;
  j["cluster"] = {{"name", info.cluster}, {"spec", info.cluster_spec}, {"nodes", info.nodes}, {"gpus", info.gpus}};
  j["workload"] = {{"name", info.workload}, {"spec", info.workload_spec}, {"jobs", s.jobs}};
  j["jobs"] = {
      {"arrived", s.arrived},         {"completed", s.completed},           {"rejected", s.rejected},
      {"failed", s.failed},           {"pending_at_end", s.pending_at_end}, {"running_at_end", s.running_at_end},
      {"preemptions", s.preemptions}, {"preempted_jobs", s.preempted_jobs}};
  j["demand"] = {{"arrived_pct", R(s.arrived_demand_pct)}, {"failed_pct", R(s.failed_demand_pct)}};
  j["jct_s"] = Dist(s.jct_s);
  j["queue_delay_s"] = Dist(s.queue_delay_s);
  j["makespan_s"] = R(s.makespan_s);
  j["allocation"] = {{"mean_pct", R(s.allocation_mean_pct)},
                     {"peak_pct", R(s.allocation_peak_pct)},
                     {"final_pct", R(s.allocation_final_pct)}};
  j["fragmentation"] = {{"mean_pct", R(s.fragmentation_mean_pct)}, {"final_pct", R(s.fragmentation_final_pct)}};
  if (s.mode == Mode::kPacking) {
    ordered_json by = ordered_json::object();
    for (const auto& [pct, alloc] : s.allocation_by_demand) by[std::to_string(pct)] = R(alloc);
    j["allocation_by_demand"] = by;
  }
  ordered_json tenants = ordered_json::array();
  for (const TenantSummary& t : s.tenants) {
    tenants.push_back({{"name", t.name},
                       {"weight", t.weight},
                       {"guaranteed_gpus", t.guaranteed_gpus},
                       {"jobs", t.jobs},
                       {"completed", t.completed},
                       {"share_pct", R(t.share_pct)},
                       {"entitlement_pct", R(t.entitlement_pct)}});
  }
  j["tenants"] = tenants;
  j["jain_index"] = R(s.jain_index);
  j["scheduler"] = {{"passes", s.passes},
                    {"events", s.events},
                    {"wall_s", R(s.wall_s)},
                    {"events_per_s", R(s.events_per_s, 1)},
                    {"decision_us", Dist(s.decision_us)}};
  return j.dump(2) + "\n";
}

std::string StableSummary(const Summary& s) {
  std::string out;
  auto line = [&out](std::string_view key, auto v) { out += fmt::format("{} {}\n", key, v); };
  auto pct = [&out](std::string_view key, double v) { out += fmt::format("{} {:.2f}\n", key, v); };
  line("mode", ModeName(s.mode));
  line("jobs", s.jobs);
  line("arrived", s.arrived);
  line("completed", s.completed);
  line("rejected", s.rejected);
  line("failed", s.failed);
  line("pending_at_end", s.pending_at_end);
  line("running_at_end", s.running_at_end);
  line("preemptions", s.preemptions);
  line("passes", s.passes);
  pct("arrived_demand_pct", s.arrived_demand_pct);
  pct("failed_demand_pct", s.failed_demand_pct);
  pct("jct_mean_s", s.jct_s.mean);
  pct("jct_p50_s", s.jct_s.p50);
  pct("jct_p99_s", s.jct_s.p99);
  pct("queue_delay_mean_s", s.queue_delay_s.mean);
  pct("queue_delay_p95_s", s.queue_delay_s.p95);
  pct("makespan_s", s.makespan_s);
  pct("allocation_mean_pct", s.allocation_mean_pct);
  pct("allocation_peak_pct", s.allocation_peak_pct);
  pct("allocation_final_pct", s.allocation_final_pct);
  pct("fragmentation_mean_pct", s.fragmentation_mean_pct);
  pct("fragmentation_final_pct", s.fragmentation_final_pct);
  for (int p : {50, 80, 90, 100, 110, 120, 130}) {
    if (auto it = s.allocation_by_demand.find(p); it != s.allocation_by_demand.end()) {
      pct(fmt::format("allocation_at_demand_{}_pct", p), it->second);
    }
  }
  for (const TenantSummary& t : s.tenants) {
    pct(fmt::format("tenant_{}_share_pct", t.name), t.share_pct);
  }
  out += fmt::format("jain_index {:.4f}\n", s.jain_index);
  return out;
}

std::string TimeseriesCsv(const std::vector<Sample>& samples, Mode mode, size_t max_rows) {
  std::string out = mode == Mode::kPacking ? "arrival" : "time_s";
  out += ",arrived_pct,allocation_pct,fragmentation_pct,pending,running\n";
  auto row = [&](const Sample& x) {
    std::string t =
        mode == Mode::kPacking ? std::to_string(x.t) : fmt::format("{:.3f}", static_cast<double>(x.t) / 1000);
    out += fmt::format("{},{:.4f},{:.4f},{:.4f},{},{}\n", t, x.arrived_pct, x.allocation_pct, x.fragmentation_pct,
                       x.pending, x.running);
  };
  if (samples.size() <= max_rows || max_rows < 2) {
    for (const Sample& x : samples) row(x);
    return out;
  }
  int64_t first = samples.front().t, span = samples.back().t - first;
  size_t i = 0, last_written = SIZE_MAX;
  for (size_t k = 0; k < max_rows - 1; ++k) {
    int64_t grid = first + static_cast<int64_t>(static_cast<double>(span) * static_cast<double>(k) /
                                                static_cast<double>(max_rows - 1));
    while (i + 1 < samples.size() && samples[i + 1].t <= grid) ++i;
    if (i != last_written) row(samples[i]);
    last_written = i;
  }
  if (last_written != samples.size() - 1) row(samples.back());
  return out;
}

std::string JobsCsv(const std::vector<SimJob>& jobs, const std::vector<JobRecord>& records) {
  std::string out = "id,tenant,gpus,submit_s,first_start_s,end_s,jct_s,queue_delay_s,preemptions,end\n";
  auto secs = [](int64_t ms) { return ms < 0 ? std::string() : fmt::format("{:.3f}", static_cast<double>(ms) / 1000); };
  for (size_t i = 0; i < jobs.size() && i < records.size(); ++i) {
    const JobRecord& r = records[i];
    if (!r.arrived) continue;
    const sched::JobRequest& q = jobs[i].req;
    double gpus = q.gpus == 0 ? 0 : static_cast<double>(q.milli()) / sched::kWholeGpu;
    bool done = r.end == JobEnd::kCompleted;
    out += fmt::format("{},{},{:g},{},{},{},{},{},{},{}\n", q.id, q.tenant, gpus, secs(r.submit_ms),
                       secs(r.first_start_ms), secs(r.end_ms), done ? secs(r.end_ms - r.submit_ms) : "",
                       r.first_start_ms >= 0 ? secs(r.first_start_ms - r.submit_ms) : "", r.preemptions,
                       EndName(r.end, r));
  }
  return out;
}

// ---------------------------------------------------------------- the edge --

namespace {

Status WriteFile(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return Internal(fmt::format("cannot write '{}'", p.string()));
  return Status::Ok();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Html(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A path inside single quotes for gnuplot ('' is a quote there).
std::string Quoted(const fs::path& p) {
  std::string out = "'";
  for (char c : p.string()) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// 201 quantiles of JCT and queueing delay, for the CDF chart.
std::string CdfCsv(const RunResult& run) {
  std::vector<double> jct, delay;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const JobRecord& r = run.records[i];
    if (r.end == JobEnd::kCompleted) jct.push_back(static_cast<double>(r.end_ms - r.submit_ms) / 1000);
    if (r.first_start_ms >= 0) delay.push_back(static_cast<double>(r.first_start_ms - r.submit_ms) / 1000);
  }
  std::sort(jct.begin(), jct.end());
  std::sort(delay.begin(), delay.end());
  std::string out = "fraction,jct_s,queue_delay_s\n";
  for (int i = 0; i <= 200; ++i) {
    double f = i / 200.0;
    out += fmt::format("{:.3f},{:.3f},{:.3f}\n", f, Percentile(jct, f * 100), Percentile(delay, f * 100));
  }
  return out;
}

std::string GnuplotScript(const fs::path& dir, Mode mode) {
  std::string ts = Quoted(dir / "timeseries.csv");
  std::string s =
      "set terminal svg size 900,340 dynamic font 'sans,11' background '#ffffff'\n"
      "set datafile separator ','\nset grid\nset key top left\nset yrange [0:*]\n";
  if (mode == Mode::kPacking) {
    s += "set output " + Quoted(dir / "allocation.svg") + "\n";
    s += "set xlabel 'arrived GPU demand (% of cluster GPUs)'\nset ylabel '% of cluster GPUs'\n";
    s += "plot " + ts + " skip 1 using 2:3 with lines lw 2 title 'GPU allocation', " + ts +
         " skip 1 using 2:4 with lines lw 2 title 'fragmentation (FGD)', x with lines dt 2 lc rgb '#888888' title "
         "'arrived demand'\n";
    return s;
  }
  s += "set output " + Quoted(dir / "allocation.svg") + "\n";
  s += "set xlabel 'virtual time (h)'\nset ylabel '% of cluster GPUs'\n";
  s += "plot " + ts + " skip 1 using ($1/3600):3 with steps lw 1.5 title 'GPU allocation', " + ts +
       " skip 1 using ($1/3600):4 with steps lw 1.5 title 'fragmentation (FGD)'\n";
  s += "set output " + Quoted(dir / "queue.svg") + "\nset ylabel 'jobs'\n";
  s += "plot " + ts + " skip 1 using ($1/3600):5 with steps lw 1.5 title 'pending', " + ts +
       " skip 1 using ($1/3600):6 with steps lw 1.5 title 'running'\n";
  std::string cdf = Quoted(dir / "cdf.csv");
  s += "set output " + Quoted(dir / "jct.svg") + "\n";
  s += "set key bottom right\nset logscale x\nset xlabel 'seconds (values below 1 s drawn at 1 s)'\nset ylabel "
       "'fraction of jobs'\n"
       "set yrange [0:1]\n";
  s += "plot " + cdf + " skip 1 using ($2<1?1:$2):1 with lines lw 2 title 'job completion time', " + cdf +
       " skip 1 using ($3<1?1:$3):1 with lines lw 2 title 'queueing delay (first start)'\n";
  return s;
}

// Runs `gnuplot script` with its output in `log`. This is the simulator's
// one child process: plain posix_spawnp (no fork in a process that may have
// threads, no shell), because sim may not depend on the runtime library.
Status RunGnuplot(const std::string& gnuplot, const fs::path& script, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::string script_arg = script.string();
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()), script_arg.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, gnuplot.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return Unavailable(fmt::format("'{}' could not be started ({}); install gnuplot-nox (scripts/install-deps.sh)",
                                   gnuplot, std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return Unavailable(fmt::format("'{}' was not found; install gnuplot-nox (scripts/install-deps.sh)", gnuplot));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(fmt::format("gnuplot failed (status {}); see {}", status, log.string()));
  }
  return Status::Ok();
}

std::string Svg(const fs::path& p) {
  std::string svg = ReadFile(p);
  size_t at = svg.find("<svg");
  return at == std::string::npos ? std::string() : svg.substr(at);
}

std::string Row(std::initializer_list<std::string> cells, bool head = false) {
  std::string out = "<tr>";
  for (const std::string& c : cells) out += (head ? "<th>" : "<td>") + c + (head ? "</th>" : "</td>");
  return out + "</tr>\n";
}

std::string F(double v, int digits = 2) { return fmt::format("{:.{}f}", v, digits); }

std::string DistRow(const std::string& name, const Distribution& d) {
  return Row({name, std::to_string(d.count), Hours(d.mean), Hours(d.p50), Hours(d.p95), Hours(d.p99), Hours(d.max)});
}

std::string HtmlPage(const RunInfo& info, const RunResult& run, const std::vector<std::string>& charts,
                     const std::string& chart_note) {
  const Summary& s = run.summary;
  std::string h =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>drover sim report</title>\n<style>"
      "body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
      "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}code{background:#f3f3f3;padding:1px 3px}"
      ".note{background:#fff6d6;padding:.5em 1em;border:1px solid #e6d48a}</style></head><body>\n";
  h += "<h1>drover sim report</h1>\n<table>\n";
  h += Row({"command", "<code>" + Html(info.command) + "</code>"});
  h += Row({"cluster", Html(info.cluster) + fmt::format(" ({} nodes, {} GPUs)", info.nodes, info.gpus)});
  h += Row({"workload", Html(info.workload) + fmt::format(" ({} jobs)", s.jobs)});
  h += Row({"mode / seed / inflate",
            fmt::format("{} / {} / {}", ModeName(s.mode), info.options.seed, info.options.inflate)});
  h += Row({"policy", "<code>" + Html(PolicyString(info.options.config)) + "</code>"});
  h += "</table>\n<h2>Charts</h2>\n";
  if (!chart_note.empty()) h += "<p class=\"note\">" + Html(chart_note) + "</p>\n";
  for (const std::string& c : charts) h += "<div>" + c + "</div>\n";
  h += "<h2>Jobs</h2>\n<table>\n" + Row({"arrived", "completed", "rejected", "failed", "waiting at end",
                                         "running at end", "preemptions", "preempted jobs"},
                                        true);
  h += Row({std::to_string(s.arrived), std::to_string(s.completed), std::to_string(s.rejected),
            std::to_string(s.failed), std::to_string(s.pending_at_end), std::to_string(s.running_at_end),
            std::to_string(s.preemptions), std::to_string(s.preempted_jobs)});
  h += "</table>\n";
  if (s.mode == Mode::kTime) {
    h += "<table>\n" + Row({"", "jobs", "mean", "p50", "p95", "p99", "max"}, true);
    h += DistRow("job completion time", s.jct_s) + DistRow("queueing delay (to first start)", s.queue_delay_s);
    h += "</table>\n<p>Makespan (first arrival to last completion): " + Hours(s.makespan_s) + "</p>\n";
  }
  h += "<h2>GPUs</h2>\n<table>\n" + Row({"", "mean", "peak", "at the end"}, true);
  h += Row(
      {"allocation, % of GPU milli", F(s.allocation_mean_pct), F(s.allocation_peak_pct), F(s.allocation_final_pct)});
  h += Row({"fragmentation (FGD), % of cluster GPUs", F(s.fragmentation_mean_pct), "", F(s.fragmentation_final_pct)});
  h += "</table>\n";
  if (s.mode == Mode::kPacking) {
    h += fmt::format("<p>Arrived demand {:.1f}% of cluster GPUs; jobs that failed to bind asked for {:.1f}%.</p>\n",
                     s.arrived_demand_pct, s.failed_demand_pct);
    h += "<table>\n" + Row({"arrived demand %", "GPU allocation %"}, true);
    for (const auto& [pct, alloc] : s.allocation_by_demand) {
      if (pct % 10 == 0) h += Row({std::to_string(pct), F(alloc)});
    }
    h += "</table>\n";
  }
  h += "<h2>Tenants</h2>\n<table>\n" +
       Row({"tenant", "weight", "guaranteed GPUs", "jobs", "completed", "share %", "entitlement %"}, true);
  for (const TenantSummary& t : s.tenants) {
    h += Row({Html(t.name), F(t.weight, 1), std::to_string(t.guaranteed_gpus), std::to_string(t.jobs),
              std::to_string(t.completed), F(t.share_pct), F(t.entitlement_pct)});
  }
  h += "</table>\n<p>Jain's fairness index over share / entitlement: " + F(s.jain_index, 3) + "</p>\n";
  h += "<h2>Scheduler</h2>\n<table>\n" +
       Row({"passes", "decision p50 &micro;s", "p99 &micro;s", "max &micro;s", "events", "wall s", "events/s"}, true);
  h += Row({std::to_string(s.passes), F(s.decision_us.p50, 1), F(s.decision_us.p99, 1), F(s.decision_us.max, 1),
            std::to_string(s.events), F(s.wall_s, 3), F(s.events_per_s, 0)});
  h += "</table>\n<p>Definitions: docs/simulator.md. Data: <a href=\"summary.json\">summary.json</a>, "
       "<a href=\"timeseries.csv\">timeseries.csv</a>, <a href=\"jobs.csv\">jobs.csv</a>.</p>\n</body></html>\n";
  return h;
}

}  // namespace

Status WriteReport(const std::string& dir_name, const RunInfo& info, const RunResult& run,
                   const ReportOptions& options) {
  std::error_code ec;
  fs::create_directories(dir_name, ec);
  if (ec) return Internal(fmt::format("cannot create '{}': {}", dir_name, ec.message()));
  fs::path dir = fs::absolute(dir_name, ec);
  if (ec) dir = dir_name;
  Mode mode = run.summary.mode;
  DROVER_RETURN_IF_ERROR(WriteFile(dir / "summary.json", SummaryJson(info, run)));
  DROVER_RETURN_IF_ERROR(WriteFile(dir / "timeseries.csv", TimeseriesCsv(run.samples, mode)));
  DROVER_RETURN_IF_ERROR(WriteFile(dir / "jobs.csv", JobsCsv(run.jobs, run.records)));
  std::vector<std::string> names = {"allocation.svg"};
  if (mode == Mode::kTime) {
    DROVER_RETURN_IF_ERROR(WriteFile(dir / "cdf.csv", CdfCsv(run)));
    names.insert(names.end(), {"queue.svg", "jct.svg"});
  }
  std::vector<std::string> charts;
  std::string note;
  if (options.gnuplot.empty()) {
    note = "Charts were not drawn (no gnuplot given); the data is in timeseries.csv.";
  } else {
    DROVER_RETURN_IF_ERROR(WriteFile(dir / "charts.gp", GnuplotScript(dir, mode)));
    Status drawn = RunGnuplot(options.gnuplot, dir / "charts.gp", dir / "gnuplot.log");
    if (!drawn.ok()) {
      note = "Charts are missing: " + drawn.message() + ". The data is in timeseries.csv.";
    } else {
      for (const std::string& n : names) {
        std::string svg = Svg(dir / n);
        if (!svg.empty()) charts.push_back(std::move(svg));
      }
    }
  }
  return WriteFile(dir / "report.html", HtmlPage(info, run, charts, note));
}

}  // namespace drover::sim
