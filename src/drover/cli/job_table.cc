#include "drover/cli/job_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <vector>

#include "drover/cli/flags.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/common/config.h"

namespace drover::cli {
namespace {

using Json = nlohmann::ordered_json;

const Json& Field(const Json& j, const char* name) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(name);
  return it == j.end() ? kNull : *it;
}

std::string Str(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  return v.is_string() ? v.get<std::string>() : "";
}

// proto3 JSON writes 64-bit integers as strings and 32-bit ones as numbers.
int64_t Int(const Json& j, const char* name) {
  const Json& v = Field(j, name);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    int64_t out = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec == std::errc() && end == text.data() + text.size()) return out;
  }
  if (!v.is_null()) throw Json::type_error::create(302, fmt::format("\"{}\" is not an integer", name), &j);
  return 0;
}

bool IsTerminal(const std::string& state) {
  return state == "JOB_STATE_SUCCEEDED" || state == "JOB_STATE_FAILED" || state == "JOB_STATE_CANCELLED";
}

std::string JoinInts(const Json& list) {
  std::vector<int64_t> v;
  if (list.is_array()) {
    for (const Json& x : list) v.push_back(x.get<int64_t>());
  }
  return v.empty() ? "<none>" : fmt::format("{}", fmt::join(v, ","));
}

// What a job asks for, short: "2", "0.25", "4x8" (a gang).
std::string GpusOf(const Json& spec) {
  int64_t milli = Int(spec, "gpuMilli");
  if (milli > 0 && milli < 1000) {
    std::string digits = fmt::format("{:03d}", milli);  // 250 -> "250" -> "0.25"
    return "0." + digits.substr(0, digits.find_last_not_of('0') + 1);
  }
  if (Int(spec, "replicas") > 1) return fmt::format("{}x{}", Int(spec, "replicas"), Int(spec, "gpus"));
  return std::to_string(Int(spec, "gpus"));
}

void PrintJobs(const std::vector<const Json*>& jobs, bool wide, int64_t now, std::ostream& out) {
  std::vector<std::string> headers = {"ID", "NAME", "TENANT", "STATE", "GPUS", "NODE", "AGE"};
  if (wide) headers.insert(headers.end(), {"GPU-IDS", "EXIT", "COMMAND", "MESSAGE"});
  Table t(headers);
  for (const Json* j : jobs) {
    const Json& spec = Field(*j, "spec");
    const Json& st = Field(*j, "status");
    const Json& alloc = Field(st, "allocation");
    std::string state = Str(st, "state");
    std::vector<std::string> row = {Str(*j, "id"),
                                    Or(Str(spec, "name")),
                                    Str(spec, "tenant"),
                                    StateDisplay(state),
                                    GpusOf(spec),
                                    Or(Str(alloc, "node")),
                                    Age(Int(st, "submitTimeUnixNanos"), now)};
    if (wide) {
      std::string exit = !IsTerminal(state)       ? "<none>"
                         : Int(st, "signal") != 0 ? fmt::format("signal {}", Int(st, "signal"))
                                                  : std::to_string(Int(st, "exitCode"));
      std::vector<std::string> command;
      if (const Json& c = Field(spec, "command"); c.is_array()) {
        for (const Json& arg : c) command.push_back(arg.get<std::string>());
      }
      // Escaped before they are cut (the table escapes every cell; this
      // keeps an escape from pushing the cell past its width).
      std::string cmd = Cut(EscapeTerminal(fmt::format("{}", fmt::join(command, " "))), 40);
      std::string message = Cut(EscapeTerminal(Str(st, "message")), 80);
      row.insert(row.end(), {JoinInts(Field(alloc, "gpuIndices")), exit, cmd, message});
    }
    t.AddRow(row);
  }
  t.Print(out);
}

// One row per job array (the count of its tasks in each state) in place of
// its tasks; the other jobs go to `single`.
void PrintArrays(const std::vector<const Json*>& jobs, int64_t now, std::vector<const Json*>* single,
                 std::ostream& out) {
  const std::vector<std::string>& names = JobStateNames();
  auto rank = [&](const std::string& state) {
    return std::find(names.begin(), names.end(), state) - names.begin();  // unknown ones last
  };
  struct Group {
    const Json* first = nullptr;
    std::map<std::pair<int64_t, std::string>, int64_t> states;  // by the enum's number
  };
  std::map<std::string, Group> arrays;
  for (const Json* j : jobs) {
    std::string array_id = Str(Field(*j, "array"), "arrayId");
    if (array_id.empty()) {
      single->push_back(j);
      continue;
    }
    Group& g = arrays[array_id];
    if (g.first == nullptr) g.first = j;
    std::string state = Str(Field(*j, "status"), "state");
    ++g.states[{rank(state), state}];
  }
  if (arrays.empty()) return;
  Table t({"ARRAY", "NAME", "TENANT", "TASKS", "GPUS", "STATES", "AGE"});
  for (const auto& [id, g] : arrays) {
    std::vector<std::string> states;
    for (const auto& [state, n] : g.states) states.push_back(fmt::format("{} {}", n, StateDisplay(state.second)));
    const Json& array = Field(*g.first, "array");
    const Json& spec = Field(*g.first, "spec");
    std::string tasks = std::to_string(Int(array, "tasks"));
    if (Int(array, "maxRunning") > 0) tasks += fmt::format(" (%{})", Int(array, "maxRunning"));
    t.AddRow({id, Or(Str(spec, "name")), Str(spec, "tenant"), tasks, GpusOf(spec),
              fmt::format("{}", fmt::join(states, ", ")),
              Age(Int(Field(*g.first, "status"), "submitTimeUnixNanos"), now)});
  }
  t.Print(out);
}

}  // namespace

void AddJobsFlags(CLI::App* jobs, JobsArgs* a) {
  jobs->add_option("--state", a->state, "only jobs in this state (pending, running, succeeded, ...)");
  jobs->add_option("--tenant", a->tenant, "only jobs of this tenant");
  jobs->add_option("--array", a->array, "only the tasks of this job array (a-000042)");
  jobs->add_option("--node", a->node, "only jobs that run, or last ran, on this node");
  jobs->add_option("--ended-within", a->ended_within, "only jobs that ended within this long (90s, 2h, 7d)");
  jobs->add_option("--page-size", a->page_size, "jobs per page (default 500, at most 5000)")
      ->check(CLI::Range(1, 5000));
  jobs->add_option("--page-token", a->page_token, "the page after the one that printed this token");
  jobs->add_flag("--all", a->all, "every page, not only the first");
  jobs->add_flag("--expand", a->expand, "list every task of job arrays instead of one row per array");
}

Result<int64_t> EndedAfter(const JobsArgs& a, int64_t now_nanos) {
  if (a.ended_within.empty()) return int64_t{0};
  auto ms = ParseDurationMs(a.ended_within);
  if (!ms.ok()) return InvalidArgument("--ended-within: " + ms.status().message());
  return now_nanos - *ms * 1'000'000;
}

std::string StateDisplay(std::string name) {
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.starts_with(kPrefix)) name = name.substr(kPrefix.size());
  for (size_t i = 1; i < name.size(); ++i)
    name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  return name.empty() ? "Unknown" : name;
}

const std::vector<std::string>& JobStateNames() {
  static const std::vector<std::string> kNames = {
      "JOB_STATE_UNSPECIFIED", "JOB_STATE_PENDING",   "JOB_STATE_BOUND",
      "JOB_STATE_RUNNING",     "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
      "JOB_STATE_CANCELLING",  "JOB_STATE_CANCELLED", "JOB_STATE_PREEMPTING"};
  return kNames;
}

nlohmann::ordered_json::parser_callback_t JobTableFilter() {
  static const std::set<std::string, std::less<>> kKeys = {
      "jobs",     "nextPageToken", "id",      "spec",  "name",       "tenant", "gpus",       "gpuMilli",
      "replicas", "command",       "status",  "state", "allocation", "node",   "gpuIndices", "submitTimeUnixNanos",
      "exitCode", "signal",        "message", "array", "arrayId",    "tasks",  "maxRunning"};
  return [](int, nlohmann::json::parse_event_t event, Json& parsed) {
    return event != nlohmann::json::parse_event_t::key || kKeys.contains(parsed.get_ref<const std::string&>());
  };
}

void PrintJobList(const Json& list, const JobsArgs& a, bool wide, int64_t now_nanos, std::ostream& out,
                  std::ostream& err) {
  std::vector<const Json*> jobs;
  if (const Json& all = Field(list, "jobs"); all.is_array()) {
    for (const Json& j : all) jobs.push_back(&j);
  } else if (!all.is_null()) {
    throw Json::type_error::create(302, "\"jobs\" is not a list", &list);
  }
  if (jobs.empty()) {
    err << "No jobs found.\n";
    return;
  }
  if (a.expand || !a.array.empty()) {
    PrintJobs(jobs, wide, now_nanos, out);
  } else {
    std::vector<const Json*> single;
    PrintArrays(jobs, now_nanos, &single, out);
    if (!single.empty()) {
      if (single.size() != jobs.size()) out << "\n";
      PrintJobs(single, wide, now_nanos, out);
    }
  }
  if (std::string next = Str(list, "nextPageToken"); !next.empty()) {
    err << fmt::format("More jobs: add --page-token {} for the next page, or --all for every page.\n",
                       EscapeTerminal(next));
  }
}

}  // namespace drover::cli
