#pragma once
// ImageArchive: what an image archive (`docker save`'s docker-archive, or
// an oci-archive as `podman save --format oci-archive` and skopeo write
// it) holds, read from its tar headers without unpacking it: which format
// it is, the images in it and the names they carry, and for an
// oci-archive each image's manifest. The image store (image_store.h) reads
// it before it lets skopeo copy the archive in.
//
// Only a plain tar is read: a compressed archive is refused, saying so
// (`drover images load` decompresses gzip before it uploads). Headers are
// checked (checksum, sizes within the file); names are taken as the
// ustar, GNU long-name and pax records give them.

#include <cstdint>
#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

struct ArchiveImage {
  // The references it carries, normalised (ParseImageRef), in order: a
  // docker-archive's RepoTags, an oci-archive's ref.name annotation when
  // it is a whole reference (a bare tag such as "latest" names nothing).
  std::vector<std::string> names;
  std::string manifest;         // an oci-archive's: the manifest blob, checked against manifest_digest
  std::string manifest_digest;  // an oci-archive's, from index.json
  std::string source_name;      // what skopeo selects it by in this archive ("" when it is the only one)
};

struct ArchiveContents {
  std::string format;  // "docker-archive" or "oci-archive"
  std::vector<ArchiveImage> images;
};

// Reads the archive at `path`; kInvalidArgument saying what is wrong with
// it (not a tar, compressed, no image in it, a malformed list).
Result<ArchiveContents> ReadImageArchive(const std::string& path);

}  // namespace drover::agent
