#pragma once
// A depth limit for JSON from outside, checked before any parser sees it:
// the REST API's bodies (server/rest.cc) and the gateway's (gateway/proxy.cc).

#include <string_view>

#include "drover/common/status.h"

namespace drover {

// How deep a request body may nest objects and arrays. The API's deepest
// message is a handful of levels; a parser handed 500,000 nested `[`
// builds a frame (or a tree node) for each, ~130 bytes of heap per byte of
// body (docs/security.md, "Bounded parsing and default quotas").
inline constexpr int kMaxJsonDepth = 64;

// One pass over `text`, no allocation: kInvalidArgument when its objects
// and arrays nest deeper than `max_depth` (brackets inside strings, escaped
// quotes included, do not count). Run before any parser sees a body, so a
// refused one costs nothing but the scan. Says nothing else about validity:
// the parser does that.
Status CheckJsonDepth(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace drover
