#include "drover/server/edge.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace drover::server {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

std::string Header(const http::Request& req, const std::string& name) {
  auto it = req.headers.find(name);
  return it == req.headers.end() ? "" : it->second;
}

// "host:port" -> host; "[::1]:8080" -> "[::1]"; lower-case.
std::string HostPart(const std::string& host_header) {
  std::string h = Lower(Trim(host_header));
  if (h.starts_with("[")) {
    size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(0, close + 1);
  }
  size_t colon = h.rfind(':');
  return colon == std::string::npos ? h : h.substr(0, colon);
}

}  // namespace

Edge::Edge(auth::Authority* authority, const Clock* clock, SecurityOptions options)
    : authority_(authority),
      options_(std::move(options)),
      per_token_(options_.per_token, clock),
      per_tenant_(options_.per_tenant, clock),
      reads_per_token_(options_.reads_per_token, clock),
      reads_per_tenant_(options_.reads_per_tenant, clock),
      failures_(options_.failures_per_source, clock) {
  names_.push_back("localhost");
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] != '\0') names_.push_back(Lower(buf));
  for (const std::string& n : options_.http_host_names) names_.push_back(Lower(n));
}

bool Edge::StateChanging(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

bool Edge::HostAllowed(const std::string& host) const {
  if (host.starts_with("[") && host.ends_with("]")) {
    in6_addr a6{};
    return ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6) == 1;
  }
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return true;
  return std::find(names_.begin(), names_.end(), host) != names_.end();
}

std::optional<http::Response> Edge::BrowserRules(const http::Request& req) const {
  const std::string host_header = Header(req, "host");
  if (!host_header.empty() && !HostAllowed(HostPart(host_header))) {
    return Refusal(PermissionDenied(
        fmt::format("host '{}' is not a name of this server (use its address, localhost, or add --http-host-name)",
                    host_header.substr(0, 100))));
  }
  const std::string origin = Header(req, "origin");
  if (!origin.empty()) {
    std::string own = std::string(req.tls ? "https://" : "http://") + Lower(Trim(host_header));
    if (host_header.empty() || Lower(Trim(origin)) != own) {
      return Refusal(PermissionDenied(fmt::format("cross-origin request from '{}' refused", origin.substr(0, 100))));
    }
  }
  const std::string site = Lower(Trim(Header(req, "sec-fetch-site")));
  if (site == "cross-site" || site == "same-site") {
    return Refusal(PermissionDenied(fmt::format("{} request refused", site)));
  }
  // A DELETE cannot be sent cross-origin without a preflight; with no body
  // it has nothing to type.
  if (StateChanging(req.method) && !(req.method == "DELETE" && req.body.empty())) {
    std::string type = Header(req, "content-type");
    std::string media = Lower(Trim(type.substr(0, type.find(';'))));
    if (media != "application/json") {
      http::Response r = Refusal(InvalidArgument(fmt::format("{} needs Content-Type: application/json, got '{}'",
                                                             req.method, type.empty() ? "none" : type.substr(0, 100))));
      r.status = 415;
      return r;
    }
  }
  return std::nullopt;
}

Result<auth::Principal> Edge::AuthenticateBearer(std::string_view authorization, const std::string& source) const {
  std::string value = Trim(authorization);
  if (value.size() < 7 || Lower(value.substr(0, 7)) != "bearer ") {
    return Unauthenticated("the authorization header is not 'Bearer <token>'");
  }
  DROVER_ASSIGN_OR_RETURN(auth::Principal p, authority_->Authenticate(Trim(value.substr(7))));
  p.source = source;
  return p;
}

Result<auth::Principal> Edge::Authenticate(const http::Request& req) const {
  const std::string authorization = Header(req, "authorization");
  if (!authorization.empty()) return AuthenticateBearer(authorization, req.remote);
  std::string cookie = CookieValue(Header(req, "cookie"), kSessionCookie);
  if (cookie.empty()) {
    return Unauthenticated("this call needs a token: send 'Authorization: Bearer drv_...' or log in to the dashboard");
  }
  DROVER_ASSIGN_OR_RETURN(auth::DashboardSession s, authority_->FindSession(cookie));
  if (StateChanging(req.method) && !auth::ConstantTimeEqual(Header(req, "x-csrf-token"), s.csrf_token)) {
    return PermissionDenied("missing or wrong X-CSRF-Token for this session");
  }
  s.principal.source = req.remote;
  return s.principal;
}

Status Edge::Admit(const auth::Principal& who, bool state_changing, Duration* retry_after) {
  auth::RateLimiter& token = state_changing ? per_token_ : reads_per_token_;
  auth::RateLimiter& tenant = state_changing ? per_tenant_ : reads_per_tenant_;
  Duration wait = token.Take("t:" + who.token_id + "/" + who.name);
  if (wait.count() == 0) wait = tenant.Take(who.tenant);
  *retry_after = wait;
  if (wait.count() == 0) return Status::Ok();
  return ResourceExhausted(fmt::format("rate limit of token '{}' or tenant '{}' exceeded; retry after {:.3f}s",
                                       who.name, who.tenant, std::chrono::duration<double>(wait).count()));
}

bool Edge::NoteFailure(const std::string& source, Duration* retry_after) {
  // The address without its port: one client, many connections.
  std::string key = source.substr(0, source.rfind(':'));
  *retry_after = failures_.Take(key);
  return retry_after->count() == 0;
}

std::string Edge::CookieValue(const std::string& header, std::string_view name) {
  size_t i = 0;
  while (i < header.size()) {
    size_t j = header.find(';', i);
    if (j == std::string::npos) j = header.size();
    std::string pair = Trim(std::string_view(header).substr(i, j - i));
    size_t eq = pair.find('=');
    if (eq != std::string::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
    i = j + 1;
  }
  return "";
}

std::string Edge::SessionCookie(const std::string& value, bool tls) {
  return fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}", kSessionCookie, value,
                     std::chrono::duration_cast<std::chrono::seconds>(auth::Authority::kSessionLifetime).count(),
                     tls ? "; Secure" : "");
}

http::Response Refusal(const Status& s, Duration retry_after) {
  http::Response r = http::ErrorResponse(s);
  if (s.code() == Code::kUnauthenticated) r.headers["WWW-Authenticate"] = "Bearer realm=\"drover\"";
  if (s.code() == Code::kResourceExhausted && retry_after.count() > 0) {
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(retry_after + std::chrono::milliseconds(999)).count();
    r.headers["Retry-After"] = std::to_string(std::max<int64_t>(1, secs));
    r.status = 429;
  }
  return r;
}

}  // namespace drover::server
