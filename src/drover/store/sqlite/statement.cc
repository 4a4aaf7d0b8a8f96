#include "drover/store/sqlite/statement.h"

#include <fmt/format.h>

namespace drover::store {

Code SqliteCode(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return Code::kUnavailable;
    default:
      return Code::kInternal;
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

}  // namespace drover::store
