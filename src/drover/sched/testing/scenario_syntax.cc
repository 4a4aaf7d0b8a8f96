// See scenario_syntax.h.

#include "drover/sched/testing/scenario_syntax.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"

namespace drover::sched::testing {

// ---------------------------------------------------------------- lexing --

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

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

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s = s.substr(at + 1);
  }
}

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

Result<int64_t> ParseDurationMs(std::string_view s) {
  if (s == "0") return int64_t{0};
  auto bad = [&] { return InvalidArgument(fmt::format("bad duration '{}' (want e.g. 250ms, 30s, 10m, 1h30m)", s)); };
  if (s.empty()) return bad();
  int64_t total = 0;
  for (std::string_view rest = s; !rest.empty();) {
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    size_t unit_len = 0;
    while (digits + unit_len < rest.size() && (rest[digits + unit_len] < '0' || rest[digits + unit_len] > '9'))
      ++unit_len;
    std::string_view unit = rest.substr(digits, unit_len);
    int64_t scale = unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" ? 60'000 : unit == "h" ? 3'600'000 : 0;
    if (digits == 0 || scale == 0) return bad();
    DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(rest.substr(0, digits), "duration"));
    total += n * scale;
    rest = rest.substr(digits + unit_len);
  }
  return total;
}

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

Result<std::vector<std::vector<int>>> ParseGroups(std::string_view s) {
  std::vector<std::vector<int>> out;
  for (std::string_view g : Split(s, ',')) {
    DROVER_ASSIGN_OR_RETURN(std::vector<int> set, ParseIndexSet(g));
    out.push_back(std::move(set));
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseLabels(std::string_view s) {
  std::map<std::string, std::string> out;
  for (std::string_view kv : Split(s, ',')) {
    size_t colon = kv.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return InvalidArgument(fmt::format("bad label '{}' (want key:value)", kv));
    out[std::string(kv.substr(0, colon))] = std::string(kv.substr(colon + 1));
  }
  return out;
}

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
  if (p.gpu_milli < kWholeGpu)
    out += fmt::format(" (share {}, {})", FormatMilliGpu(p.gpu_milli), FormatBytes(p.gpu_memory_bytes));
  return out;
}

std::string FormatBinding(const Binding& b) {
  std::string out = b.job_id + " ->";
  for (const Placement& p : b.replicas) out += " " + FormatPlacement(p);
  return out;
}

}  // namespace drover::sched::testing
