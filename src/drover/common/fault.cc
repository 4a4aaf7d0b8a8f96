// ParseFault: the fault injection syntax of the admin call and the config.

#include <charconv>

#include "drover/common/fault.h"

namespace drover {

namespace {
constexpr int64_t kDefaultXid = 79;  // "GPU has fallen off the bus"
}  // namespace

std::string_view FaultKindName(Fault::Kind kind) {
  switch (kind) {
    case Fault::Kind::kXid: return "xid";
    case Fault::Kind::kEccUncorrected: return "ecc";
    case Fault::Kind::kLost: return "lost";
    case Fault::Kind::kOverheat: return "overheat";
    case Fault::Kind::kClear: return "clear";
  }
  return "unknown";
}

Result<Fault> ParseFault(std::string_view text) {
  std::string_view kind = text.substr(0, text.find(':'));
  bool has_arg = kind.size() < text.size();
  std::string_view arg = has_arg ? text.substr(kind.size() + 1) : std::string_view();
  Fault f;
  if (kind == "xid") {
    f.kind = Fault::Kind::kXid;
    f.code = kDefaultXid;
    if (has_arg) {
      auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), f.code);
      if (ec != std::errc() || end != arg.data() + arg.size() || f.code < 1 || f.code > 999) {
        return InvalidArgument("fault '" + std::string(text) + "': the xid must be a number in 1..999");
      }
    }
    return f;
  }
  if (has_arg) return InvalidArgument("fault '" + std::string(text) + "': only xid takes an argument");
  if (kind == "ecc")
    f.kind = Fault::Kind::kEccUncorrected;
  else if (kind == "lost")
    f.kind = Fault::Kind::kLost;
  else if (kind == "overheat")
    f.kind = Fault::Kind::kOverheat;
  else if (kind == "clear")
    f.kind = Fault::Kind::kClear;
  else
    return InvalidArgument("fault '" + std::string(text) + "' is unknown (use xid[:N], ecc, lost, overheat or clear)");
  return f;
}

}  // namespace drover
