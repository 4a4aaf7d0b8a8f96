#pragma once
// Test support: an instant query against a real Prometheus's HTTP API.

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <string>

#include "drover/http/client.h"

namespace drover::testing {

// The result vector of `promql` at `prometheus` (host:port); an empty array
// when it does not answer or the query fails.
inline nlohmann::json PrometheusQuery(const std::string& prometheus, const std::string& promql) {
  std::string target = "/api/v1/query?query=";
  for (char ch : promql) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      target += ch;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(ch));
      target += hex;
    }
  }
  auto r = http::HttpRequest(prometheus, "GET", target);
  if (!r.ok() || r->status != 200) return nlohmann::json::array();
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return nlohmann::json::array();
  return j["data"]["result"];
}

}  // namespace drover::testing
