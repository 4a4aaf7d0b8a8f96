#include "drover/store/sqlite/statement.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace drover::store {
namespace {
constexpr int kBusyTimeoutMs = 5000;

// A database file, and those SQLite keeps beside it, hold every tenant's
// jobs and environments: their owner's only (docs/security.md, "Files").
// SQLite makes a new database 0644 (less the umask) and its -wal, -shm and
// -journal with the database's mode; so the database is made 0600 before
// SQLite opens it, and any of the four found open beyond its owner (left by
// an older version, or by a crash) is closed, with a warning. Paths SQLite
// does not take as files (":memory:", "file:" URIs) are left alone.
Status MakeDatabasePrivate(const std::string& path) {
  if (path.empty() || path == ":memory:" || path.starts_with("file:")) return Status::Ok();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    ::close(fd);  // an empty file is an empty database to SQLite
  } else if (errno != EEXIST) {
    return Unavailable(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
  }
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string file = path + suffix;
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) == 0) continue;
    const mode_t mode = st.st_mode & 07700;
    if (::chmod(file.c_str(), mode) != 0) {
      return Unavailable(fmt::format("'{}' is mode {:04o} and cannot be made {:04o}: {}", file, st.st_mode & 07777,
                                     mode, std::strerror(errno)));
    }
    spdlog::warn("'{}' was mode {:04o}, open beyond its owner: made {:04o}", file, st.st_mode & 07777, mode);
  }
  return Status::Ok();
}

}  // namespace

Code SqliteCode(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM: return Code::kUnavailable;
    default: return Code::kInternal;
  }
}

Status SqliteError(sqlite3* db, int rc, const std::string& what) {
  return {SqliteCode(rc), fmt::format("{}: {}", what, db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc))};
}

Result<bool> Stmt::Step() {
  int rc = bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(sqlite3_db_handle(stmt_), rc, fmt::format("sqlite statement '{}'", sqlite3_sql(stmt_)));
}

std::string Stmt::Blob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), static_cast<size_t>(size));
}

std::string Stmt::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text));
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& path) {
  DROVER_RETURN_IF_ERROR(MakeDatabasePrivate(path));
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status error = SqliteError(db, rc, "open");
    sqlite3_close_v2(db);
    return error;
  }
  std::unique_ptr<Connection> conn(new Connection(db));
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // journal_mode answers with the mode it got; WAL can be refused (e.g. on
  // some network filesystems), and then "acknowledged = durable" needs a look.
  {
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn->Prepare("PRAGMA journal_mode=WAL"));
    DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row || stmt.Text(0) != "wal") return Unavailable("sqlite refused journal_mode=WAL");
  }
  DROVER_RETURN_IF_ERROR(conn->Exec("PRAGMA synchronous=FULL"));
  return conn;
}

Connection::~Connection() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Status Connection::Exec(const std::string& sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string message = error != nullptr ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return {SqliteCode(rc), fmt::format("sqlite '{}': {}", sql.substr(0, 40), message)};
}

Result<Stmt> Connection::Prepare(const std::string& sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return Stmt(it->second);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db_, rc, fmt::format("prepare '{}'", sql));
  statements_.emplace(sql, stmt);
  return Stmt(stmt);
}

}  // namespace drover::store
