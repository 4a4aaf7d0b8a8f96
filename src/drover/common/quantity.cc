#include "drover/common/quantity.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>

namespace drover {
namespace {

constexpr int64_t kMaxBytes = 1024 * kTiB;  // 1 PiB: nothing real is larger.

// Splits "1.5GiB" into the number "1.5" and the unit "GiB".
bool SplitNumber(std::string_view text, double* number, std::string_view* unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  std::string digits(text.substr(0, i));
  if (digits.find('.') != digits.rfind('.')) return false;  // "1.2.3"
  if (digits.front() == '.' || digits.back() == '.') return false;
  char* end = nullptr;
  *number = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return false;
  *unit = text.substr(i);
  return true;
}

}  // namespace

Result<int64_t> ParseBytes(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (t.empty()) return InvalidArgument("size is empty");
  if (t.front() == '-') return InvalidArgument(fmt::format("size '{}' is negative", text));
  double number = 0;
  std::string_view unit;
  if (!SplitNumber(t, &number, &unit)) {
    return InvalidArgument(fmt::format("size '{}' is not a number with a unit such as 10GiB", text));
  }
  struct Unit {
    std::string_view name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"Ki", 1024.0},
      {"KiB", 1024.0},
      {"K", 1e3},
      {"KB", 1e3},
      {"k", 1e3},
      {"kB", 1e3},
      {"Mi", 1048576.0},
      {"MiB", 1048576.0},
      {"M", 1e6},
      {"MB", 1e6},
      {"Gi", 1073741824.0},
      {"GiB", 1073741824.0},
      {"G", 1e9},
      {"GB", 1e9},
      {"Ti", 1099511627776.0},
      {"TiB", 1099511627776.0},
      {"T", 1e12},
      {"TB", 1e12},
  };
  for (const Unit& u : kUnits) {
    if (u.name != unit) continue;
    double bytes = number * u.factor;
    if (bytes > static_cast<double>(kMaxBytes)) {
      return InvalidArgument(fmt::format("size '{}' is larger than 1PiB", text));
    }
    if (bytes != std::floor(bytes)) {
      return InvalidArgument(fmt::format("size '{}' is not a whole number of bytes", text));
    }
    return static_cast<int64_t>(bytes);
  }
  return InvalidArgument(
      fmt::format("size '{}' has unknown unit '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", text, unit));
}

std::string FormatBytes(int64_t bytes) {
  static constexpr std::string_view kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (std::fabs(v) >= 1024 && i + 1 < std::size(kNames)) {
    v /= 1024;
    ++i;
  }
  if (v == std::floor(v)) return fmt::format("{}{}", static_cast<int64_t>(v), kNames[i]);
  return fmt::format("{:.1f}{}", v, kNames[i]);
}

Result<int64_t> ParseMilliGpu(std::string_view text) {
  if (text.empty()) return InvalidArgument("gpu quantity is empty");
  if (text.front() == '-') return InvalidArgument(fmt::format("gpu quantity '{}' is negative", text));
  double number = 0;
  std::string_view unit;
  if (!SplitNumber(text, &number, &unit)) {
    return InvalidArgument(fmt::format("gpu quantity '{}' is not a number", text));
  }
  double milli = 0;
  if (unit.empty()) {
    milli = number * kMilliGpuPerGpu;
  } else if (unit == "m") {
    milli = number;
  } else {
    return InvalidArgument(fmt::format("gpu quantity '{}' has unknown unit '{}'", text, unit));
  }
  if (milli != std::floor(milli)) {
    return InvalidArgument(fmt::format("gpu quantity '{}' is finer than a thousandth of a GPU", text));
  }
  if (milli > 1e9) return InvalidArgument(fmt::format("gpu quantity '{}' is too large", text));
  return static_cast<int64_t>(milli);
}

std::string FormatSeconds(int64_t s) {
  if (s % 86400 == 0 && s > 0) return fmt::format("{}d", s / 86400);
  if (s % 3600 == 0 && s > 0) return fmt::format("{}h", s / 3600);
  if (s % 60 == 0 && s > 0) return fmt::format("{}m", s / 60);
  return fmt::format("{}s", s);
}

std::string FormatMilliGpu(int64_t milli) {
  if (milli % kMilliGpuPerGpu == 0) return fmt::format("{}", milli / kMilliGpuPerGpu);
  return fmt::format("{}m", milli);
}

Result<ArrayRange> ParseArrayRange(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(
        fmt::format("array '{}': {} (expected FIRST-LAST[:STEP][%MAX], e.g. 1-100%10)", text.substr(0, 64), why));
  };
  auto number = [](std::string_view s, int64_t* out) {
    if (s.empty() || s.size() > 18) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
  };
  ArrayRange a;
  std::string_view rest = text;
  if (size_t pct = rest.find('%'); pct != std::string_view::npos) {
    int64_t max = 0;
    if (!number(rest.substr(pct + 1), &max) || max < 1 || max > INT32_MAX)
      return bad("the limit after % is not a positive number");
    a.max_running = static_cast<int32_t>(max);
    rest = rest.substr(0, pct);
  }
  if (size_t colon = rest.find(':'); colon != std::string_view::npos) {
    int64_t step = 0;
    if (!number(rest.substr(colon + 1), &step) || step < 1) return bad("the step after : is not a positive number");
    a.step = step;
    rest = rest.substr(0, colon);
  }
  int64_t first = 0, last = 0;
  if (size_t dash = rest.find('-'); dash != std::string_view::npos) {
    if (!number(rest.substr(0, dash), &first) || !number(rest.substr(dash + 1), &last)) return bad("bad index range");
  } else {
    if (!number(rest, &first)) return bad("bad index");
    last = first;
  }
  if (last < first) return bad("the last index is below the first");
  a.first = first;
  a.last = last;
  return a;
}

}  // namespace drover
