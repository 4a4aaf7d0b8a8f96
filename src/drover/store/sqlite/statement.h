#pragma once
// Small helpers over the SQLite C API for SqliteStore and Archive: error
// mapping, a borrowed prepared statement, and a durable connection.

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store {

// Trouble with the file or its lock may pass (kUnavailable); anything else
// is a bug or a damaged file (kInternal).
Code SqliteCode(int rc);

// "<what>: <sqlite's message>", with the code of SqliteCode. `db` may be
// null, then the message is the generic one for `rc`.
Status SqliteError(sqlite3* db, int rc, const std::string& what);

// A cached prepared statement, borrowed for one use: reset and unbound when
// the borrow ends. Bound strings are not copied (SQLITE_STATIC), so they
// must outlive the borrow. Not thread-safe: used under the store's mutex.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Stmt(Stmt&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)), bind_rc_(other.bind_rc_) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  // A failed bind is reported by the next Step.
  Stmt& Bind(int index, int64_t value) {
    Check(sqlite3_bind_int64(stmt_, index, value));
    return *this;
  }
  Stmt& BindBlob(int index, const std::string& value) {
    // data() is never null, so "" binds a zero-length blob, not NULL.
    Check(sqlite3_bind_blob64(stmt_, index, value.data(), value.size(), nullptr));
    return *this;
  }

  // True while there is a row to read.
  Result<bool> Step();
  // Steps once, for statements that return no rows.
  Status Run() { return Step().status(); }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  std::string Blob(int column) const;
  std::string Text(int column) const;
  // Reads "key, value, create_rev, mod_rev, version, lease" from `first` on.
  KeyValue Kv(int first) const {
    return {Blob(first), Blob(first + 1), Int(first + 2), Int(first + 3), Int(first + 4), Int(first + 5)};
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  sqlite3_stmt* stmt_;
  int bind_rc_ = SQLITE_OK;
};

// One SQLite connection, in WAL mode with synchronous=FULL (a committed
// transaction has been fsync'd), with a cache of prepared statements. Not
// thread-safe: its owner serializes every call.
class Connection {
 public:
  // Opens (creating when missing) the file at `path`. kUnavailable when it
  // cannot be opened or is locked, or when WAL is refused.
  static Result<std::unique_ptr<Connection>> Open(const std::string& path);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  Status Exec(const std::string& sql);
  // A statement from the cache (prepared on first use).
  Result<Stmt> Prepare(const std::string& sql);
  // Rows changed by the last statement.
  int Changes() const { return sqlite3_changes(db_); }
  // Runs `body` (returning Status) between BEGIN IMMEDIATE and COMMIT,
  // rolling back when it or the commit fails.
  template <typename Body>
  Status InTransaction(Body&& body) {
    if (Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    Status s = body();
    if (s.ok()) s = Exec("COMMIT");
    if (!s.ok()) Exec("ROLLBACK").IgnoreError("fails harmlessly when COMMIT already rolled back");
    return s;
  }

 private:
  explicit Connection(sqlite3* db) : db_(db) {}

  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace drover::store
