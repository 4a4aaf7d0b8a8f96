#pragma once
// What the agent's tests share: a temporary directory per test, and
// reading, writing and waiting on the files a job directory holds.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace drover::agent::test_support {

namespace fs = std::filesystem;

// Generous: a loaded 2-core machine may be slow to start a process.
constexpr auto kDeadline = std::chrono::seconds(20);

// Polls `cond` until it holds or the deadline passes; true when it held.
inline bool PollUntil(const std::function<bool()>& cond) {
  auto until = std::chrono::steady_clock::now() + kDeadline;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void Spit(const std::string& path, const std::string& data) { std::ofstream(path) << data; }

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "drover-job-dir-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A fresh job directory under the test's root.
  std::string MakeDir(const std::string& name) {
    std::string dir = root_ + "/" + name;
    fs::create_directories(dir);
    return dir;
  }

  std::string root_;
};

}  // namespace drover::agent::test_support
