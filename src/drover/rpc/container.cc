#include "drover/rpc/container.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>

#include "drover/common/image_ref.h"

namespace drover::rpc {
namespace {

// What a printable excerpt of untrusted text looks like in an error.
std::string Excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 128)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 128 ? out + "..." : out;
}

// Where a container's own kernel interfaces live: the runtime mounts them,
// and a bind over them would hide or replace them.
constexpr std::string_view kReservedTargets[] = {"/proc", "/sys", "/dev"};

Status CheckPath(std::string_view what, std::string_view path) {
  if (path.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  if (path.size() > kMaxMountPathBytes) {
    return InvalidArgument(fmt::format("{} is {} bytes, more than {}", what, path.size(), kMaxMountPathBytes));
  }
  if (!IsNormalAbsolutePath(path)) {
    return InvalidArgument(
        fmt::format("{} '{}' is not a normal absolute path (it must start with '/' and hold no '//', '.' or '..' "
                    "and no trailing '/')",
                    what, Excerpt(path)));
  }
  return Status::Ok();
}

}  // namespace

bool IsNormalAbsolutePath(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path == "/") return true;
  if (path.back() == '/') return false;
  size_t i = 1;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      if (c == '\0') return false;
    }
    i = j + 1;
  }
  return true;
}

bool PathUnder(std::string_view path, std::string_view root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.starts_with(root) && path[root.size()] == '/');
}

Status ValidatePullPolicy(std::string_view what, std::string_view policy) {
  if (policy.empty() || policy == "if-not-present" || policy == "always") return Status::Ok();
  return InvalidArgument(fmt::format("{} '{}' is unknown (use if-not-present or always)", what, Excerpt(policy)));
}

Status ValidateContainer(const v1::ContainerSpec& c) {
  if (c.image().empty()) return InvalidArgument("container image is empty");
  if (auto ref = ParseImageRef(c.image()); !ref.ok()) {
    return InvalidArgument(fmt::format("container image: {}", ref.status().message()));
  }
  DROVER_RETURN_IF_ERROR(ValidatePullPolicy("container pull_policy", c.pull_policy()));
  if (!c.network().empty() && c.network() != "host" && c.network() != "none") {
    return InvalidArgument(fmt::format("container network '{}' is unknown (use host or none)", Excerpt(c.network())));
  }
  if (c.shm_bytes() < 0 || c.shm_bytes() > kMaxShmBytes) {
    return InvalidArgument(
        fmt::format("container shm_bytes {} is outside 0..1TiB (0 means the default)", c.shm_bytes()));
  }
  if (c.disk_bytes() < 0) {
    return InvalidArgument(fmt::format("container disk_bytes {} is negative (0 means the node's default)", c.disk_bytes()));
  }
  if (c.mounts_size() > kMaxMounts) {
    return InvalidArgument(fmt::format("container has {} mounts, more than {}", c.mounts_size(), kMaxMounts));
  }
  std::set<std::string_view> targets;
  for (int i = 0; i < c.mounts_size(); ++i) {
    const v1::Mount& m = c.mounts(i);
    DROVER_RETURN_IF_ERROR(CheckPath(fmt::format("container mount {} source", i), m.source()));
    DROVER_RETURN_IF_ERROR(CheckPath(fmt::format("container mount {} target", i), m.target()));
    if (m.source() == "/") {
      return InvalidArgument(fmt::format("container mount {} source is '/': the node's whole file system", i));
    }
    if (m.target() == "/") {
      return InvalidArgument(fmt::format("container mount {} target is '/': the image's root is not a mount", i));
    }
    for (std::string_view reserved : kReservedTargets) {
      if (PathUnder(m.target(), reserved)) {
        return InvalidArgument(fmt::format("container mount {} target '{}' is under {}, which the runtime provides", i,
                                           Excerpt(m.target()), reserved));
      }
    }
    if (!targets.insert(m.target()).second) {
      return InvalidArgument(fmt::format("container mount {} target '{}' is mounted twice", i, Excerpt(m.target())));
    }
  }
  return Status::Ok();
}

bool IsImageDigest(std::string_view d) {
  size_t hex = d.starts_with("sha256:") ? 64 : d.starts_with("sha512:") ? 128 : 0;
  if (hex == 0 || d.size() != 7 + hex) return false;
  for (char c : d.substr(7)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ValidateNodeImages(std::string_view node, const google::protobuf::RepeatedPtrField<v1::NodeImage>& images) {
  if (images.size() > kMaxNodeImages) {
    return InvalidArgument(
        fmt::format("node '{}' reported {} images, more than {}", node, images.size(), kMaxNodeImages));
  }
  for (int i = 0; i < images.size(); ++i) {
    const v1::NodeImage& im = images[i];
    bool ok = IsImageDigest(im.digest()) && im.size_bytes() >= 0 && im.in_use() >= 0 &&
              im.last_used_unix_nanos() >= 0 && im.references_size() <= kMaxImageReferences &&
              std::all_of(im.references().begin(), im.references().end(),
                          [](const std::string& r) { return !r.empty() && r.size() <= kMaxImageRefLength; });
    if (!ok) return InvalidArgument(fmt::format("node '{}' reported a malformed image at position {}", node, i));
  }
  return Status::Ok();
}

std::vector<std::string> ImageKeys(const google::protobuf::RepeatedPtrField<v1::NodeImage>& images) {
  std::vector<std::string> keys;
  for (const v1::NodeImage& im : images) {
    keys.push_back(im.digest());
    keys.insert(keys.end(), im.references().begin(), im.references().end());
  }
  return keys;
}

Status ValidateMountRoot(std::string_view tenant, std::string_view root) {
  DROVER_RETURN_IF_ERROR(CheckPath(fmt::format("tenant '{}': mount root", tenant), root));
  if (root == "/") {
    return InvalidArgument(
        fmt::format("tenant '{}': mount root '/' would let its jobs mount the node's whole file system", tenant));
  }
  return Status::Ok();
}

}  // namespace drover::rpc
