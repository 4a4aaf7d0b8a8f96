// Scenario tests: short, readable scripts of cluster events run against the
// Scheduler and compared with a checked-in transcript (habit 9; the idea is
// flux-sched's t/data and etcd raft's testdata).
//
// Every tests/testdata/sched/NAME.scenario is one test. The runner echoes
// each line of the file into a transcript and writes the scheduler's answers,
// indented by two spaces, under the command that produced them; the
// transcript must equal NAME.out. To accept new behaviour:
//
//   DROVER_REWRITE=1 build/src/drover/sched/sched_scenario_test
//
// rewrites every .out from the scheduler as it is now. Read the diff before
// checking it in: the .out files are the scheduler's specification by
// example. The line format is documented in tests/testdata/sched/README.md.
//
// CheckInvariants runs after every command; a broken invariant, or a line
// the parser does not understand, fails the test with file:line.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"

#ifndef DROVER_TESTDATA_DIR
#error "DROVER_TESTDATA_DIR must name tests/testdata/sched (set in CMakeLists.txt)"
#endif

namespace drover::sched {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- lexing --

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Splits a command line into words. Double quotes group words ("H100 80GB")
// and are dropped; a '#' outside quotes at the start of a word starts a
// comment that runs to the end of the line.
Result<std::vector<std::string>> Tokenize(std::string_view line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  bool quoted = false;
  for (char c : line) {
    if (quoted) {
      if (c == '"') {
        quoted = false;
      } else {
        word += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quoted) return InvalidArgument("unterminated quote");
  if (in_word) words.push_back(word);
  return words;
}

// The words after the verb: positional ones, then key=value pairs and bare
// flags. Handlers take what they understand; Done() rejects the rest, so a
// typo is an error rather than a silently ignored setting.
class Args {
 public:
  Args(const std::vector<std::string>& words, size_t first) {
    for (size_t i = first; i < words.size(); ++i) {
      size_t eq = words[i].find('=');
      if (eq == std::string::npos && pairs_.empty() && flags_.empty() && !LooksLikeFlag(words[i])) {
        positional_.push_back(words[i]);
      } else if (eq == std::string::npos) {
        flags_.push_back(words[i]);
      } else {
        pairs_.emplace_back(words[i].substr(0, eq), words[i].substr(eq + 1));
      }
    }
  }

  Result<std::string> Positional(size_t i, std::string_view what) const {
    if (i >= positional_.size()) return InvalidArgument(fmt::format("missing {}", what));
    return positional_[i];
  }
  std::optional<std::string> Take(std::string_view key) {
    for (auto it = pairs_.begin(); it != pairs_.end(); ++it) {
      if (it->first == key) {
        std::string v = it->second;
        pairs_.erase(it);
        return v;
      }
    }
    return std::nullopt;
  }
  std::vector<std::string> TakeAll(std::string_view key) {
    std::vector<std::string> out;
    while (auto v = Take(key)) out.push_back(*v);
    return out;
  }
  bool Flag(std::string_view name) {
    auto it = std::find(flags_.begin(), flags_.end(), name);
    if (it == flags_.end()) return false;
    flags_.erase(it);
    return true;
  }
  Status Done(size_t positional) const {
    if (positional_.size() > positional) return InvalidArgument(fmt::format("unexpected word '{}'", positional_[positional]));
    if (!pairs_.empty()) return InvalidArgument(fmt::format("unknown key '{}'", pairs_.front().first));
    if (!flags_.empty()) return InvalidArgument(fmt::format("unknown flag '{}'", flags_.front()));
    return Status::Ok();
  }

 private:
  // Flags are the only bare words after the positional ones that a command
  // knows; everything else without '=' is positional.
  static bool LooksLikeFlag(std::string_view w) { return w == "preemptible" || w == "drained"; }

  std::vector<std::string> positional_;
  std::vector<std::pair<std::string, std::string>> pairs_;
  std::vector<std::string> flags_;
};

// --------------------------------------------------------------- values --

Result<int64_t> ParseInt(std::string_view s, std::string_view what) {
  if (s.empty()) return InvalidArgument(fmt::format("empty {}", what));
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return InvalidArgument(fmt::format("bad {} '{}'", what, s));
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9' || v > INT64_MAX / 100) return InvalidArgument(fmt::format("bad {} '{}'", what, s));
    v = v * 10 + (s[i] - '0');
  }
  return s[0] == '-' ? -v : v;
}

// "90s", "10m", "1h30m", "250ms", "0" -> milliseconds.
Result<int64_t> ParseDurationMs(std::string_view s) {
  if (s == "0") return int64_t{0};
  auto bad = [&] { return InvalidArgument(fmt::format("bad duration '{}' (want e.g. 250ms, 30s, 10m, 1h30m)", s)); };
  if (s.empty()) return bad();
  int64_t total = 0;
  for (std::string_view rest = s; !rest.empty();) {
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    size_t unit_len = 0;
    while (digits + unit_len < rest.size() && (rest[digits + unit_len] < '0' || rest[digits + unit_len] > '9')) ++unit_len;
    std::string_view unit = rest.substr(digits, unit_len);
    int64_t scale = unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" ? 60'000 : unit == "h" ? 3'600'000 : 0;
    if (digits == 0 || scale == 0) return bad();
    DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(rest.substr(0, digits), "duration"));
    total += n * scale;
    rest = rest.substr(digits + unit_len);
  }
  return total;
}

// 5400000 -> "1h30m"; 0 -> "0s".
std::string FormatDurationMs(int64_t ms) {
  if (ms == 0) return "0s";
  std::string out;
  for (auto [scale, unit] : {std::pair{int64_t{3'600'000}, "h"}, {60'000, "m"}, {1000, "s"}, {1, "ms"}}) {
    if (ms >= scale) out += fmt::format("{}{}", ms / scale, unit);
    ms %= scale;
  }
  return out;
}

Result<bool> ParseOnOff(std::string_view s) {
  if (s == "on") return true;
  if (s == "off") return false;
  return InvalidArgument(fmt::format("want on|off, got '{}'", s));
}

// "3" -> {3}; "0-3" -> {0,1,2,3}; "0-1+4-5" and "0-1,4-5" -> {0,1,4,5}.
Result<std::vector<int>> ParseIndexSet(std::string_view s) {
  std::vector<int> out;
  while (!s.empty()) {
    size_t plus = s.find_first_of("+,");
    std::string_view part = s.substr(0, plus);
    size_t dash = part.find('-');
    DROVER_ASSIGN_OR_RETURN(int64_t lo, ParseInt(part.substr(0, dash), "GPU index"));
    int64_t hi = lo;
    if (dash != std::string_view::npos) {
      DROVER_ASSIGN_OR_RETURN(hi, ParseInt(part.substr(dash + 1), "GPU index"));
    }
    if (lo < 0 || hi < lo || hi >= kMaxGpusPerNode) return InvalidArgument(fmt::format("bad GPU range '{}'", part));
    for (int64_t i = lo; i <= hi; ++i) out.push_back(static_cast<int>(i));
    s = plus == std::string_view::npos ? std::string_view{} : s.substr(plus + 1);
  }
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s = s.substr(at + 1);
  }
}

// "0-3,4-7" -> {{0,1,2,3},{4,5,6,7}}.
Result<std::vector<std::vector<int>>> ParseGroups(std::string_view s) {
  std::vector<std::vector<int>> out;
  for (std::string_view g : Split(s, ',')) {
    DROVER_ASSIGN_OR_RETURN(std::vector<int> set, ParseIndexSet(g));
    out.push_back(std::move(set));
  }
  return out;
}

// "rack:r1,switch:s1" -> {rack: r1, switch: s1}.
Result<std::map<std::string, std::string>> ParseLabels(std::string_view s) {
  std::map<std::string, std::string> out;
  for (std::string_view kv : Split(s, ',')) {
    size_t colon = kv.find(':');
    if (colon == std::string_view::npos || colon == 0) return InvalidArgument(fmt::format("bad label '{}' (want key:value)", kv));
    out[std::string(kv.substr(0, colon))] = std::string(kv.substr(colon + 1));
  }
  return out;
}

// {0,1} -> "0,1"; {0,1,2,3,6} -> "0-3,6".
std::string FormatIndices(const std::vector<int>& idx) {
  std::string out;
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += fmt::format("{}-{}", idx[i], idx[j]);
    } else {
      for (size_t k = i; k <= j; ++k) out += fmt::format("{}{}", k == i ? "" : ",", idx[k]);
    }
    i = j + 1;
  }
  return out;
}

std::string FormatPlacement(const Placement& p) {
  std::string out = fmt::format("{}[{}]", p.node, FormatIndices(p.gpu_indices));
  if (p.gpu_milli < kWholeGpu) out += fmt::format(" (share {}, {})", FormatMilliGpu(p.gpu_milli), FormatBytes(p.gpu_memory_bytes));
  return out;
}

std::string FormatBinding(const Binding& b) {
  std::string out = b.job_id + " ->";
  for (const Placement& p : b.replicas) out += " " + FormatPlacement(p);
  return out;
}

// ---------------------------------------------------------------- runner --

// Runs one scenario: owns the Scheduler and the runner's own record of what
// the script has done (node inventories for `unhealthy`, submission order for
// the pending list, bindings for `show`).
class Runner {
 public:
  explicit Runner(std::string file) : file_(std::move(file)) {}

  // The transcript, or the first failure as "file:line: message".
  Result<std::string> Run(std::string_view text) {
    std::string transcript;
    int number = 0;
    for (std::string_view raw : Split(text, '\n')) {
      ++number;
      std::string_view line = TrimRight(raw);
      transcript += std::string(line) + "\n";
      auto words = Tokenize(line);
      if (!words.ok()) return Fail(number, words.status().message());
      if (words->empty()) continue;
      std::vector<std::string> out;
      if (Status s = Exec(*words, out); !s.ok()) return Fail(number, s.message());
      for (const std::string& o : out) transcript += "  " + o + "\n";
      if (Status s = sched().CheckInvariants(); !s.ok()) {
        return Fail(number, "invariant broken after this line: " + s.ToString());
      }
    }
    while (transcript.size() >= 2 && transcript.ends_with("\n\n")) transcript.pop_back();
    return transcript;
  }

 private:
  Status Fail(int line, std::string_view message) const {
    return InvalidArgument(fmt::format("{}:{}: {}", file_, line, message));
  }

  Scheduler& sched() {
    if (!sched_) sched_ = std::make_unique<Scheduler>(Config{});
    return *sched_;
  }

  Status Exec(const std::vector<std::string>& words, std::vector<std::string>& out) {
    const std::string& verb = words[0];
    Args args(words, 1);
    if (verb == "config") return DoConfig(args);
    if (verb == "tenant") return DoTenant(args, out);
    if (verb == "node") return DoNode(args, out);
    if (verb == "job") return DoJob(args, out);
    if (verb == "never") return DoNever(args, out);
    if (verb == "at" || verb == "advance") return DoTime(verb == "advance", args);
    if (verb == "schedule") return DoSchedule(args, out);
    if (verb == "finish" || verb == "requeue") return DoEnd(verb == "requeue", args, out);
    if (verb == "drain" || verb == "undrain") return DoDrain(verb == "drain", args);
    if (verb == "unhealthy" || verb == "healthy") return DoHealth(verb == "healthy", args, out);
    if (verb == "show") return DoShow(args, out);
    if (verb == "usage") return DoUsage(args, out);
    if (verb == "why") return DoWhy(args, out);
    return InvalidArgument(fmt::format("unknown command '{}'", verb));
  }

  Status DoConfig(Args& a) {
    if (sched_) return InvalidArgument("config must come before every other command");
    Config c;
    if (auto v = a.Take("queue")) {
      DROVER_ASSIGN_OR_RETURN(c.queue, ParseQueuePolicy(*v));
    }
    if (auto v = a.Take("placement")) {
      DROVER_ASSIGN_OR_RETURN(c.placement, ParsePlacementPolicy(*v));
    }
    if (auto v = a.Take("backfill")) {
      DROVER_ASSIGN_OR_RETURN(c.backfill, ParseOnOff(*v));
    }
    if (auto v = a.Take("preemption")) {
      DROVER_ASSIGN_OR_RETURN(c.preemption, ParseOnOff(*v));
    }
    if (auto v = a.Take("aging")) {
      DROVER_ASSIGN_OR_RETURN(c.aging_ms, ParseDurationMs(*v));
    }
    if (auto v = a.Take("grace")) {
      DROVER_ASSIGN_OR_RETURN(c.preemption_grace_ms, ParseDurationMs(*v));
    }
    DROVER_RETURN_IF_ERROR(a.Done(0));
    sched_ = std::make_unique<Scheduler>(c);
    return Status::Ok();
  }

  Status DoTenant(Args& a, std::vector<std::string>& out) {
    TenantInfo t;
    DROVER_ASSIGN_OR_RETURN(t.name, a.Positional(0, "tenant name"));
    if (auto v = a.Take("weight")) {
      char* end = nullptr;
      t.weight = std::strtod(v->c_str(), &end);
      if (v->empty() || *end != '\0') return InvalidArgument(fmt::format("bad weight '{}'", *v));
    }
    for (const std::string& g : a.TakeAll("guarantee")) {
      size_t colon = g.rfind(':');
      if (colon == std::string::npos) return InvalidArgument(fmt::format("bad guarantee '{}' (want \"MODEL\":N)", g));
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(g.substr(colon + 1), "guarantee"));
      t.guaranteed_gpus[g.substr(0, colon)] = static_cast<int>(n);
    }
    if (auto v = a.Take("borrow")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "borrow limit"));
      t.borrow_limit = static_cast<int>(n);
    }
    DROVER_RETURN_IF_ERROR(a.Done(1));
    Report(sched().SetTenant(t), out);
    return Status::Ok();
  }

  Status DoNode(Args& a, std::vector<std::string>& out) {
    NodeInfo n;
    DROVER_ASSIGN_OR_RETURN(n.name, a.Positional(0, "node name"));
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, ParseInt(a.Take("gpus").value_or(""), "gpus"));
    GpuInfo proto{0, a.Take("vendor").value_or("nvidia"), a.Take("model").value_or("H100 80GB"), 80 * kGiB, true, 0};
    if (auto v = a.Take("memory")) {
      DROVER_ASSIGN_OR_RETURN(proto.memory_bytes, ParseBytes(*v));
    }
    for (int i = 0; i < gpus; ++i) {
      n.gpus.push_back(proto);
      n.gpus.back().index = i;
    }
    auto gpu = [&](int i) -> Result<GpuInfo*> {
      if (i >= static_cast<int>(n.gpus.size())) return InvalidArgument(fmt::format("GPU {} beyond gpus={}", i, gpus));
      return &n.gpus[static_cast<size_t>(i)];
    };
    std::vector<std::vector<int>> islands, pcie;
    if (auto v = a.Take("numa")) {
      DROVER_ASSIGN_OR_RETURN(auto groups, ParseGroups(*v));
      for (size_t g = 0; g < groups.size(); ++g) {
        for (int i : groups[g]) {
          DROVER_ASSIGN_OR_RETURN(GpuInfo * info, gpu(i));
          info->numa_node = static_cast<int>(g);
        }
      }
    }
    if (auto v = a.Take("islands")) {
      DROVER_ASSIGN_OR_RETURN(islands, ParseGroups(*v));
    }
    if (auto v = a.Take("pcie")) {
      DROVER_ASSIGN_OR_RETURN(pcie, ParseGroups(*v));
    }
    if (auto v = a.Take("unhealthy")) {
      DROVER_ASSIGN_OR_RETURN(std::vector<int> bad, ParseIndexSet(*v));
      for (int i : bad) {
        DROVER_ASSIGN_OR_RETURN(GpuInfo * info, gpu(i));
        info->healthy = false;
      }
    }
    if (auto v = a.Take("labels")) {
      DROVER_ASSIGN_OR_RETURN(n.labels, ParseLabels(*v));
    }
    n.schedulable = !a.Flag("drained");
    DROVER_RETURN_IF_ERROR(a.Done(1));
    if (!islands.empty() || !pcie.empty()) n.links = LinkMatrix(n.gpus, islands, pcie);
    nodes_[n.name] = n;
    Report(sched().UpsertNode(n), out);
    return Status::Ok();
  }

  // Same island -> fabric; same PCIe group -> switch; else by NUMA node.
  static std::vector<Link> LinkMatrix(const std::vector<GpuInfo>& gpus, const std::vector<std::vector<int>>& islands,
                                      const std::vector<std::vector<int>>& pcie) {
    size_t n = gpus.size();
    auto group_of = [](const std::vector<std::vector<int>>& groups, size_t i) {
      for (size_t g = 0; g < groups.size(); ++g) {
        if (std::find(groups[g].begin(), groups[g].end(), static_cast<int>(i)) != groups[g].end()) return static_cast<int>(g);
      }
      return -1;
    };
    std::vector<Link> links(n * n, Link::kCrossSocket);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        Link& l = links[i * n + j];
        if (gpus[i].numa_node == gpus[j].numa_node) l = Link::kSameNuma;
        int pi = group_of(pcie, i);
        if (pi >= 0 && pi == group_of(pcie, j)) l = Link::kPcieSwitch;
        int ii = group_of(islands, i);
        if (ii >= 0 && ii == group_of(islands, j)) l = Link::kFabric;
      }
    }
    return links;
  }

  Result<JobRequest> ParseJob(Args& a) {
    JobRequest j;
    DROVER_ASSIGN_OR_RETURN(j.id, a.Positional(0, "job id"));
    if (auto v = a.Take("gpus")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "gpus"));
      j.gpus = static_cast<int>(n);
    }
    if (auto v = a.Take("replicas")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "replicas"));
      j.replicas = static_cast<int>(n);
    }
    if (auto v = a.Take("share")) {
      DROVER_ASSIGN_OR_RETURN(int64_t m, ParseMilliGpu(*v));
      j.gpu_milli = static_cast<int>(m);
    }
    if (auto v = a.Take("memory")) {
      DROVER_ASSIGN_OR_RETURN(j.gpu_memory_bytes, ParseBytes(*v));
    }
    j.gpu_model = a.Take("model").value_or("");
    j.gpu_vendor = a.Take("vendor").value_or("");
    j.tenant = a.Take("tenant").value_or("default");
    if (auto v = a.Take("priority")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "priority"));
      j.priority = static_cast<int>(n);
    }
    if (auto v = a.Take("estimate")) {
      DROVER_ASSIGN_OR_RETURN(j.runtime_estimate_ms, ParseDurationMs(*v));
    }
    if (auto v = a.Take("selector")) {
      DROVER_ASSIGN_OR_RETURN(j.node_selector, ParseLabels(*v));
    }
    if (auto v = a.Take("topology")) {
      DROVER_ASSIGN_OR_RETURN(j.topology, ParseTopology(*v));
    }
    j.preemptible = a.Flag("preemptible");
    DROVER_RETURN_IF_ERROR(a.Done(1));
    return j;
  }

  Status DoJob(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(JobRequest j, ParseJob(a));
    Status s = sched().Enqueue(j, now_ms_);
    if (s.ok() && std::find(order_.begin(), order_.end(), j.id) == order_.end()) order_.push_back(j.id);
    Report(s, out);
    return Status::Ok();
  }

  Status DoNever(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(JobRequest j, ParseJob(a));
    std::optional<std::string> why = sched().NeverFits(j);
    out.push_back(why ? fmt::format("never fits: {}", *why) : "fits once the cluster is idle");
    return Status::Ok();
  }

  Status DoTime(bool relative, Args& a) {
    DROVER_ASSIGN_OR_RETURN(std::string v, a.Positional(0, "time"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    DROVER_ASSIGN_OR_RETURN(int64_t t, ParseDurationMs(v));
    if (relative) t += now_ms_;
    if (t < now_ms_) return InvalidArgument(fmt::format("time goes backwards ({} < {})", v, FormatDurationMs(now_ms_)));
    sched();  // a script may start with `at`; the default config applies
    now_ms_ = t;
    return Status::Ok();
  }

  Status DoSchedule(Args& a, std::vector<std::string>& out) {
    DROVER_RETURN_IF_ERROR(a.Done(0));
    Decisions d = sched().Schedule(now_ms_);
    for (const Binding& b : d.bindings) {
      out.push_back("bind " + FormatBinding(b));
      bound_[b.job_id] = b;
    }
    for (const Preemption& p : d.preemptions) {
      out.push_back(fmt::format("preempt {} for {}: {} (grace {})", p.job_id, p.for_job, p.reason, FormatDurationMs(p.grace_ms)));
    }
    if (d.bindings.empty() && d.preemptions.empty()) out.push_back("(no decisions)");
    ListPending(out);
    return Status::Ok();
  }

  void ListPending(std::vector<std::string>& out) {
    for (const std::string& id : order_) {
      if (sched().IsPending(id)) out.push_back(fmt::format("pending {}: {}", id, sched().PendingReason(id)));
    }
  }

  Status DoEnd(bool requeue, Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string id, a.Positional(0, "job id"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    if (requeue) {
      Status s = sched().Requeue(id, now_ms_);
      if (s.ok()) bound_.erase(id);
      Report(s, out);
    } else {
      sched().Remove(id, now_ms_);
      bound_.erase(id);
      std::erase(order_, id);
    }
    return Status::Ok();
  }

  Status DoDrain(bool drain, Args& a) {
    DROVER_ASSIGN_OR_RETURN(std::string node, a.Positional(0, "node name"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return InvalidArgument(fmt::format("unknown node '{}'", node));
    it->second.schedulable = !drain;
    sched().SetSchedulable(node, !drain);
    return Status::Ok();
  }

  // Re-sends the node's inventory with GPUs marked (un)healthy, as the server
  // does when an agent reports a device change.
  Status DoHealth(bool healthy, Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string node, a.Positional(0, "node name"));
    DROVER_ASSIGN_OR_RETURN(std::string which, a.Positional(1, "GPU indices"));
    DROVER_RETURN_IF_ERROR(a.Done(2));
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return InvalidArgument(fmt::format("unknown node '{}'", node));
    DROVER_ASSIGN_OR_RETURN(std::vector<int> idx, ParseIndexSet(which));
    for (int i : idx) {
      if (i >= static_cast<int>(it->second.gpus.size())) return InvalidArgument(fmt::format("node '{}' has no GPU {}", node, i));
      it->second.gpus[static_cast<size_t>(i)].healthy = healthy;
    }
    Report(sched().UpsertNode(it->second), out);
    return Status::Ok();
  }

  Status DoShow(Args& a, std::vector<std::string>& out) {
    DROVER_RETURN_IF_ERROR(a.Done(0));
    for (const auto& [id, b] : bound_) {
      out.push_back(fmt::format("bound {}{}", FormatBinding(b), sched().IsPreempting(id) ? " (preempting)" : ""));
    }
    ListPending(out);
    for (const auto& [name, n] : nodes_) {
      uint64_t held = sched().HeldMask(name);
      std::vector<int> idx;
      for (int i = 0; i < kMaxGpusPerNode; ++i) {
        if ((held >> i) & 1U) idx.push_back(i);
      }
      out.push_back(fmt::format("node {}: {} of {} GPUs held{}{}", name, idx.size(), n.gpus.size(),
                                idx.empty() ? "" : " [" + FormatIndices(idx) + "]", n.schedulable ? "" : ", drained"));
    }
    return Status::Ok();
  }

  Status DoUsage(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string tenant, a.Positional(0, "tenant name"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    Scheduler::TenantUsage u = sched().Usage(tenant);
    out.push_back(fmt::format("usage {}: gpus={} memory={} borrowed={}", tenant, FormatMilliGpu(u.milli_gpus),
                              FormatBytes(u.memory_bytes), FormatMilliGpu(u.borrowed_milli)));
    return Status::Ok();
  }

  Status DoWhy(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string id, a.Positional(0, "job id"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    std::string why = sched().PendingReason(id);
    out.push_back(why.empty() ? fmt::format("{} is not pending", id) : fmt::format("pending {}: {}", id, why));
    return Status::Ok();
  }

  static void Report(const Status& s, std::vector<std::string>& out) {
    if (!s.ok()) out.push_back("error: " + s.ToString());
  }

  std::string file_;
  std::unique_ptr<Scheduler> sched_;
  int64_t now_ms_ = 0;
  std::map<std::string, NodeInfo> nodes_;
  std::vector<std::string> order_;  // submission order; a requeued job keeps its place
  std::map<std::string, Binding> bound_;
};

// ------------------------------------------------------------------ diff --

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view l : Split(text, '\n')) out.emplace_back(l);
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// A unified diff (3 lines of context) from the longest common subsequence;
// the files are a few hundred lines, so O(n*m) is fine.
std::string UnifiedDiff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  }
  struct Op {
    char kind;  // ' ', '-', '+'
    size_t ai, bi;  // line numbers (0-based) before this op
    const std::string* text;
  };
  std::vector<Op> ops;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ops.push_back({' ', i, j, &a[i]});
      ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      ops.push_back({'-', i, j, &a[i]});
      ++i;
    } else {
      ops.push_back({'+', i, j, &b[j]});
      ++j;
    }
  }
  constexpr size_t kContext = 3;
  std::vector<bool> shown(ops.size(), false);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].kind == ' ') continue;
    for (size_t c = k > kContext ? k - kContext : 0; c <= std::min(ops.size() - 1, k + kContext); ++c) shown[c] = true;
  }
  std::string out;
  for (size_t k = 0; k < ops.size();) {
    if (!shown[k]) {
      ++k;
      continue;
    }
    size_t end = k;
    size_t alen = 0, blen = 0;
    while (end < ops.size() && shown[end]) {
      alen += ops[end].kind != '+';
      blen += ops[end].kind != '-';
      ++end;
    }
    out += fmt::format("@@ -{},{} +{},{} @@\n", ops[k].ai + 1, alen, ops[k].bi + 1, blen);
    for (; k < end; ++k) out += fmt::format("{}{}\n", ops[k].kind, *ops[k].text);
  }
  return out;
}

// ----------------------------------------------------------------- tests --

fs::path TestdataDir() { return fs::path(DROVER_TESTDATA_DIR); }

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(TestdataDir(), ec)) {
    if (e.path().extension() == ".scenario") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Rewriting() {
  const char* v = std::getenv("DROVER_REWRITE");
  return v != nullptr && std::string_view(v) == "1";
}

class ScenarioTest : public testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, MatchesExpectedTranscript) {
  fs::path scenario = TestdataDir() / (GetParam() + ".scenario");
  fs::path expected_path = TestdataDir() / (GetParam() + ".out");
  std::optional<std::string> text = ReadFile(scenario);
  ASSERT_TRUE(text.has_value()) << "cannot read " << scenario;
  Result<std::string> got = Runner(scenario.string()).Run(*text);
  ASSERT_TRUE(got.ok()) << got.status().message();
  if (Rewriting()) {
    std::ofstream(expected_path, std::ios::binary | std::ios::trunc) << *got;
    std::cout << "rewrote " << expected_path.string() << "\n";
    return;
  }
  std::optional<std::string> want = ReadFile(expected_path);
  ASSERT_TRUE(want.has_value()) << "no " << expected_path.string() << "; run with DROVER_REWRITE=1 to create it";
  if (*want != *got) {
    ADD_FAILURE() << expected_path.string() << " differs from what the scheduler does now"
                  << " (DROVER_REWRITE=1 accepts the new transcript):\n--- " << GetParam() << ".out\n+++ actual\n"
                  << UnifiedDiff(Lines(*want), Lines(*got));
  }
}

INSTANTIATE_TEST_SUITE_P(Sched, ScenarioTest, testing::ValuesIn(ScenarioNames()),
                         [](const testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ScenarioFilesTest, EveryExpectedOutputHasAScenario) {
  EXPECT_FALSE(ScenarioNames().empty()) << "no scenarios under " << TestdataDir();
  for (const auto& e : fs::directory_iterator(TestdataDir())) {
    if (e.path().extension() != ".out") continue;
    fs::path scenario = e.path();
    scenario.replace_extension(".scenario");
    EXPECT_TRUE(fs::exists(scenario)) << e.path() << " is stale: " << scenario << " does not exist";
  }
}

// The runner's own behaviour: errors name the file and line.
TEST(ScenarioRunnerTest, ParseErrorsNameFileAndLine) {
  auto r = Runner("x.scenario").Run("# comment\nnode n1 gpus=2\njob j1 gpus=1 colour=blue\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "x.scenario:3: unknown key 'colour'");
  r = Runner("y.scenario").Run("node n1 gpus=2\nconfig queue=fifo\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "y.scenario:2: config must come before every other command");
  r = Runner("z.scenario").Run("at 10m\nat 5m\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "z.scenario:2: time goes backwards (5m < 10m)");
  r = Runner("q.scenario").Run("node \"n1 gpus=2\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "q.scenario:1: unterminated quote");
}

TEST(ScenarioRunnerTest, TranscriptEchoesLinesAndIndentsAnswers) {
  auto r = Runner("t.scenario").Run("# two GPUs\nnode n1 gpus=2 model=\"A100 40GB\" memory=40GiB\njob j1 gpus=2  # all of it\nschedule\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "# two GPUs\nnode n1 gpus=2 model=\"A100 40GB\" memory=40GiB\njob j1 gpus=2  # all of it\nschedule\n  bind j1 -> n1[0,1]\n");
}

TEST(ScenarioRunnerTest, DurationsRoundTrip) {
  EXPECT_EQ(ParseDurationMs("1h30m").value(), 5'400'000);
  EXPECT_EQ(ParseDurationMs("250ms").value(), 250);
  EXPECT_EQ(ParseDurationMs("0").value(), 0);
  EXPECT_FALSE(ParseDurationMs("10").ok());
  EXPECT_FALSE(ParseDurationMs("5x").ok());
  EXPECT_EQ(FormatDurationMs(5'400'000), "1h30m");
  EXPECT_EQ(FormatDurationMs(30'000), "30s");
  EXPECT_EQ(FormatDurationMs(1'500), "1s500ms");
}

TEST(ScenarioRunnerTest, FormatsIndexRuns) {
  EXPECT_EQ(FormatIndices({0, 1}), "0,1");
  EXPECT_EQ(FormatIndices({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatIndices({1, 3, 4, 5, 6, 7}), "1,3-7");
}

TEST(ScenarioRunnerTest, DiffShowsChangedLinesWithContext) {
  std::string d = UnifiedDiff({"a", "b", "c", "d", "e", "f", "g", "h"}, {"a", "b", "c", "d", "X", "f", "g", "h"});
  EXPECT_EQ(d, "@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+X\n f\n g\n h\n");
}

}  // namespace
}  // namespace drover::sched
