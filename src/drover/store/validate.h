#pragma once
// What every Store accepts: the limits on keys and values, and the checks
// both implementations run before a request touches their backend, so that
// bad input gets the same kInvalidArgument from either.

#include <cstddef>
#include <optional>
#include <string>

#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store {

inline constexpr size_t kMaxKeyBytes = 4 * 1024;
inline constexpr size_t kMaxValueBytes = 4 * 1024 * 1024;

// The smallest string greater than every string starting with `prefix`, or
// nullopt when there is none ("" and all-0xff prefixes): "a/" -> "a0",
// "a\xff" -> "b".
std::optional<std::string> PrefixEnd(std::string prefix);

// `what` names the request in the message ("put", "compare").
Status ValidateKey(const std::string& key, const char* what);
Status ValidatePrefix(const std::string& prefix);
Status ValidateOp(const Op& op);
// Every key of every compare and op, both branches (an invalid op in the
// branch that would not run still fails the whole transaction).
Status ValidateTxn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                   const std::vector<Op>& failure);

}  // namespace drover::store
