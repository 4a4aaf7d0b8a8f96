#include "data_dir.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace drover::app {
namespace {

namespace fs = std::filesystem;

// Paths named in warnings; past them, a count.
constexpr size_t kNamedWarnings = 20;

struct Walk {
  std::vector<std::vector<std::string>> job_owned;  // patterns, by path component
  size_t fixed = 0;
};

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  for (const fs::path& part : fs::path(path)) {
    if (!part.empty() && part != "." && part != "/") out.push_back(part.string());
  }
  return out;
}

bool JobOwned(const std::vector<std::string>& rel, const Walk& w) {
  for (const auto& pattern : w.job_owned) {
    if (pattern.size() != rel.size()) continue;
    bool match = true;
    for (size_t i = 0; match && i < rel.size(); ++i) match = pattern[i] == "*" || pattern[i] == rel[i];
    if (match) return true;
  }
  return false;
}

// Clears the group's and others' bits of `path` (as lstat saw it in `st`).
Status Fix(const std::string& path, const struct stat& st, Walk* w) {
  if ((st.st_mode & 077) == 0) return Status::Ok();
  const mode_t mode = st.st_mode & 07700;
  if (::chmod(path.c_str(), mode) != 0) {
    return FailedPrecondition(fmt::format(
        "'{}' is mode {:04o} (readable beyond its owner) and cannot be made {:04o}: {} (it holds a data directory's "
        "state: fix it, or start with another --data-dir)",
        path, st.st_mode & 07777, mode, std::strerror(errno)));
  }
  if (++w->fixed <= kNamedWarnings) {
    spdlog::warn("'{}' was mode {:04o}, open beyond its owner: made {:04o} (a data directory is its owner's only)",
                 path, st.st_mode & 07777, mode);
  }
  return Status::Ok();
}

// Fixes what is in `dir` (already fixed itself: nobody else can change
// its entries meanwhile), depth first; `rel` is its path under the top.
Status FixTree(const std::string& dir, std::vector<std::string>* rel, Walk* w) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string();
    rel->push_back(it->path().filename().string());
    struct stat st {};
    if (!JobOwned(*rel, *w) && ::lstat(path.c_str(), &st) == 0 && !S_ISLNK(st.st_mode)) {
      DROVER_RETURN_IF_ERROR(Fix(path, st, w));
      if (S_ISDIR(st.st_mode)) DROVER_RETURN_IF_ERROR(FixTree(path, rel, w));
    }
    rel->pop_back();
  }
  if (ec) spdlog::warn("cannot read '{}' to check the modes in it: {}", dir, ec.message());
  return Status::Ok();
}

}  // namespace

void UsePrivateUmask() { ::umask(077); }

Status SecureDataDir(const std::string& dir, const std::vector<std::string>& job_owned) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot create the data directory '{}': {}", dir, ec.message()));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return FailedPrecondition(fmt::format("the data directory '{}' is not a directory", dir));
  }
  Walk w;
  for (const std::string& p : job_owned) w.job_owned.push_back(Components(p));
  DROVER_RETURN_IF_ERROR(Fix(dir, st, &w));
  std::vector<std::string> rel;
  DROVER_RETURN_IF_ERROR(FixTree(dir, &rel, &w));
  if (w.fixed > kNamedWarnings) {
    spdlog::warn("{} more paths in '{}' were open beyond their owner: made private", w.fixed - kNamedWarnings, dir);
  }
  return Status::Ok();
}

const std::vector<std::string>& ServerJobOwned() {
  static const std::vector<std::string> kOwned = {"agents/*/jobs/*", "agents/*/checkpoints/*"};
  return kOwned;
}

const std::vector<std::string>& AgentJobOwned() {
  static const std::vector<std::string> kOwned = {"jobs/*", "checkpoints/*"};
  return kOwned;
}

}  // namespace drover::app
