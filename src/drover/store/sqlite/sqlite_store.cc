#include "drover/store/sqlite/sqlite_store.h"
#include "drover/common/mutex.h"

#include <sqlite3.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "drover/store/sqlite/statement.h"
#include "drover/store/sqlite/watch_hub.h"
#include "drover/store/validate.h"

namespace drover::store {
namespace {

constexpr int64_t kSchemaVersion = 1;

// kv holds the current state; history one row per event (what watches
// replay); meta the counters that must survive a restart; leases the live
// leases. Keys are BLOBs so that any bytes work and order is memcmp order,
// the same as std::string's. The UNIQUE key index serves prefix ranges.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta(name, value) VALUES
  ('schema_version', 1), ('revision', 0), ('compacted', 0), ('next_lease', 1);
CREATE TABLE IF NOT EXISTS kv(
  key BLOB NOT NULL PRIMARY KEY, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
  mod_rev INTEGER NOT NULL, version INTEGER NOT NULL, lease INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS kv_by_lease ON kv(lease) WHERE lease != 0;
CREATE TABLE IF NOT EXISTS history(
  revision INTEGER NOT NULL, seq INTEGER NOT NULL, type INTEGER NOT NULL, key BLOB NOT NULL,
  value BLOB NOT NULL, create_rev INTEGER NOT NULL, version INTEGER NOT NULL,
  lease INTEGER NOT NULL, PRIMARY KEY(revision, seq));
CREATE TABLE IF NOT EXISTS leases(
  id INTEGER PRIMARY KEY, ttl_ns INTEGER NOT NULL, deadline_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS leases_by_deadline ON leases(deadline_ns);
)sql";

constexpr const char* kKvColumns = "key, value, create_rev, mod_rev, version, lease";

// "<head> WHERE <column> >= ?1 [AND <column> < ?2] <tail>": an index range,
// never a LIKE scan. Parameter ?2 is bound only when the range has an end.
std::string RangeSql(const std::string& head, const char* column, bool has_end, const char* tail) {
  return fmt::format("{} {} >= ?1{} {}", head, column, has_end ? fmt::format(" AND {} < ?2", column) : "", tail);
}

int64_t SaturatingDeadline(Timestamp now, Duration ttl) {
  int64_t start = ToUnixNanos(now);
  if (start > std::numeric_limits<int64_t>::max() - ttl.count()) return std::numeric_limits<int64_t>::max();
  return start + ttl.count();
}

bool CompareHolds(const Compare& c, const std::optional<KeyValue>& kv) {
  int cmp = 0;
  if (c.target == Compare::Target::kValue) {
    // As in etcd: a value compare on a missing key fails whatever the op.
    if (!kv) return false;
    cmp = kv->value.compare(c.value);
  } else {
    int64_t actual = 0;  // a missing key has version and revisions 0
    if (kv) {
      actual = c.target == Compare::Target::kVersion          ? kv->version
               : c.target == Compare::Target::kCreateRevision ? kv->create_revision
                                                              : kv->mod_revision;
    }
    cmp = actual < c.number ? -1 : actual > c.number ? 1 : 0;
  }
  switch (c.op) {
    case Compare::Op::kEqual: return cmp == 0;
    case Compare::Op::kNotEqual: return cmp != 0;
    case Compare::Op::kLess: return cmp < 0;
    case Compare::Op::kGreater: return cmp > 0;
  }
  return false;
}

// The events of one write transaction, all at `revision`.
struct WriteSet {
  int64_t revision = 0;
  std::vector<Event> events;
};

// ---------------------------------------------------------------------------
// SqliteStore: see sqlite_store.h.
//
// Thread-safety: every public method locks mu_, which guards conn_ (the
// connection and its statement cache); methods named *Locked require it held. Leases that have
// ended are revoked first thing in every public method, each in its own
// revision. Watch callbacks run on hub_'s thread, never under mu_.
class SqliteStore final : public Store {
 public:
  SqliteStore(std::unique_ptr<Connection> conn, Clock* clock)
      : conn_(std::move(conn)), clock_(clock), hub_(std::make_shared<WatchHub>()) {}
  ~SqliteStore() override;

  Status Init();

  Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                        const std::vector<Op>& failure) override;
  Result<RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override;
  Result<std::unique_ptr<WatchHandle>> Watch(const std::string& prefix, int64_t start_revision,
                                             WatchCallback callback) override;
  Status Compact(int64_t revision) override;
  Result<LeaseId> GrantLease(Duration ttl) override;
  Status KeepAlive(LeaseId lease) override;
  Status RevokeLease(LeaseId lease) override;
  Result<int64_t> CurrentRevision() override;

  Result<std::string> Pragma(const std::string& name);

 private:
  Status ExecLocked(const std::string& sql) DROVER_REQUIRES(mu_) { return conn_->Exec(sql); }
  Result<Stmt> PrepareLocked(const std::string& sql) DROVER_REQUIRES(mu_) { return conn_->Prepare(sql); }
  Result<int64_t> ReadMetaLocked(const char* name) DROVER_REQUIRES(mu_);
  Status WriteMetaLocked(const char* name, int64_t value) DROVER_REQUIRES(mu_);

  // Runs `body` in BEGIN IMMEDIATE..COMMIT. When body recorded events they
  // form revision current+1, which is committed and then published to
  // watchers; otherwise the revision stays. Returns the revision after.
  template <typename Body>
  Result<int64_t> WriteTxnLocked(Body&& body) DROVER_REQUIRES(mu_);

  Result<std::optional<KeyValue>> LookupLocked(const std::string& key) DROVER_REQUIRES(mu_);
  Status PutLocked(WriteSet& ws, const Op& op) DROVER_REQUIRES(mu_);
  Status DeleteLocked(WriteSet& ws, const std::string& key) DROVER_REQUIRES(mu_);
  Status DeletePrefixLocked(WriteSet& ws, const std::string& prefix) DROVER_REQUIRES(mu_);
  Status AppendHistoryLocked(WriteSet& ws, Event event) DROVER_REQUIRES(mu_);
  // Deletes the lease and its keys; false when there is no such lease.
  Result<bool> RevokeInTxnLocked(WriteSet& ws, LeaseId lease) DROVER_REQUIRES(mu_);
  Status ExpireLeasesLocked() DROVER_REQUIRES(mu_);

  Mutex mu_;
  std::unique_ptr<Connection> conn_ DROVER_GUARDED_BY(mu_);
  Clock* const clock_;
  const std::shared_ptr<WatchHub> hub_;
};

SqliteStore::~SqliteStore() { hub_->Stop(); }

Result<int64_t> SqliteStore::ReadMetaLocked(const char* name) {
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked(fmt::format("SELECT value FROM meta WHERE name = '{}'", name)));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Internal(fmt::format("store meta row '{}' is missing", name));
  return stmt.Int(0);
}

Status SqliteStore::WriteMetaLocked(const char* name, int64_t value) {
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked(fmt::format("UPDATE meta SET value = ?1 WHERE name = '{}'", name)));
  return stmt.Bind(1, value).Run();
}

Status SqliteStore::Init() {
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExecLocked("BEGIN IMMEDIATE"));
  Status status = ExecLocked(kSchema);
  Result<int64_t> version = status.ok() ? ReadMetaLocked("schema_version") : Result<int64_t>(status);
  if (version.ok() && *version != kSchemaVersion) {
    version =
        FailedPrecondition(fmt::format("store schema version {} is not the supported {}", *version, kSchemaVersion));
  }
  if (!version.ok()) {
    ExecLocked("ROLLBACK").IgnoreError("the error that matters is the one returned");
    return version.status();
  }
  return ExecLocked("COMMIT");
}

Result<std::string> SqliteStore::Pragma(const std::string& name) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("PRAGMA " + name));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return NotFound(fmt::format("pragma '{}' returned no row", name));
  return stmt.Text(0);
}

template <typename Body>
Result<int64_t> SqliteStore::WriteTxnLocked(Body&& body) {
  DROVER_RETURN_IF_ERROR(ExecLocked("BEGIN IMMEDIATE"));
  Result<int64_t> current = ReadMetaLocked("revision");
  WriteSet ws;
  Status status = current.status();
  if (status.ok()) {
    ws.revision = *current + 1;
    status = body(ws);
  }
  if (status.ok() && !ws.events.empty()) status = WriteMetaLocked("revision", ws.revision);
  if (status.ok()) status = ExecLocked("COMMIT");
  if (!status.ok()) {
    ExecLocked("ROLLBACK").IgnoreError("fails harmlessly when COMMIT already rolled back");
    return status;
  }
  if (ws.events.empty()) return *current;
  hub_->Publish({ws.revision, std::move(ws.events)});
  return ws.revision;
}

Result<std::optional<KeyValue>> SqliteStore::LookupLocked(const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked(fmt::format("SELECT {} FROM kv WHERE key = ?1", kKvColumns)));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.BindBlob(1, key).Step());
  if (!row) return std::optional<KeyValue>();
  return std::optional<KeyValue>(stmt.Kv(0));
}

Status SqliteStore::AppendHistoryLocked(WriteSet& ws, Event event) {
  DROVER_ASSIGN_OR_RETURN(
      Stmt stmt, PrepareLocked("INSERT INTO history(revision, seq, type, key, value, create_rev, version, lease) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
  const KeyValue& kv = event.kv;
  DROVER_RETURN_IF_ERROR(stmt.Bind(1, ws.revision)
                             .Bind(2, static_cast<int64_t>(ws.events.size()))
                             .Bind(3, event.type == Event::Type::kPut ? 0 : 1)
                             .BindBlob(4, kv.key)
                             .BindBlob(5, kv.value)
                             .Bind(6, kv.create_revision)
                             .Bind(7, kv.version)
                             .Bind(8, kv.lease)
                             .Run());
  ws.events.push_back(std::move(event));
  return Status::Ok();
}

Status SqliteStore::PutLocked(WriteSet& ws, const Op& op) {
  if (op.lease != 0) {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("SELECT 1 FROM leases WHERE id = ?1"));
    DROVER_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, op.lease).Step());
    if (!found) return NotFound(fmt::format("lease {} for key '{}' not found", op.lease, op.key));
  }
  DROVER_ASSIGN_OR_RETURN(std::optional<KeyValue> old, LookupLocked(op.key));
  KeyValue kv{op.key,  op.value, old ? old->create_revision : ws.revision, ws.revision, old ? old->version + 1 : 1,
              op.lease};
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked(fmt::format(
                                         "INSERT OR REPLACE INTO kv({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", kKvColumns)));
  DROVER_RETURN_IF_ERROR(stmt.BindBlob(1, kv.key)
                             .BindBlob(2, kv.value)
                             .Bind(3, kv.create_revision)
                             .Bind(4, kv.mod_revision)
                             .Bind(5, kv.version)
                             .Bind(6, kv.lease)
                             .Run());
  return AppendHistoryLocked(ws, Event{Event::Type::kPut, std::move(kv)});
}

Status SqliteStore::DeleteLocked(WriteSet& ws, const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("DELETE FROM kv WHERE key = ?1"));
  DROVER_RETURN_IF_ERROR(stmt.BindBlob(1, key).Run());
  if (conn_->Changes() == 0) return Status::Ok();  // deleting a missing key writes nothing
  Event event;
  event.type = Event::Type::kDelete;
  event.kv.key = key;
  event.kv.mod_revision = ws.revision;
  return AppendHistoryLocked(ws, std::move(event));
}

Status SqliteStore::DeletePrefixLocked(WriteSet& ws, const std::string& prefix) {
  std::optional<std::string> end = PrefixEnd(prefix);
  std::vector<std::string> keys;
  {
    DROVER_ASSIGN_OR_RETURN(
        Stmt stmt, PrepareLocked(RangeSql("SELECT key FROM kv WHERE", "key", end.has_value(), "ORDER BY key")));
    stmt.BindBlob(1, prefix);
    if (end) stmt.BindBlob(2, *end);
    while (true) {
      DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      keys.push_back(stmt.Blob(0));
    }
  }
  for (const std::string& key : keys) DROVER_RETURN_IF_ERROR(DeleteLocked(ws, key));
  return Status::Ok();
}

Result<bool> SqliteStore::RevokeInTxnLocked(WriteSet& ws, LeaseId lease) {
  {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("DELETE FROM leases WHERE id = ?1"));
    DROVER_RETURN_IF_ERROR(stmt.Bind(1, lease).Run());
    if (conn_->Changes() == 0) return false;
  }
  std::vector<std::string> keys;
  {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt,
                            PrepareLocked("SELECT key FROM kv WHERE lease = ?1 AND lease != 0 ORDER BY key"));
    stmt.Bind(1, lease);
    while (true) {
      DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      keys.push_back(stmt.Blob(0));
    }
  }
  for (const std::string& key : keys) DROVER_RETURN_IF_ERROR(DeleteLocked(ws, key));
  return true;
}

Status SqliteStore::ExpireLeasesLocked() {
  std::vector<LeaseId> ended;
  {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("SELECT id FROM leases WHERE deadline_ns <= ?1 "
                                                     "ORDER BY deadline_ns, id"));
    stmt.Bind(1, ToUnixNanos(clock_->Now()));
    while (true) {
      DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      ended.push_back(stmt.Int(0));
    }
  }
  for (LeaseId lease : ended) {
    Result<int64_t> revision = WriteTxnLocked([&](WriteSet& ws) {
      mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
      return RevokeInTxnLocked(ws, lease).status();
    });
    DROVER_RETURN_IF_ERROR(revision.status());
  }
  return Status::Ok();
}

Result<TxnResult> SqliteStore::Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                   const std::vector<Op>& failure) {
  DROVER_RETURN_IF_ERROR(ValidateTxn(compares, success, failure));

  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  TxnResult result;
  // Ops run in order, each seeing the ones before it; all writes share ws.revision.
  auto body = [&](WriteSet& ws) -> Status {
    mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
    result.succeeded = true;
    for (const Compare& compare : compares) {
      DROVER_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, LookupLocked(compare.key));
      if (!CompareHolds(compare, kv)) {
        result.succeeded = false;
        break;
      }
    }
    for (const Op& op : result.succeeded ? success : failure) {
      switch (op.kind) {
        case Op::Kind::kPut: DROVER_RETURN_IF_ERROR(PutLocked(ws, op)); break;
        case Op::Kind::kDelete: DROVER_RETURN_IF_ERROR(DeleteLocked(ws, op.key)); break;
        case Op::Kind::kDeletePrefix: DROVER_RETURN_IF_ERROR(DeletePrefixLocked(ws, op.key)); break;
        case Op::Kind::kGet: {
          DROVER_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, LookupLocked(op.key));
          result.gets.push_back(std::move(kv));
          break;
        }
      }
    }
    return Status::Ok();
  };
  DROVER_ASSIGN_OR_RETURN(result.revision, WriteTxnLocked(body));
  return result;
}

Result<RangeResult> SqliteStore::Range(const std::string& prefix, int64_t limit, const std::string& start) {
  DROVER_RETURN_IF_ERROR(ValidatePrefix(prefix));
  DROVER_RETURN_IF_ERROR(ValidatePrefix(start));
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  std::optional<std::string> end = PrefixEnd(prefix);
  RangeResult result;
  {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked(RangeSql(fmt::format("SELECT {} FROM kv WHERE", kKvColumns), "key",
                                                              end.has_value(), "ORDER BY key LIMIT ?3")));
    // One extra row tells whether there is more; -1 is no limit to SQLite.
    bool limited = limit > 0 && limit < std::numeric_limits<int64_t>::max();
    stmt.BindBlob(1, std::max(prefix, start)).Bind(3, limited ? limit + 1 : -1);
    if (end) stmt.BindBlob(2, *end);
    while (true) {
      DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      result.kvs.push_back(stmt.Kv(0));
    }
  }
  if (limit > 0 && std::cmp_greater(result.kvs.size(), limit)) {
    result.kvs.pop_back();
    result.more = true;
  }
  // mu_ keeps writers of this store out, so no BEGIN is needed for a consistent read.
  DROVER_ASSIGN_OR_RETURN(result.revision, ReadMetaLocked("revision"));
  return result;
}

Result<std::unique_ptr<WatchHandle>> SqliteStore::Watch(const std::string& prefix, int64_t start_revision,
                                                        WatchCallback callback) {
  DROVER_RETURN_IF_ERROR(ValidatePrefix(prefix));
  if (start_revision < 0) return InvalidArgument(fmt::format("watch start revision {} is negative", start_revision));
  if (!callback) return InvalidArgument("watch without a callback");

  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  DROVER_ASSIGN_OR_RETURN(int64_t current, ReadMetaLocked("revision"));
  DROVER_ASSIGN_OR_RETURN(int64_t compacted, ReadMetaLocked("compacted"));
  if (start_revision != 0 && start_revision < compacted) {
    return OutOfRange(
        fmt::format("watch from revision {}: history before revision {} is compacted", start_revision, compacted));
  }
  // The whole history is loaded here, under mu_, so that it and the live
  // batches published after it meet exactly at current (see WatchHub).
  std::vector<WatchHub::Batch> history;
  int64_t from = start_revision == 0 ? current + 1 : start_revision;
  if (from <= current) {
    std::optional<std::string> end = PrefixEnd(prefix);
    DROVER_ASSIGN_OR_RETURN(Stmt stmt,
                            PrepareLocked(RangeSql("SELECT revision, type, key, value, create_rev, version, lease "
                                                   "FROM history WHERE revision >= ?3 AND",
                                                   "key", end.has_value(), "ORDER BY revision, seq")));
    stmt.BindBlob(1, prefix).Bind(3, from);
    if (end) stmt.BindBlob(2, *end);
    while (true) {
      DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      int64_t revision = stmt.Int(0);
      if (history.empty() || history.back().revision != revision) history.push_back({revision, {}});
      Event event;
      event.type = stmt.Int(1) == 0 ? Event::Type::kPut : Event::Type::kDelete;
      event.kv = {stmt.Blob(2), stmt.Blob(3), stmt.Int(4), revision, stmt.Int(5), stmt.Int(6)};
      history.back().events.push_back(std::move(event));
    }
  }
  return hub_->Add(prefix, std::max(from, current + 1), std::move(history), std::move(callback));
}

Status SqliteStore::Compact(int64_t revision) {
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  return WriteTxnLocked([&](WriteSet&) -> Status {
           mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
           DROVER_ASSIGN_OR_RETURN(int64_t current, ReadMetaLocked("revision"));
           if (revision > current) {
             return OutOfRange(fmt::format("compact to revision {} beyond the current {}", revision, current));
           }
           DROVER_ASSIGN_OR_RETURN(int64_t compacted, ReadMetaLocked("compacted"));
           if (revision <= compacted) return Status::Ok();
           DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("DELETE FROM history WHERE revision < ?1"));
           DROVER_RETURN_IF_ERROR(stmt.Bind(1, revision).Run());
           return WriteMetaLocked("compacted", revision);
         })
      .status();
}

Result<LeaseId> SqliteStore::GrantLease(Duration ttl) {
  if (ttl.count() <= 0) return InvalidArgument(fmt::format("lease ttl of {} ns is not positive", ttl.count()));
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  LeaseId id = 0;
  // next_lease only grows, so ids are never reused, even after a restart.
  Result<int64_t> written = WriteTxnLocked([&](WriteSet&) -> Status {
    mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
    DROVER_ASSIGN_OR_RETURN(id, ReadMetaLocked("next_lease"));
    DROVER_RETURN_IF_ERROR(WriteMetaLocked("next_lease", id + 1));
    DROVER_ASSIGN_OR_RETURN(Stmt stmt,
                            PrepareLocked("INSERT INTO leases(id, ttl_ns, deadline_ns) VALUES (?1, ?2, ?3)"));
    return stmt.Bind(1, id).Bind(2, ttl.count()).Bind(3, SaturatingDeadline(clock_->Now(), ttl)).Run();
  });
  if (!written.ok()) return written.status();
  return id;
}

Status SqliteStore::KeepAlive(LeaseId lease) {
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  return WriteTxnLocked([&](WriteSet&) -> Status {
           mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
           int64_t ttl_ns = 0;
           {
             DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("SELECT ttl_ns FROM leases WHERE id = ?1"));
             DROVER_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, lease).Step());
             if (!found) return NotFound(fmt::format("lease {} not found", lease));
             ttl_ns = stmt.Int(0);
           }
           DROVER_ASSIGN_OR_RETURN(Stmt stmt, PrepareLocked("UPDATE leases SET deadline_ns = ?2 WHERE id = ?1"));
           return stmt.Bind(1, lease).Bind(2, SaturatingDeadline(clock_->Now(), Duration(ttl_ns))).Run();
         })
      .status();
}

Status SqliteStore::RevokeLease(LeaseId lease) {
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  return WriteTxnLocked([&](WriteSet& ws) -> Status {
           mu_.AssertHeld();  // WriteTxnLocked runs the body under mu_
           DROVER_ASSIGN_OR_RETURN(bool found, RevokeInTxnLocked(ws, lease));
           return found ? Status::Ok() : NotFound(fmt::format("lease {} not found", lease));
         })
      .status();
}

Result<int64_t> SqliteStore::CurrentRevision() {
  MutexLock lock(&mu_);
  DROVER_RETURN_IF_ERROR(ExpireLeasesLocked());
  return ReadMetaLocked("revision");
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path, Clock* clock) {
  if (clock == nullptr) return InvalidArgument("sqlite store needs a clock");
  auto conn = Connection::Open(path);
  if (!conn.ok())
    return Status(conn.status().code(), fmt::format("open store '{}': {}", path, conn.status().message()));
  auto store = std::make_unique<SqliteStore>(std::move(*conn), clock);
  if (Status status = store->Init(); !status.ok()) {
    return Status(status.code(), fmt::format("open store '{}': {}", path, status.message()));
  }
  return std::unique_ptr<Store>(std::move(store));
}

Result<std::string> SqliteStorePragma(Store& store, const std::string& name) {
  auto* sqlite = dynamic_cast<SqliteStore*>(&store);
  if (sqlite == nullptr) return InvalidArgument("not a sqlite store");
  bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!plain) return InvalidArgument(fmt::format("pragma name '{}' is not an identifier", name));
  return sqlite->Pragma(name);
}

}  // namespace drover::store
