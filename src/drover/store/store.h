#pragma once
// Store: a revisioned key-value store with compare-and-swap transactions,
// prefix ranges, watches from a revision, and leases (the shape of etcd v3).
//
// Every successful write transaction advances the store's revision by one;
// every key remembers the revision that created it, the revision that last
// modified it and how many times it was written since creation (version).
// A key that does not exist has version 0, create and mod revision 0.
//
// Implementations: SqliteStore (store/sqlite/), etcd later. Every
// implementation must pass tests/store_contract.h unchanged.
//
// Thread-safety: all methods may be called from any thread.
// Durability: a transaction that returned OK survives a crash of the process
// (and, where the implementation says so, of the machine).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"

namespace drover::store {

using LeaseId = int64_t;

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  LeaseId lease = 0;
};

// One condition of a transaction, evaluated against the current state.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Op { kEqual, kNotEqual, kLess, kGreater };

  std::string key;
  Target target = Target::kVersion;
  Op op = Op::kEqual;
  int64_t number = 0;  // for kVersion, kCreateRevision, kModRevision
  std::string value;   // for kValue (a missing key never equals any value)

  static Compare Missing(std::string key) { return {std::move(key), Target::kVersion, Op::kEqual, 0, {}}; }
  static Compare Exists(std::string key) { return {std::move(key), Target::kVersion, Op::kGreater, 0, {}}; }
  static Compare ModRevisionIs(std::string key, int64_t rev) {
    return {std::move(key), Target::kModRevision, Op::kEqual, rev, {}};
  }
  static Compare ValueIs(std::string key, std::string v) {
    return {std::move(key), Target::kValue, Op::kEqual, 0, std::move(v)};
  }
};

// One write (or read) of a transaction.
struct Op {
  enum class Kind { kPut, kDelete, kDeletePrefix, kGet };
  Kind kind = Kind::kPut;
  std::string key;    // the key, or the prefix for kDeletePrefix
  std::string value;  // for kPut
  LeaseId lease = 0;  // for kPut: the key is deleted when the lease ends

  static Op Put(std::string key, std::string value, LeaseId lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), lease};
  }
  static Op Delete(std::string key) { return {Kind::kDelete, std::move(key), {}, 0}; }
  static Op DeletePrefix(std::string prefix) { return {Kind::kDeletePrefix, std::move(prefix), {}, 0}; }
  static Op Get(std::string key) { return {Kind::kGet, std::move(key), {}, 0}; }
};

struct TxnResult {
  bool succeeded = false;  // all compares held and the success ops ran
  int64_t revision = 0;    // the store's revision after the transaction
  // For each kGet op that ran, in order: the value, or nullopt when missing.
  std::vector<std::optional<KeyValue>> gets;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key
  int64_t revision = 0;       // the revision the range was read at
  bool more = false;          // limit cut the result short
};

struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for kDelete: key and mod_revision (the deleting revision)
};

// Called with the events of one revision at a time, in revision order, each
// revision exactly once. Runs on a thread of the store's choosing; it must
// not block for long and must not destroy its own WatchHandle.
using WatchCallback = std::function<void(const std::vector<Event>&)>;

// Cancels the watch when destroyed; after the destructor returns the
// callback is never called again.
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
};

// The most one transaction may carry: operations per branch (and compares),
// and bytes of keys and values all told. Unlimited unless the store says
// otherwise (etcd: its --max-txn-ops and --max-request-bytes).
struct Limits {
  size_t max_ops = SIZE_MAX;
  size_t max_bytes = SIZE_MAX;
};

// What `op` counts against Limits::max_bytes (its key and value, and a
// little for the framing around them).
inline size_t OpBytes(const Op& op) { return op.key.size() + op.value.size() + 16; }

class Store {
 public:
  virtual ~Store() = default;

  virtual Limits limits() const { return {}; }

  // If every compare holds, runs `success`, else `failure`, atomically.
  // A transaction that writes nothing does not advance the revision.
  virtual Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                const std::vector<Op>& failure) = 0;

  // Keys starting with `prefix` (all keys when empty), sorted, from `start`
  // on (inclusive; "" is the first key of the prefix); at most `limit` of
  // them when limit > 0. Page through a large prefix by passing the last
  // key read + '\0' as the next start.
  virtual Result<RangeResult> Range(const std::string& prefix, int64_t limit = 0, const std::string& start = "") = 0;

  // Streams every change under `prefix` from `start_revision` (inclusive)
  // on: first the history still kept, then live changes. A start revision
  // older than the compacted history is kOutOfRange; 0 means "from now".
  virtual Result<std::unique_ptr<WatchHandle>> Watch(const std::string& prefix, int64_t start_revision,
                                                     WatchCallback callback) = 0;

  // Forgets history before `revision`; later watches cannot start earlier.
  virtual Status Compact(int64_t revision) = 0;

  // A lease ends `ttl` after its grant or its last keep-alive, by the
  // store's clock; its keys are then deleted (as a normal revision).
  virtual Result<LeaseId> GrantLease(Duration ttl) = 0;
  virtual Status KeepAlive(LeaseId lease) = 0;  // kNotFound when ended
  virtual Status RevokeLease(LeaseId lease) = 0;

  virtual Result<int64_t> CurrentRevision() = 0;

  // Conveniences over Txn and Range.
  Result<std::optional<KeyValue>> Get(const std::string& key);
  Result<int64_t> Put(const std::string& key, const std::string& value, LeaseId lease = 0);
  Result<int64_t> Delete(const std::string& key);
  // Writes `ops` (no compares, no reads) in order, in as few transactions as
  // limits() allows: atomic per transaction only, so for writes that need
  // no atomicity together (deletes of expired records, a batch too large
  // for one transaction). Stops at the first failure.
  Status WriteInChunks(const std::vector<Op>& ops);
};

}  // namespace drover::store
