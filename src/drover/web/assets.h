#pragma once
// The dashboard's files (web/ bundled by scripts/build-web.sh), compiled into
// the binary. The table is generated at build time by embed.cmake into
// <build>/src/drover/web/assets.cc; nothing here is written by hand.
//
// Invariants: paths are unique, relative ("index.html", "app-3F2A.js") and
// sorted; data points at size bytes that live for the whole program.

#include <cstddef>
#include <span>
#include <string_view>

namespace drover::web {

struct Asset {
  std::string_view path;          // relative to /ui/
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted, from the content's SHA-256
  bool immutable;                 // the name carries a content hash
  const unsigned char* data;
  size_t size;
};

std::span<const Asset> EmbeddedAssets();

}  // namespace drover::web
