#include "drover/common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace drover {

Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  std::string text;
  text.resize(max_bytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_bytes) return InvalidArgument(fmt::format("'{}' is larger than {} bytes", path, max_bytes));
  return text;
}

Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode, bool durable) {
  std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return Unavailable(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return Unavailable(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Unavailable(fmt::format("cannot sync '{}': {}", tmp, std::strerror(err)));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Unavailable(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  }
  return Status::Ok();
}

Status SyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Unavailable(fmt::format("cannot sync '{}': {}", path, std::strerror(err)));
  return Status::Ok();
}

int64_t TreeBytes(const std::string& dir) {
  namespace fs = std::filesystem;
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) total += st.st_blocks * 512;
  }
  return total;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace drover
