#include "drover/gateway/openai.h"

namespace drover::gateway {

std::string ErrorJson(std::string_view message, std::string_view type, std::string_view code,
                      std::string_view param) {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", nullptr},
                      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  if (!param.empty()) e["param"] = param;
  return nlohmann::json{{"error", std::move(e)}}.dump(-1, ' ', false,
                                                      nlohmann::json::error_handler_t::replace);
}

ErrorShape ShapeFor(Code code) {
  switch (code) {
    case Code::kInvalidArgument: return {400, "invalid_request_error", "invalid_request"};
    case Code::kUnauthenticated: return {401, "authentication_error", "invalid_api_key"};
    case Code::kPermissionDenied: return {403, "permission_error", "permission_denied"};
    case Code::kNotFound: return {404, "invalid_request_error", "model_not_found"};
    case Code::kOutOfRange: return {413, "invalid_request_error", "request_too_large"};
    case Code::kResourceExhausted: return {429, "rate_limit_error", "rate_limit_exceeded"};
    case Code::kUnavailable: return {503, "server_error", "model_unavailable"};
    case Code::kDeadlineExceeded: return {504, "server_error", "upstream_timeout"};
    case Code::kAborted: return {502, "server_error", "upstream_error"};
    default: return {500, "server_error", "internal_error"};
  }
}

Result<RequestInfo> ParseRequest(std::string_view body, std::string* bad_param) {
  RequestInfo r;
  r.doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (r.doc.is_discarded()) return InvalidArgument("the request body is not valid JSON");
  if (!r.doc.is_object()) return InvalidArgument("the request body must be a JSON object");
  auto it = r.doc.find("model");
  if (it == r.doc.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    *bad_param = "model";
    return InvalidArgument("you must provide a model parameter (a non-empty string)");
  }
  r.model = it->get<std::string>();
  if (auto s = r.doc.find("stream"); s != r.doc.end() && !s->is_null()) {
    if (!s->is_boolean()) {
      *bad_param = "stream";
      return InvalidArgument("'stream' must be a boolean");
    }
    r.stream = s->get<bool>();
  }
  if (auto so = r.doc.find("stream_options"); so != r.doc.end() && so->is_object()) {
    auto iu = so->find("include_usage");
    r.include_usage = iu != so->end() && iu->is_boolean() && iu->get<bool>();
  }
  if (auto u = r.doc.find("user"); u != r.doc.end() && u->is_string()) r.user = u->get<std::string>();
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (auto m = r.doc.find(f); m != r.doc.end()) {
      if (!m->is_number_integer() || m->get<int64_t>() < 0) {
        *bad_param = f;
        return InvalidArgument(std::string("'") + f + "' must be a non-negative integer");
      }
      r.max_tokens = m->get<int64_t>();
    }
  }
  return r;
}

namespace {
// The end of the JSON value starting at s[i] ('{'), strings skipped; npos if cut.
size_t ObjectEnd(std::string_view s, size_t i) {
  int depth = 0;
  bool in_str = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}
}  // namespace

Usage FindUsage(std::string_view text) {
  Usage u;
  size_t at = text.rfind("\"usage\"");
  if (at == std::string_view::npos) return u;
  size_t i = at + 7;
  while (i < text.size() && (text[i] == ' ' || text[i] == ':' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
  if (i >= text.size() || text[i] != '{') return u;
  size_t end = ObjectEnd(text, i);
  if (end == std::string_view::npos) return u;
  auto j = nlohmann::json::parse(text.substr(i, end - i), nullptr, false);
  if (!j.is_object()) return u;
  auto num = [&](const char* k) -> int64_t {
    auto it = j.find(k);
    return it != j.end() && it->is_number_integer() ? std::max<int64_t>(0, it->get<int64_t>()) : 0;
  };
  u.prompt_tokens = num("prompt_tokens");
  u.completion_tokens = num("completion_tokens");
  u.found = true;
  return u;
}

void SseFilter::Feed(std::string_view in, std::string* out) {
  // Fast path: nothing pending, split `in` directly.
  std::string_view buf = in;
  if (!pending_.empty()) {
    pending_.append(in);
    buf = pending_;
  }
  size_t start = 0;
  for (;;) {
    size_t sep = buf.find("\n\n", start);
    size_t len = 2;
    size_t crlf = buf.find("\r\n\r\n", start);
    if (crlf != std::string_view::npos && (sep == std::string_view::npos || crlf < sep)) {
      sep = crlf;
      len = 4;
    }
    if (sep == std::string_view::npos) break;
    Event(buf.substr(start, sep + len - start), out);
    start = sep + len;
  }
  std::string rest(buf.substr(start));
  pending_ = std::move(rest);
}

void SseFilter::Event(std::string_view ev, std::string* out) {
  if (ev.find("[DONE]") != std::string_view::npos) done_ = true;
  if (ev.find("\"usage\"") != std::string_view::npos) {
    Usage u = FindUsage(ev);
    if (u.found) {
      usage_ = u;
      if (strip_ && (ev.find("\"choices\":[]") != std::string_view::npos ||
                     ev.find("\"choices\": []") != std::string_view::npos)) {
        return;
      }
    }
  }
  out->append(ev);
}

}  // namespace drover::gateway
