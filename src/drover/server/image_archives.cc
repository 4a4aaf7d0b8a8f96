#include "drover/server/image_archives.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "drover/common/ids.h"
#include "drover/common/quantity.h"

namespace drover::server {

namespace fs = std::filesystem;

ImageArchives::ImageArchives(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  ::chmod(dir_.c_str(), 0700);
  // A crash's uploads: the calls that made them are gone.
  for (const auto& e : fs::directory_iterator(dir_, ec)) fs::remove_all(e.path(), ec);
}

ImageArchives::~ImageArchives() {
  MutexLock lock(&mu_);
  for (auto& [id, u] : uploads_) {
    if (u.fd >= 0) ::close(u.fd);
    ::unlink(u.path.c_str());
  }
}

Result<std::string> ImageArchives::Begin(std::vector<std::string> nodes, int64_t size) {
  if (size <= 0) return InvalidArgument("the archive is empty: size_bytes must be positive");
  if (size > max_bytes_) {
    return ResourceExhausted(fmt::format("the archive is {}, more than this server takes ({}, --max-image-archive)",
                                         FormatBytes(size), FormatBytes(max_bytes_)));
  }
  struct statvfs st {};
  if (::statvfs(dir_.c_str(), &st) == 0) {
    const int64_t free = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
    if (size > free - kKeepFree) {
      return ResourceExhausted(fmt::format("the archive is {}; the server has {} free for it ({} kept free)",
                                           FormatBytes(size), FormatBytes(std::max<int64_t>(free - kKeepFree, 0)),
                                           FormatBytes(kKeepFree)));
    }
  }
  DROVER_ASSIGN_OR_RETURN(std::string id, auth::RandomBase64Url(12));
  MutexLock lock(&mu_);
  if (uploads_.size() >= static_cast<size_t>(kMaxUploads)) {
    return ResourceExhausted(fmt::format("{} image archives are being loaded already; try again when one ends",
                                         uploads_.size()));
  }
  Upload u;
  u.nodes = std::move(nodes);
  u.size = size;
  u.path = dir_ + "/" + id + ".tar";
  u.fd = ::open(u.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (u.fd < 0) return Unavailable(fmt::format("cannot spool the archive to '{}': {}", u.path, std::strerror(errno)));
  u.sum = std::make_unique<auth::Sha256Stream>();
  uploads_.emplace(id, std::move(u));
  return id;
}

Status ImageArchives::Append(const std::string& id, std::string_view data) {
  MutexLock lock(&mu_);
  auto it = uploads_.find(id);
  if (it == uploads_.end() || it->second.sealed) return FailedPrecondition("the upload is not open");
  Upload& u = it->second;
  if (static_cast<int64_t>(data.size()) > u.size - u.got) {
    return InvalidArgument(fmt::format("more bytes came than the header said ({})", u.size));
  }
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(u.fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(fmt::format("cannot spool the archive: {}", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  u.sum->Update(data);
  u.got += static_cast<int64_t>(data.size());
  return Status::Ok();
}

Result<v1::ImageArchive> ImageArchives::Seal(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = uploads_.find(id);
  if (it == uploads_.end() || it->second.sealed) return FailedPrecondition("the upload is not open");
  Upload& u = it->second;
  if (u.got != u.size) {
    return InvalidArgument(fmt::format("the upload ended after {} of the {} bytes its header said", u.got, u.size));
  }
  if (::fsync(u.fd) != 0 || ::close(u.fd) != 0) {
    u.fd = -1;
    return Unavailable(fmt::format("cannot spool the archive: {}", std::strerror(errno)));
  }
  u.fd = -1;
  u.sealed = true;
  v1::ImageArchive a;
  a.set_load_id(id);
  a.set_size_bytes(u.size);
  a.set_sha256(u.sum->Hex());
  return a;
}

Result<std::pair<std::string, int64_t>> ImageArchives::OpenFor(const std::string& id, const std::string& node) const {
  MutexLock lock(&mu_);
  auto it = ValidLoadId(id) ? uploads_.find(id) : uploads_.end();
  if (it == uploads_.end() || !it->second.sealed ||
      std::find(it->second.nodes.begin(), it->second.nodes.end(), node) == it->second.nodes.end() ||
      it->second.answers.contains(node)) {
    return NotFound(fmt::format("no image archive '{}' is being loaded onto node '{}'", id.substr(0, 64), node));
  }
  return std::make_pair(it->second.path, it->second.size);
}

void ImageArchives::Report(const std::string& node, const v1::ImageLoaded& loaded) {
  MutexLock lock(&mu_);
  auto it = uploads_.find(loaded.load_id());
  if (it == uploads_.end() || !it->second.sealed) return;
  Upload& u = it->second;
  if (std::find(u.nodes.begin(), u.nodes.end(), node) == u.nodes.end() || u.answers.contains(node)) return;
  v1::NodeImageLoad& a = u.answers[node];
  a.set_node(node);
  a.set_error(loaded.error().substr(0, 4096));
  if (loaded.error().empty()) *a.mutable_image() = loaded.image();
  answered_.SignalAll();
}

v1::LoadImageResponse ImageArchives::Wait(const std::string& id, std::chrono::system_clock::time_point deadline) {
  MutexLock lock(&mu_);
  auto all = [&]() DROVER_REQUIRES(mu_) {
    auto it = uploads_.find(id);
    return it == uploads_.end() || it->second.answers.size() >= it->second.nodes.size();
  };
  while (!all() && answered_.WaitUntil(&mu_, deadline)) {
  }
  v1::LoadImageResponse resp;
  auto it = uploads_.find(id);
  if (it == uploads_.end()) return resp;
  for (const std::string& n : it->second.nodes) {
    auto a = it->second.answers.find(n);
    if (a != it->second.answers.end()) {
      *resp.add_loads() = a->second;
      continue;
    }
    v1::NodeImageLoad* missing = resp.add_loads();
    missing->set_node(n);
    missing->set_error("the node did not say it had loaded the image in time");
  }
  return resp;
}

void ImageArchives::End(const std::string& id) {
  MutexLock lock(&mu_);
  auto it = uploads_.find(id);
  if (it == uploads_.end()) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  ::unlink(it->second.path.c_str());
  uploads_.erase(it);
}

}  // namespace drover::server
