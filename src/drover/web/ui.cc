#include "drover/web/ui.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "drover/common/status.h"
#include "drover/web/assets.h"

namespace drover::web {
namespace {

constexpr std::string_view kPrefix = "/ui";

const Asset* FindAsset(std::string_view path) {
  const auto assets = EmbeddedAssets();
  auto it = std::lower_bound(assets.begin(), assets.end(), path,
                             [](const Asset& a, std::string_view p) { return a.path < p; });
  return it != assets.end() && it->path == path ? &*it : nullptr;
}

// If-None-Match is a list of quoted tags, or "*".
bool EtagMatches(const http::Request& req, std::string_view etag) {
  auto it = req.headers.find("if-none-match");
  if (it == req.headers.end()) return false;
  const std::string_view value = it->second;
  return value == "*" || value.find(etag) != std::string_view::npos;
}

}  // namespace

std::optional<http::Response> ServeUi(const http::Request& req) {
  const std::string_view path = req.path;
  if (path != kPrefix && !path.starts_with("/ui/")) return std::nullopt;
  if (req.method != "GET") {
    http::Response r =
        http::ErrorResponse(Status(Code::kUnimplemented, "method " + req.method + " is not allowed on " + req.path));
    r.status = 405;
    r.headers["Allow"] = "GET";
    return r;
  }
  if (path == kPrefix) {
    http::Response r;
    r.status = 301;
    r.content_type = "text/plain; charset=utf-8";
    r.body = "moved to /ui/\n";
    r.headers["Location"] = "/ui/";
    return r;
  }
  std::string_view name = path.substr(kPrefix.size() + 1);
  if (name.empty()) name = "index.html";
  const Asset* asset = FindAsset(name);
  if (asset == nullptr) {
    return http::ErrorResponse(NotFound("dashboard file '" + std::string(name) + "' not found"));
  }
  http::Response r;
  r.headers["ETag"] = std::string(asset->etag);
  // Hashed names never change content: cache for a year. Everything else
  // (index.html, which names the hashed files) is revalidated on each load.
  r.headers["Cache-Control"] = asset->immutable ? "public, max-age=31536000, immutable" : "no-cache";
  r.headers["X-Content-Type-Options"] = "nosniff";
  if (EtagMatches(req, asset->etag)) {
    r.status = 304;
    r.content_type.clear();
    return r;
  }
  r.content_type = std::string(asset->content_type);
  r.body.assign(reinterpret_cast<const char*>(asset->data), asset->size);
  return r;
}

}  // namespace drover::web
