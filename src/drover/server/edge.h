#pragma once
// Edge: where a request becomes a Principal. Both transports use it: the
// REST handler for browser rules, bearer tokens and dashboard cookies, the
// gRPC services for bearer tokens in metadata. Nothing below the edge
// authenticates again or trusts a name from a body.
//
// Browser rules (docs/security.md), in the order they are checked:
//  1. Host must be an IP literal, "localhost", this machine's hostname or a
//     configured name (--http-host-name): a DNS-rebound page cannot pass.
//  2. A request with an Origin other than the server's own, or with
//     Sec-Fetch-Site cross-site / same-site, is refused.
//  3. POST/PUT/PATCH (and a DELETE with a body) must be application/json: the "simple"
//     cross-origin bodies (text/plain, forms) never reach a handler.
//  4. A dashboard cookie authenticates a state-changing call only with the
//     session's CSRF token in X-CSRF-Token.
//
// Thread-safety: thread-safe.

#include <optional>
#include <string>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/auth/rate_limit.h"
#include "drover/common/clock.h"
#include "drover/http/server.h"

namespace drover::server {

struct SecurityOptions {
  // Extra names the HTTP listener answers to (reverse proxies, DNS names).
  std::vector<std::string> http_host_names;
  // Serve /metrics without a token (for a Prometheus with no credentials).
  bool metrics_public = false;
  // Requests per second and burst, per token and per tenant (429 /
  // RESOURCE_EXHAUSTED beyond): state-changing calls, and reads (cheaper,
  // so their buckets are larger); failed authentications per source address.
  auth::RateLimit per_token{500, 2000};
  auth::RateLimit per_tenant{2000, 5000};
  auth::RateLimit reads_per_token{5000, 20000};
  auth::RateLimit reads_per_tenant{20000, 50000};
  auth::RateLimit failures_per_source{20, 100};
};

constexpr std::string_view kSessionCookie = "drover_session";

class Edge {
 public:
  Edge(auth::Authority* authority, const Clock* clock, SecurityOptions options);

  // The refusal of a request that breaks rules 1-3, or nullopt.
  std::optional<http::Response> BrowserRules(const http::Request& req) const;
  // Bearer token or dashboard cookie (rule 4 for state-changing methods).
  Result<auth::Principal> Authenticate(const http::Request& req) const;
  // A bearer header value ("Bearer drv_..."), for gRPC metadata.
  Result<auth::Principal> AuthenticateBearer(std::string_view authorization, const std::string& source) const;
  // Rate limits: OK, or kResourceExhausted; *retry_after is the hint.
  Status Admit(const auth::Principal& who, bool state_changing, Duration* retry_after);
  // Counts a failed authentication from `source`; false when that source
  // is over its limit (answer 429, do not audit: a flood must not fill the log).
  bool NoteFailure(const std::string& source, Duration* retry_after);

  const SecurityOptions& options() const { return options_; }
  static bool StateChanging(const std::string& method);
  // The value of cookie `name` in a Cookie header, or "".
  static std::string CookieValue(const std::string& header, std::string_view name);
  // The Set-Cookie value for a session.
  static std::string SessionCookie(const std::string& value, bool tls);

 private:
  bool HostAllowed(const std::string& host) const;

  auth::Authority* authority_;
  SecurityOptions options_;
  std::vector<std::string> names_;  // lower-case: localhost, hostname, configured
  auth::RateLimiter per_token_;
  auth::RateLimiter per_tenant_;
  auth::RateLimiter reads_per_token_;
  auth::RateLimiter reads_per_tenant_;
  auth::RateLimiter failures_;
};

// A refusal with the HTTP status of its code and, for 429, Retry-After.
http::Response Refusal(const Status& s, Duration retry_after = Duration(0));

}  // namespace drover::server
