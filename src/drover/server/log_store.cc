#include "drover/server/log_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "drover/common/ids.h"

namespace drover::server {

Result<LogStore> LogStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot create log directory '{}': {}", dir, ec.message()));
  return LogStore(dir);
}

std::string LogStore::LogId(const std::string& job_id, int attempt, int replica) {
  std::string id = replica > 0 ? fmt::format("{}.{}", job_id, replica) : job_id;
  return attempt > 1 ? fmt::format("{}@{}", id, attempt) : id;
}

namespace {

// A positive number without a leading zero, as LogId writes it.
bool LogNumber(std::string_view n) {
  return !n.empty() && n.size() <= 9 && n[0] != '0' &&
         std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<std::string> LogStore::PathFor(const std::string& log_id) const {
  std::string_view id = log_id;
  size_t at = id.find('@');
  if (at != std::string_view::npos && !LogNumber(id.substr(at + 1))) {
    return InvalidArgument(fmt::format("log id '{}' has a malformed attempt", log_id.substr(0, 64)));
  }
  std::string_view job = id.substr(0, at);
  size_t dot = job.find('.');
  if (dot != std::string_view::npos && !LogNumber(job.substr(dot + 1))) {
    return InvalidArgument(fmt::format("log id '{}' has a malformed replica", log_id.substr(0, 64)));
  }
  auto seq = ParseJobId(job.substr(0, dot));
  if (!seq.ok()) return seq.status();
  return fmt::format("{}/{}.log", dir_, log_id);
}

Status LogStore::Write(const std::string& job_id, int64_t offset, const std::string& data) {
  DROVER_ASSIGN_OR_RETURN(std::string path, PathFor(job_id));
  if (offset < 0) return InvalidArgument(fmt::format("log offset {} is negative", offset));
  if (offset >= kMaxJobLogBytes) return Status::Ok();
  size_t len = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(data.size()), kMaxJobLogBytes - offset));
  // A job's output: its owner's only (docs/security.md, "Files").
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("cannot open log '{}': {}", path, std::strerror(errno)));
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, data.data() + done, len - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Unavailable(fmt::format("cannot write log '{}': {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  Notify(job_id);
  return Status::Ok();
}

uint64_t LogStore::Watch(const std::string& job_id, std::function<void()> on_write) {
  std::lock_guard lock(watchers_->mu);
  uint64_t id = watchers_->next++;
  watchers_->by_job.emplace(job_id,
                            std::make_pair(id, std::make_shared<const std::function<void()>>(std::move(on_write))));
  return id;
}

void LogStore::Unwatch(uint64_t id) {
  std::lock_guard lock(watchers_->mu);
  for (auto it = watchers_->by_job.begin(); it != watchers_->by_job.end(); ++it) {
    if (it->second.first == id) {
      watchers_->by_job.erase(it);
      return;
    }
  }
}

void LogStore::Notify(const std::string& log_id) {
  std::string job_id = log_id.substr(0, log_id.find_first_of(".@"));
  std::vector<std::shared_ptr<const std::function<void()>>> calls;
  {
    std::lock_guard lock(watchers_->mu);
    if (watchers_->by_job.empty()) return;
    auto [lo, hi] = watchers_->by_job.equal_range(job_id);
    for (auto it = lo; it != hi; ++it) calls.push_back(it->second.second);
  }
  for (const auto& fn : calls) (*fn)();
}

Result<std::string> LogStore::Read(const std::string& job_id, int64_t offset, int64_t max_bytes) const {
  DROVER_ASSIGN_OR_RETURN(std::string path, PathFor(job_id));
  if (offset < 0) return InvalidArgument(fmt::format("log offset {} is negative", offset));
  if (max_bytes < 0 || max_bytes > kMaxLogReadBytes) {
    return InvalidArgument(fmt::format("log read size {} is outside 0..{}", max_bytes, kMaxLogReadBytes));
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Unavailable(fmt::format("cannot open log '{}': {}", path, std::strerror(errno)));
  }
  std::string out(static_cast<size_t>(max_bytes), '\0');
  ssize_t n;
  do {
    n = ::pread(fd, out.data(), out.size(), offset);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0) return Unavailable(fmt::format("cannot read log '{}': {}", path, std::strerror(err)));
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace drover::server
