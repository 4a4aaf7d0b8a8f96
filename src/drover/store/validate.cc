#include "drover/store/validate.h"

#include <fmt/format.h>

namespace drover::store {

std::optional<std::string> PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::nullopt;
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

Status ValidateKey(const std::string& key, const char* what) {
  if (key.empty()) return InvalidArgument(fmt::format("empty key in {}", what));
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgument(
        fmt::format("key of {} bytes in {} exceeds the {}-byte limit", key.size(), what, kMaxKeyBytes));
  }
  return Status::Ok();
}

Status ValidatePrefix(const std::string& prefix) {
  if (prefix.size() > kMaxKeyBytes) {
    return InvalidArgument(fmt::format("prefix of {} bytes exceeds the {}-byte limit", prefix.size(), kMaxKeyBytes));
  }
  return Status::Ok();
}

Status ValidateOp(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kPut:
      if (op.value.size() > kMaxValueBytes) {
        return InvalidArgument(
            fmt::format("value of {} bytes for a put exceeds the {}-byte limit", op.value.size(), kMaxValueBytes));
      }
      return ValidateKey(op.key, "put");
    case Op::Kind::kDelete: return ValidateKey(op.key, "delete");
    case Op::Kind::kGet: return ValidateKey(op.key, "get");
    case Op::Kind::kDeletePrefix: return ValidatePrefix(op.key);  // "" deletes everything, like Range("")
  }
  return InvalidArgument("unknown op kind");
}

Status ValidateTxn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                   const std::vector<Op>& failure) {
  for (const Compare& compare : compares) DROVER_RETURN_IF_ERROR(ValidateKey(compare.key, "compare"));
  for (const Op& op : success) DROVER_RETURN_IF_ERROR(ValidateOp(op));
  for (const Op& op : failure) DROVER_RETURN_IF_ERROR(ValidateOp(op));
  return Status::Ok();
}

}  // namespace drover::store
