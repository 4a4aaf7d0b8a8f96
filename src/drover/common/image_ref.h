#pragma once
// An OCI image reference as `docker pull`, podman and skopeo take it
// (the grammar of github.com/distribution/reference): what `--image REF`
// will name (issue 38). Parsing is strict and bounded: a reference that
// would be read two ways, or that a registry would refuse, is refused here
// with a reason, before anything is stored.
//
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [ domain "/" ] path ( "/" path )*      at most 255 characters, normalised
//   domain     := host [ ":" port ]                      host: DNS labels, "localhost" or "[IPv6]"
//   path       := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
//   tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//   digest     := "sha256:" 64 hex | "sha512:" 128 hex  (lower case)
//
// Normalised as Docker does: a first component without "." or ":" that is
// not "localhost" is a path, not a registry, and the registry is docker.io
// (whose one-component names live under "library/"); no tag and no digest
// means "latest".
//
// Examples:
//   "busybox"                       -> docker.io/library/busybox:latest
//   "vllm/vllm-openai:v0.6.3"       -> docker.io/vllm/vllm-openai:v0.6.3
//   "127.0.0.1:5000/tiny@sha256:…"  -> registry 127.0.0.1:5000, repository tiny, that digest
//   "Busybox", "a//b", "x:y:z"      -> refused, each with why

#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover {

struct ImageRef {
  std::string registry;    // "docker.io", "127.0.0.1:5000", "[::1]:5000"
  std::string repository;  // "library/busybox"
  std::string tag;         // "latest" unless a digest alone was given
  std::string digest;      // "sha256:<hex>", or empty

  // The whole reference, normalised: registry/repository[:tag][@digest].
  std::string String() const;
  // registry/repository: what a store keys an image's name by.
  std::string Name() const;
};

// A name of 255, ":", a tag of 128, "@" and a sha512 digest: the longest
// reference that parses (its normal form included).
inline constexpr size_t kMaxImageRefLength = 255 + 1 + 128 + 1 + 7 + 128;

// kInvalidArgument, naming the reference and what is wrong with it.
Result<ImageRef> ParseImageRef(std::string_view text);

}  // namespace drover
