#pragma once
// A real SQLite store in a fresh temporary directory, for the auth tests.

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "drover/common/clock.h"
#include "drover/store/sqlite/sqlite_store.h"

namespace drover::auth::testing {

class TempStore {
 public:
  explicit TempStore(Clock* clock) {
    std::string templ = "/tmp/drover-auth-test-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) dir_ = templ;
    auto s = store::OpenSqliteStore(dir_ + "/drover.db", clock);
    if (s.ok()) store_ = std::move(*s);
  }
  ~TempStore() {
    store_.reset();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  store::Store* get() const { return store_.get(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::unique_ptr<store::Store> store_;
};

}  // namespace drover::auth::testing
