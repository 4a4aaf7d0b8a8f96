#pragma once
// The web dashboard at /ui: the bundled single-page app (web/src), compiled
// into the binary so that the server needs no files and no network to serve
// it. The page itself talks to the REST API (/api/v1/...) of the same
// listener.
//
// Stateless and thread-safe: the assets are constants.

#include <optional>

#include "drover/http/server.h"

namespace drover::web {

// Serves GET /ui, /ui/ and /ui/<asset>; returns std::nullopt for any other
// path, so the caller can try its own routes.
//   /ui          -> 301 to /ui/ (the page loads its assets relative to it)
//   /ui/         -> index.html, revalidated on every load (ETag)
//   /ui/<asset>  -> the asset; content-hashed names are cached for a year
//   anything else under /ui/ -> 404 JSON error; a method other than GET -> 405
std::optional<http::Response> ServeUi(const http::Request& req);

}  // namespace drover::web
