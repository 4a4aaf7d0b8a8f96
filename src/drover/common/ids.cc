#include "drover/common/ids.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace drover {

namespace {

Result<uint64_t> ParseSequence(std::string_view what, std::string_view prefix, std::string_view id) {
  auto bad = [&] {
    return InvalidArgument(fmt::format("{} id '{}' is malformed (expected {}000042)", what, id.substr(0, 32), prefix));
  };
  if (id.size() < 3 || id.size() > 24 || id.substr(0, 2) != prefix) return bad();
  std::string_view digits = id.substr(2);
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad();
  }
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || n == 0) return bad();
  return n;
}

}  // namespace

std::string FormatJobId(uint64_t sequence) { return fmt::format("j-{:06d}", sequence); }
Result<uint64_t> ParseJobId(std::string_view id) { return ParseSequence("job", "j-", id); }
std::string FormatArrayId(uint64_t sequence) { return fmt::format("a-{:06d}", sequence); }
Result<uint64_t> ParseArrayId(std::string_view id) { return ParseSequence("array", "a-", id); }

Status ValidateName(std::string_view what, std::string_view name) {
  if (name.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  if (name.size() > 63)
    return InvalidArgument(fmt::format("{} '{}...' is longer than 63 characters", what, name.substr(0, 20)));
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '.') {
      return InvalidArgument(fmt::format("{} '{}' may hold only lower-case letters, digits, '-' and '.'", what, name));
    }
  }
  if (!alnum(name.front()) || !alnum(name.back())) {
    return InvalidArgument(fmt::format("{} '{}' must start and end with a letter or digit", what, name));
  }
  return Status::Ok();
}

Status ValidateNodeName(std::string_view name) { return ValidateName("node name", name); }

bool ValidLoadId(std::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace drover
