#pragma once
// AuditLog: a hash-chained, append-only record of every state-changing call,
// kept in the store.
//
//   /audit/<seq, 20 digits>  one entry (JSON): seq, time, who, token, tenant,
//                            role, action, target, result, source, prev, hash
//   /audit-head              {seq, hash} of the newest entry
//
// hash = SHA-256(prev hash + "\n" + the entry's canonical JSON without its
// hash); the first entry's prev is 64 zeros. Verify() recomputes the chain:
// an edited entry breaks its own hash, a dropped or reordered one breaks the
// sequence or the next entry's prev, a dropped tail disagrees with the head.
// Someone who can rewrite the whole store can rewrite the whole chain: pin
// the head hash elsewhere (`drover audit verify --expect-head`) to catch that.
//
// Thread-safety: thread-safe; appends are serialized by a mutex and, across
// servers, by a compare-and-swap on the head.

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "drover/auth/token.h"
#include "drover/common/clock.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/store/sqlite/archive.h"
#include "drover/store/store.h"

namespace drover::auth {

struct AuditEntry {
  int64_t seq = 0;
  int64_t time_ns = 0;
  std::string who;  // token name, or "anonymous"
  std::string token_id;
  std::string tenant;
  std::string role;
  std::string action;  // "jobs.submit", "nodes.drain", "tokens.create", "agent.session" ...
  std::string target;  // "j-000042", "sim-1", a token id ...
  std::string result;  // "ok" or the status ("permission denied: ...")
  std::string source;  // the caller's address
  std::string prev;
  std::string hash;
};

struct AuditVerdict {
  bool ok = true;
  int64_t entries = 0;
  std::string head;     // hash of the newest entry
  int64_t bad_seq = 0;  // the first entry that does not verify
  std::string reason;
};

class AuditLog {
 public:
  AuditLog(store::Store* store, const Clock* clock) : store_(store), clock_(clock) {}
  // With an archive, the store keeps the newest `keep` entries (and at
  // most kTrimBatch more): every kTrimBatch appends, the older ones move to
  // the archive, so the store does not grow with every call ever made.
  // Verify reads the archived part of the chain first; List reads only the
  // store's.
  AuditLog(store::Store* store, const Clock* clock, store::Archive* archive, int64_t keep)
      : store_(store), clock_(clock), archive_(archive), keep_(keep) {}
  static constexpr int64_t kTrimBatch = 1000;

  // Appends one entry for a call by `who`. `result` is the call's status.
  Status Append(const Principal& who, std::string action, std::string target, const Status& result);

  // The entry Append would write (without seq, time, prev and hash).
  static AuditEntry EntryFor(const Principal& who, std::string action, std::string target, const Status& result);

  // The caller's transaction with `entries` chained onto the log in it: the
  // control loop's group commit carries the entries of the calls it
  // answers, so that a call waits for one durable transaction, not two.
  // `txn` gets the compares that guard the head and the puts of the entries
  // and the new head, and runs them with its own; the log stays locked
  // meanwhile. What `txn` returns is returned; `last_seq` gets the newest
  // entry's number. The caller trims when TrimDue says so. The head is kept
  // in memory after each commit (this log is its only writer while its
  // server leads), so a commit costs no read of it; when the store says the
  // head moved, it is read and `txn` is called once more, with new compares
  // and entries (so `txn` must not keep what an earlier call gave it).
  using Txn = std::function<Result<store::TxnResult>(std::vector<store::Compare>, std::vector<store::Op>)>;
  Result<store::TxnResult> CommitWith(std::vector<AuditEntry> entries, const Txn& txn, int64_t* last_seq = nullptr);
  // Whether `count` entries up to `last_seq` crossed a kTrimBatch mark
  // (and there is an archive to trim into).
  bool TrimDue(int64_t last_seq, int64_t count) const;
  // Entries with time >= since_ns, oldest first, at most `limit` (0: all).
  Result<std::vector<AuditEntry>> List(int64_t since_ns, int64_t limit = 0);
  // Moves the entries older than the newest `keep` to the archive now (it
  // also runs every kTrimBatch appends).
  Status Trim();
  Result<AuditVerdict> Verify();

  // The canonical hash of an entry given its prev (exposed for tests).
  static std::string HashOf(const AuditEntry& e);
  static std::string Key(int64_t seq);
  static std::string ToJson(const AuditEntry& e);
  static Result<AuditEntry> FromJson(const std::string& text);

 private:
  Status TrimLocked(int64_t head_seq) DROVER_REQUIRES(mu_);

  store::Store* store_;
  const Clock* clock_;
  store::Archive* archive_ = nullptr;
  int64_t keep_ = 0;
  Mutex mu_;
  // The head as of this log's last commit: its seq, hash and mod revision
  // (0 when there is none yet). Empty until read, and after a failure.
  struct Head {
    int64_t seq = 0;
    std::string hash;
    int64_t mod_revision = 0;
  };
  std::optional<Head> head_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::auth
