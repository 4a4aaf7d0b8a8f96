#pragma once
// Fault: a fault to inject into a GPU whose backend models its devices (the
// simulated one), from an administrator's call or the configuration. The
// server validates the text, the agent applies it; both parse it here.

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover {

struct Fault {
  enum class Kind {
    kXid,             // raises one XID event (code)
    kEccUncorrected,  // raises one double-bit ECC error
    kLost,            // the device stops answering until cleared
    kOverheat,        // the cooling fails: temperature climbs and throttles
    kClear,           // ends kLost and kOverheat
  };
  Kind kind = Kind::kXid;
  int64_t code = 0;
};

// "xid:79", "xid" (79), "ecc", "lost", "overheat", "clear".
Result<Fault> ParseFault(std::string_view text);
std::string_view FaultKindName(Fault::Kind kind);

}  // namespace drover
