#pragma once
// The words and values of a scenario line (tests/testdata/sched/*.scenario):
// tokenizing, key=value arguments, durations, GPU index sets, labels, and the
// formatting of the scheduler's answers in a transcript. The line format is
// documented in tests/testdata/sched/README.md; the runner is scenario.h.
// Test-only; used by the scenario runner and sched_scenario_test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drover/common/status.h"
#include "drover/sched/model.h"

namespace drover::sched::testing {

// ---------------------------------------------------------------- lexing --

std::string_view TrimRight(std::string_view s);

// Splits a command line into words. Double quotes group words ("H100 80GB")
// and are dropped; a '#' outside quotes at the start of a word starts a
// comment that runs to the end of the line.
Result<std::vector<std::string>> Tokenize(std::string_view line);

std::vector<std::string_view> Split(std::string_view s, char sep);

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
    if (positional_.size() > positional)
      return InvalidArgument(fmt::format("unexpected word '{}'", positional_[positional]));
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

Result<int64_t> ParseInt(std::string_view s, std::string_view what);

// "90s", "10m", "1h30m", "250ms", "0" -> milliseconds.
Result<int64_t> ParseDurationMs(std::string_view s);

// 5400000 -> "1h30m"; 0 -> "0s".
std::string FormatDurationMs(int64_t ms);

Result<bool> ParseOnOff(std::string_view s);

// "3" -> {3}; "0-3" -> {0,1,2,3}; "0-1+4-5" and "0-1,4-5" -> {0,1,4,5}.
Result<std::vector<int>> ParseIndexSet(std::string_view s);

// "0-3,4-7" -> {{0,1,2,3},{4,5,6,7}}.
Result<std::vector<std::vector<int>>> ParseGroups(std::string_view s);

// "rack:r1,switch:s1" -> {rack: r1, switch: s1}.
Result<std::map<std::string, std::string>> ParseLabels(std::string_view s);

// {0,1} -> "0,1"; {0,1,2,3,6} -> "0-3,6".
std::string FormatIndices(const std::vector<int>& idx);

// "n1[0,1]", or "n1[0] (share 250m, 10GiB)" for a fractional placement.
std::string FormatPlacement(const Placement& p);

// "j1 -> n1[0-3] n2[0-3]".
std::string FormatBinding(const Binding& b);

}  // namespace drover::sched::testing
