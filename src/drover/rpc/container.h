#pragma once
// Containers (docs/containers.md): the checks of a job's ContainerSpec and
// of a tenant's mount roots, as the server makes them before anything is
// stored. Paths are compared lexically: a mount source is the node's path
// as written, so a path that could be read two ways ("a/../b", "a//b",
// "a/") is refused rather than normalised, and a root covers exactly the
// paths that start with it and a '/'.
//
// Thread-safe (pure functions).

#include <string>
#include <string_view>
#include <vector>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/v1/common.pb.h"

namespace drover::rpc {

inline constexpr int kMaxMounts = 32;
inline constexpr int64_t kMaxShmBytes = kTiB;
inline constexpr size_t kMaxMountPathBytes = 4096;
inline constexpr int kMaxMountRoots = 64;

// An absolute path without empty, "." or ".." components and without a
// trailing '/' ("/" itself is normal).
bool IsNormalAbsolutePath(std::string_view path);
// `path` is `root` or lies under it (both normal absolute paths).
bool PathUnder(std::string_view path, std::string_view root);

// "" (if-not-present), "if-not-present" or "always"; `what` names the field.
Status ValidatePullPolicy(std::string_view what, std::string_view policy);

// The image parses (ParseImageRef), pull_policy and network are known,
// shm_bytes is 0..1 TiB, at most kMaxMounts mounts, each source and target
// a normal absolute path, the source not "/", the target not "/" nor
// /proc, /sys or /dev or under them, no target twice. kInvalidArgument
// naming the field.
Status ValidateContainer(const v1::ContainerSpec& container);

// "sha256:" and 64 lower-case hex digits, or "sha512:" and 128: a manifest
// digest as an agent reports it (WorkloadStatus.image_digest).
bool IsImageDigest(std::string_view digest);

// A node's image store as its heartbeat reports it (Heartbeat.images): at
// most kMaxNodeImages images of at most kMaxImageReferences references
// each, each reference at most kMaxImageRefLength characters, each digest
// well formed, no negative size or count.
inline constexpr int kMaxNodeImages = 4096;
inline constexpr int kMaxImageReferences = 64;
Status ValidateNodeImages(std::string_view node, const google::protobuf::RepeatedPtrField<v1::NodeImage>& images);
// What a node's store holds, as the scheduler keys it (JobRequest::image):
// every reference and every digest.
std::vector<std::string> ImageKeys(const google::protobuf::RepeatedPtrField<v1::NodeImage>& images);

// A tenant's mount root: a normal absolute path other than "/".
Status ValidateMountRoot(std::string_view tenant, std::string_view root);

}  // namespace drover::rpc
