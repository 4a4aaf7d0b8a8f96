// ImageStore's loads of archives (NodeService.LoadImage, docs/containers.md):
// an archive the agent fetched is checked against what the server said of
// it, read (image_archive.h) and copied into the store by skopeo, then held
// like a pulled image.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>

#include "drover/agent/image_archive.h"
#include "drover/agent/image_store.h"
#include "drover/agent/image_tools.h"
#include "drover/auth/token.h"
#include "drover/common/ids.h"
#include "drover/common/quantity.h"

namespace drover::agent {

Result<std::string> ImageStore::PrepareArchive(const std::string& load_id, int64_t size) const {
  if (!ValidLoadId(load_id)) {
    return InvalidArgument(fmt::format("'{}' is not an archive's load id", load_id.substr(0, 64)));
  }
  if (size <= 0) return InvalidArgument("the archive is empty");
  // Room for the archive and, unpacked, about as much again.
  struct statvfs st {};
  const std::string dir = opts_.root + "/loads";
  if (::statvfs(dir.c_str(), &st) == 0) {
    const int64_t free = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
    if (size > free / 2) {
      return ResourceExhausted(fmt::format("the archive is {}; the node has {} free for it and its layers",
                                           FormatBytes(size), FormatBytes(free)));
    }
  }
  if (opts_.limit_bytes > 0 && size > opts_.limit_bytes) {
    return ResourceExhausted(fmt::format("the archive is {}, more than the node's image store may hold ({})",
                                         FormatBytes(size), FormatBytes(opts_.limit_bytes)));
  }
  return dir + "/" + load_id + ".tar";
}

void ImageStore::Load(Archive a, Done done) {
  MutexLock lock(&mu_);
  const std::string key = "load " + a.path;
  auto [it, fresh] = pulls_.try_emplace(key);
  it->second.waiters.push_back(std::move(done));
  if (!fresh) return;
  it->second.archive = std::move(a);
  it->second.progress = "waiting to load an archive";
  queue_.push_back(key);
  wake_.SignalAll();
}

Result<StoredImage> ImageStore::RunLoad(const std::string& key, const Archive& a) {
  SetProgress(key, "checking an archive");
  struct stat st {};
  if (::stat(a.path.c_str(), &st) != 0 || st.st_size != a.size_bytes) {
    return InvalidArgument(fmt::format("the archive fetched is {} bytes, not the {} sent", st.st_size, a.size_bytes));
  }
  DROVER_ASSIGN_OR_RETURN(std::string sum, auth::Sha256FileHex(a.path));
  if (sum != a.sha256) return InvalidArgument("the archive fetched does not match the one sent (sha256)");
  DROVER_ASSIGN_OR_RETURN(ArchiveContents contents, ReadImageArchive(a.path));
  // Which image, and the names it is held under.
  std::string wanted;
  if (!a.name.empty()) {
    DROVER_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(a.name));
    if (!ref.digest.empty()) return InvalidArgument(fmt::format("'{}' names a digest; name the image by a tag", a.name));
    wanted = ref.String();
  }
  auto listed = [&] {
    std::vector<std::string> all;
    for (const ArchiveImage& im : contents.images) all.insert(all.end(), im.names.begin(), im.names.end());
    return all.empty() ? std::string("none") : fmt::format("{}", fmt::join(all, ", "));
  };
  const ArchiveImage* chosen = nullptr;
  if (contents.images.size() == 1) {
    chosen = &contents.images[0];
  } else {
    if (wanted.empty()) {
      return InvalidArgument(fmt::format("the archive holds {} images: name the one to load with --name (it names: {})",
                                         contents.images.size(), listed()));
    }
    for (const ArchiveImage& im : contents.images) {
      if (std::find(im.names.begin(), im.names.end(), wanted) != im.names.end()) chosen = &im;
    }
    if (chosen == nullptr || chosen->source_name.empty()) {
      return InvalidArgument(fmt::format("the archive holds {} images and none is named {} (it names: {})",
                                         contents.images.size(), wanted, listed()));
    }
  }
  std::vector<std::string> names = wanted.empty() ? chosen->names : std::vector<std::string>{wanted};
  if (names.empty()) return InvalidArgument("the archive names no image: give it a name with --name");
  if (names.size() > kMaxImageReferences) names.resize(kMaxImageReferences);
  const std::string& name = names.front();
  std::string source = contents.format + ":" + a.path + (chosen->source_name.empty() ? "" : ":" + chosen->source_name);
  // Its manifest: what it promises is checked before a layer is copied.
  std::string raw = chosen->manifest, digest = chosen->manifest_digest;
  if (contents.format == "docker-archive") {
    const std::vector<std::string> inspect = {opts_.skopeo, "--tmpdir", opts_.root + "/tmp", "inspect", "--raw", source};
    DROVER_ASSIGN_OR_RETURN(ToolResult r, RunTool(inspect, StorageEnv()));
    EmptyTmp();
    if (!Exited0(r)) return InvalidArgument(fmt::format("cannot read the archive: {}", LastLine(r.err)));
    if (r.out.size() > kMaxManifestBytes) return InvalidArgument("the archive's manifest is larger than 4 MiB");
    raw = r.out;
    digest = "sha256:" + auth::Sha256Hex(raw);
  }
  DROVER_ASSIGN_OR_RETURN(ManifestInfo m, ParseManifest(raw, opts_.max_layers));
  if (m.is_index) return InvalidArgument("the archive's image is a manifest list: save one platform's image");
  int64_t total = m.config_size;
  for (int64_t size : m.layer_sizes) total += size;
  if (opts_.limit_bytes > 0 && total > opts_.limit_bytes) {
    return ResourceExhausted(fmt::format("{} is {}, more than the node's image store may hold ({})", name,
                                         FormatBytes(total), FormatBytes(opts_.limit_bytes)));
  }
  // A layer of an archive may be compressed (an oci-archive's usually are):
  // the bound on what it unpacks to is a pull's.
  const int64_t unpack_limit = UnpackLimit(std::max(total, a.size_bytes));
  std::vector<std::string> copy = {opts_.skopeo, "--tmpdir", opts_.root + "/tmp", "copy", "--quiet", source,
                                   "containers-storage:" + name};
  DROVER_RETURN_IF_ERROR(CopyIn(key, "load", name, copy, total, unpack_limit,
                                fmt::format("cannot load {}: its copy made no progress for {} s", name,
                                            std::chrono::duration_cast<std::chrono::seconds>(opts_.stall_timeout).count())));
  return Keep(digest, m.config_digest, names, unpack_limit, total);
}

}  // namespace drover::agent
