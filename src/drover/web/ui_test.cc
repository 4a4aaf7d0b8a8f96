#include "drover/web/ui.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "drover/web/assets.h"

namespace drover::web {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

http::Request Get(std::string path) {
  http::Request req;
  req.method = "GET";
  req.path = std::move(path);
  return req;
}

http::Response Serve(const http::Request& req) {
  auto r = ServeUi(req);
  EXPECT_TRUE(r.has_value()) << req.path;
  return r.value_or(http::Response{});
}

// The file index.html names with `attribute="./NAME"` for the given suffix.
std::string Referenced(const std::string& html, const std::string& suffix) {
  std::smatch m;
  const std::regex re("\"\\./([A-Za-z0-9_.-]+\\." + suffix + ")\"");
  return std::regex_search(html, m, re) ? m[1].str() : "";
}

TEST(ServeUi, IgnoresOtherPaths) {
  for (const char* path : {"/", "/api/v1/jobs", "/uix", "/u", "/metrics", "/ui.js"}) {
    EXPECT_FALSE(ServeUi(Get(path)).has_value()) << path;
  }
}

TEST(ServeUi, RedirectsBarePrefixToTrailingSlash) {
  http::Response r = Serve(Get("/ui"));
  EXPECT_EQ(r.status, 301);
  EXPECT_EQ(r.headers["Location"], "/ui/");
}

TEST(ServeUi, ServesIndexAtSlashAndByName) {
  for (const char* path : {"/ui/", "/ui/index.html"}) {
    http::Response r = Serve(Get(path));
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
    EXPECT_THAT(r.body, StartsWith("<!doctype html>"));
    EXPECT_EQ(r.headers["Cache-Control"], "no-cache");
    EXPECT_THAT(r.headers["ETag"], StartsWith("\""));
  }
}

TEST(ServeUi, IndexHasTheContractedTestIds) {
  const std::string html = Serve(Get("/ui/")).body;
  for (const char* id :
       {"tab-overview",       "tab-jobs",        "tab-tenants",    "tab-scheduler",  "view-overview",
        "view-jobs",          "view-tenants",    "view-scheduler", "total-nodes",    "total-gpus",
        "total-healthy-gpus", "metric-select",   "gpu-detail",     "chart-gpu",      "last-update",
        "filter-state",       "filter-tenant",   "submit-form",    "submit-command", "submit-gpus",
        "submit-tenant",      "submit-priority", "submit-button",  "submit-result",  "decisions-per-second",
        "queue-depth",        "chart-queue",     "chart-latency"}) {
    EXPECT_THAT(html, HasSubstr(std::string("data-testid=\"") + id + "\"")) << id;
  }
}

TEST(ServeUi, ServesTheScriptAndStylesheetThatIndexNames) {
  const std::string html = Serve(Get("/ui/")).body;
  const std::string js = Referenced(html, "js");
  const std::string css = Referenced(html, "css");
  ASSERT_FALSE(js.empty()) << "index.html names no script";
  ASSERT_FALSE(css.empty()) << "index.html names no stylesheet";

  http::Response script = Serve(Get("/ui/" + js));
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.content_type, "text/javascript; charset=utf-8");
  EXPECT_THAT(script.headers["Cache-Control"], HasSubstr("immutable"));
  EXPECT_THAT(script.body, HasSubstr("/api/v1/events"));
  EXPECT_THAT(script.body, HasSubstr("__droverStats"));

  http::Response style = Serve(Get("/ui/" + css));
  EXPECT_EQ(style.status, 200);
  EXPECT_EQ(style.content_type, "text/css; charset=utf-8");
  EXPECT_THAT(style.body, HasSubstr(".uplot"));  // uPlot's own stylesheet is bundled
  EXPECT_THAT(style.body, HasSubstr(".gpu-cell"));
}

TEST(ServeUi, NeedsNoNetwork) {
  for (const Asset& asset : EmbeddedAssets()) {
    const std::string body(reinterpret_cast<const char*>(asset.data), asset.size);
    EXPECT_EQ(body.find("https://"), std::string::npos) << asset.path;
    EXPECT_EQ(body.find("src=\"http"), std::string::npos) << asset.path;
    EXPECT_EQ(body.find("href=\"http"), std::string::npos) << asset.path;
  }
}

TEST(ServeUi, UnknownAssetIsNotFoundJson) {
  http::Response r = Serve(Get("/ui/nope.js"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.content_type, "application/json");
  auto body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["code"], 5);
  EXPECT_THAT(body["message"].get<std::string>(), HasSubstr("nope.js"));
}

TEST(ServeUi, PathTricksFindNothing) {
  for (const char* path : {"/ui/../CMakeLists.txt", "/ui//index.html", "/ui/./index.html", "/ui/dist/index.html"}) {
    EXPECT_EQ(Serve(Get(path)).status, 404) << path;
  }
}

TEST(ServeUi, OtherMethodsAreNotAllowed) {
  http::Request req = Get("/ui/");
  req.method = "POST";
  http::Response r = Serve(req);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["Allow"], "GET");
}

TEST(ServeUi, MatchingEtagGivesNotModified) {
  http::Response first = Serve(Get("/ui/"));
  http::Request again = Get("/ui/");
  again.headers["if-none-match"] = first.headers["ETag"];
  http::Response r = Serve(again);
  EXPECT_EQ(r.status, 304);
  EXPECT_TRUE(r.body.empty());

  again.headers["if-none-match"] = "\"something-else\"";
  EXPECT_EQ(Serve(again).status, 200);
}

TEST(EmbeddedAssets, AreSortedUniqueAndTyped) {
  auto assets = EmbeddedAssets();
  ASSERT_GE(assets.size(), 3u);
  for (size_t i = 1; i < assets.size(); ++i) EXPECT_LT(assets[i - 1].path, assets[i].path);
  for (const Asset& a : assets) {
    EXPECT_FALSE(a.content_type.empty()) << a.path;
    EXPECT_GT(a.size, 0u) << a.path;
  }
}

}  // namespace
}  // namespace drover::web
