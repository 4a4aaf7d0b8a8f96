#include "drover/store/store.h"

namespace drover::store {

// The conveniences are single-op transactions without compares, so every
// implementation gets them with the same semantics as Txn.

Result<std::optional<KeyValue>> Store::Get(const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(TxnResult result, Txn({}, {Op::Get(key)}, {}));
  if (result.gets.size() != 1) return Internal("txn with one get returned " + std::to_string(result.gets.size()));
  return std::move(result.gets.front());
}

Result<int64_t> Store::Put(const std::string& key, const std::string& value, LeaseId lease) {
  DROVER_ASSIGN_OR_RETURN(TxnResult result, Txn({}, {Op::Put(key, value, lease)}, {}));
  return result.revision;
}

Result<int64_t> Store::Delete(const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(TxnResult result, Txn({}, {Op::Delete(key)}, {}));
  return result.revision;
}

Status Store::WriteInChunks(const std::vector<Op>& ops) {
  const Limits limits = this->limits();
  size_t begin = 0;
  while (begin < ops.size()) {
    size_t end = begin;
    size_t bytes = 0;
    while (end < ops.size() && end - begin < limits.max_ops &&
           (end == begin || bytes + OpBytes(ops[end]) <= limits.max_bytes)) {
      bytes += OpBytes(ops[end]);
      ++end;
    }
    std::vector<Op> chunk(ops.begin() + static_cast<std::ptrdiff_t>(begin),
                          ops.begin() + static_cast<std::ptrdiff_t>(end));
    DROVER_RETURN_IF_ERROR(Txn({}, chunk, {}).status());
    begin = end;
  }
  return Status::Ok();
}

}  // namespace drover::store
