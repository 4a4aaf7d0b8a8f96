// Small file helpers shared by every layer that keeps state in files: the
// server's admin token, the agent's job directories and certificates, the
// CLI's saved login.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "drover/common/status.h"

namespace drover {

// Reads all of `path`, refusing a file larger than `max_bytes`.
Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes = 64 << 10);

// Writes `data` to `path` atomically: a fresh temporary file created with
// `mode` (never one left by someone else), fsync unless `durable` is false
// (state that means nothing after a reboot), rename over `path`.
Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode = 0644, bool durable = true);

// fsyncs `path`: makes one written with durable = false durable later.
Status SyncFile(const std::string& path);

// The bytes the files under `dir` take on disk (their allocated blocks, as
// du counts them), links not followed; what cannot be read counts nothing.
int64_t TreeBytes(const std::string& dir);

// A file descriptor, closed when this goes (-1: none).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace drover
