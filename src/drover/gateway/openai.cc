#include "drover/gateway/openai.h"

#include <climits>

namespace drover::gateway {

std::string ErrorJson(std::string_view message, std::string_view type, std::string_view code, std::string_view param) {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", nullptr},
                      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  if (!param.empty()) e["param"] = param;
  return nlohmann::json{{"error", std::move(e)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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

namespace {

// Reads the routed fields with nlohmann's SAX parser: the whole body is
// checked as JSON, but no document is built (a DOM costs an allocation per
// value; most requests never need one).
class RequestSax {
 public:
  using json = nlohmann::json;
  explicit RequestSax(RequestInfo* r) : r_(r) {}

  bool null() { return Scalar(Kind::kNull, 0, {}); }
  bool boolean(bool v) { return Scalar(Kind::kBool, v ? 1 : 0, {}); }
  bool number_integer(json::number_integer_t v) { return Scalar(Kind::kInt, v, {}); }
  bool number_unsigned(json::number_unsigned_t v) {
    return Scalar(Kind::kInt, v > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v), {});
  }
  bool number_float(json::number_float_t, const json::string_t&) { return Scalar(Kind::kOther, 0, {}); }
  bool string(json::string_t& v) { return Scalar(Kind::kString, 0, v); }
  bool binary(json::binary_t&) { return Scalar(Kind::kOther, 0, {}); }
  bool start_object(std::size_t) {
    if (depth_ == 0) top_is_object_ = true;
    if (depth_ == 1) Scalar(Kind::kOther, 0, {});  // a nested value of a top-level key
    if (depth_ == 1) in_stream_options_ = key_ == "stream_options";
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ <= 1) in_stream_options_ = false;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 1) Scalar(Kind::kOther, 0, {});
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) key_ = k;
    if (depth_ == 2 && in_stream_options_) inner_key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  bool top_is_object() const { return top_is_object_; }
  bool seen_model = false, model_ok = false, stream_ok = true;
  std::string bad_int;

 private:
  enum class Kind { kNull, kBool, kInt, kString, kOther };
  bool Scalar(Kind kind, int64_t n, std::string_view str) {
    if (depth_ == 2 && in_stream_options_ && inner_key_ == "include_usage") {
      r_->include_usage = kind == Kind::kBool && n == 1;
      return true;
    }
    if (depth_ != 1) return true;
    if (key_ == "model") {
      seen_model = true;
      model_ok = kind == Kind::kString && !str.empty();
      if (model_ok) r_->model.assign(str);
    } else if (key_ == "stream") {
      stream_ok = kind == Kind::kBool || kind == Kind::kNull;
      r_->stream = kind == Kind::kBool && n == 1;
    } else if (key_ == "user") {
      if (kind == Kind::kString) r_->user.assign(str);
    } else if (key_ == "max_tokens" || key_ == "max_completion_tokens") {
      if (kind != Kind::kInt || n < 0) {
        if (bad_int.empty()) bad_int = key_;
      } else {
        r_->max_tokens = n;
      }
    }
    return true;
  }

  RequestInfo* r_;
  int depth_ = 0;
  bool top_is_object_ = false;
  bool in_stream_options_ = false;
  std::string key_, inner_key_;
};

// The usual body, read without nlohmann's lexer: JSON whose strings are
// printable ASCII without escapes. It drives the same SAX handler, in the
// same order, so it reads the same fields; on anything else (an escape, any
// other byte in a string, an integer of more than 18 digits, nesting deeper
// than 64, a UTF-8 byte-order mark, any syntax error) it gives up (false)
// and the full parser reads the body again, and words the error.
// Example: {"model":"m","max_tokens":1,"messages":[{"role":"user"}]} is
// start_object, key model, string m, key max_tokens, number_unsigned 1, key
// messages, start_array, start_object, key role, string user, end_object,
// end_array, end_object.
bool FastScan(std::string_view s, RequestSax& sax) {
  const size_t n = s.size();
  size_t i = 0;
  std::string tmp;  // the handler takes strings by reference
  std::string empty;
  bool in_object[64];  // per open container: object (true) or array
  int depth = 0;
  auto ws = [&] {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  };
  auto string = [&]() -> bool {  // at '"': into tmp
    size_t b = ++i;
    while (i < n) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == '"') break;
      if (c < 0x20 || c >= 0x7f || c == '\\') return false;
      ++i;
    }
    if (i >= n) return false;
    tmp.assign(s.substr(b, i - b));
    ++i;
    return true;
  };
  auto key = [&]() -> bool {  // a key and its colon
    ws();
    if (i >= n || s[i] != '"' || !string()) return false;
    sax.key(tmp);
    ws();
    if (i >= n || s[i] != ':') return false;
    ++i;
    return true;
  };
  auto digits = [&] {
    size_t b = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
    return i - b;
  };
  ws();
  if (i >= n || s[i] != '{') return false;
  bool expect_value = true;
  for (;;) {
    ws();
    if (i >= n) return false;
    const char c = s[i];
    if (expect_value) {
      expect_value = false;
      if (c == '{' || c == '[') {
        if (depth == 64) return false;
        ++i;
        in_object[depth++] = c == '{';
        if (c == '{')
          sax.start_object(static_cast<std::size_t>(-1));
        else
          sax.start_array(static_cast<std::size_t>(-1));
        ws();
        if (i < n && s[i] == (c == '{' ? '}' : ']')) continue;  // empty: closed below
        if (c == '{' && !key()) return false;
        expect_value = true;
      } else if (c == '"') {
        if (!string()) return false;
        sax.string(tmp);
      } else if (c == 't' || c == 'f' || c == 'n') {
        const std::string_view word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (s.substr(i, word.size()) != word) return false;
        i += word.size();
        if (c == 'n')
          sax.null();
        else
          sax.boolean(c == 't');
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        const size_t start = i;
        const bool neg = c == '-';
        if (neg) ++i;
        if (i >= n) return false;
        const size_t b = i;
        if (s[i] == '0') {
          ++i;
        } else if (digits() == 0) {
          return false;
        }
        const size_t int_digits = i - b;
        bool fraction = false;
        if (i < n && s[i] == '.') {
          ++i;
          if (digits() == 0) return false;
          fraction = true;
        }
        if (i < n && (s[i] == 'e' || s[i] == 'E')) {
          ++i;
          if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
          const size_t exp_digits = digits();
          // nlohmann refuses a float that overflows a double: leave any
          // that might (more than 2 exponent digits) to it.
          if (exp_digits == 0 || exp_digits > 2) return false;
          fraction = true;
        }
        if (fraction && i - start > 24) return false;  // the same, by length
        if (fraction) {
          sax.number_float(0.0, empty);  // the handler reads no float's value
        } else {
          if (int_digits > 18) return false;
          int64_t v = 0;
          for (size_t k = b; k < b + int_digits; ++k) v = v * 10 + (s[k] - '0');
          if (neg)
            sax.number_integer(-v);
          else
            sax.number_unsigned(static_cast<uint64_t>(v));
        }
      } else {
        return false;
      }
      continue;
    }
    // After a value: a comma, or the end of the open container.
    if (c == ',') {
      ++i;
      if (in_object[depth - 1] && !key()) return false;
      expect_value = true;
      continue;
    }
    if (c != (in_object[depth - 1] ? '}' : ']')) return false;
    ++i;
    if (in_object[--depth])
      sax.end_object();
    else
      sax.end_array();
    if (depth == 0) break;
  }
  ws();
  return i == n;
}

// The checks after either parser.
Result<RequestInfo> Checked(RequestInfo r, const RequestSax& sax, std::string* bad_param) {
  if (!sax.top_is_object()) return InvalidArgument("the request body must be a JSON object");
  if (!sax.seen_model || !sax.model_ok) {
    *bad_param = "model";
    return InvalidArgument("you must provide a model parameter (a non-empty string)");
  }
  if (!sax.stream_ok) {
    *bad_param = "stream";
    return InvalidArgument("'stream' must be a boolean");
  }
  if (!sax.bad_int.empty()) {
    *bad_param = sax.bad_int;
    return InvalidArgument("'" + sax.bad_int + "' must be a non-negative integer");
  }
  return r;
}

}  // namespace

Result<RequestInfo> ParseRequestFull(std::string_view body, std::string* bad_param) {
  RequestInfo r;
  RequestSax sax(&r);
  bool ok = nlohmann::json::sax_parse(body.begin(), body.end(), &sax, nlohmann::json::input_format_t::json, true);
  if (!ok) return InvalidArgument("the request body is not valid JSON");
  return Checked(std::move(r), sax, bad_param);
}

std::optional<Result<RequestInfo>> ParseRequestFast(std::string_view body, std::string* bad_param) {
  RequestInfo r;
  RequestSax sax(&r);
  if (!FastScan(body, sax)) return std::nullopt;
  return Checked(std::move(r), sax, bad_param);
}

Result<RequestInfo> ParseRequest(std::string_view body, std::string* bad_param) {
  if (auto r = ParseRequestFast(body, bad_param)) return std::move(*r);
  return ParseRequestFull(body, bad_param);
}

Status ParseDocument(std::string_view body, RequestInfo* info) {
  info->doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!info->doc.is_object()) return InvalidArgument("the request body must be a JSON object");
  return Status::Ok();
}

namespace {
// The end of the JSON value starting at s[i] ('{'), strings skipped; npos if cut.
size_t ObjectEnd(std::string_view s, size_t i) {
  int depth = 0;
  bool in_str = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (in_str) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '{')
      ++depth;
    else if (c == '}' && --depth == 0)
      return i + 1;
  }
  return std::string_view::npos;
}
}  // namespace

Usage FindUsage(std::string_view text) {
  Usage u;
  size_t at = text.rfind("\"usage\"");
  if (at == std::string_view::npos) return u;
  size_t i = at + 7;
  while (i < text.size() && (text[i] == ' ' || text[i] == ':' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r'))
    ++i;
  if (i >= text.size() || text[i] != '{') return u;
  size_t end = ObjectEnd(text, i);
  if (end == std::string_view::npos) return u;
  // The usage object: flat integers, maybe nested *_details objects, whose
  // keys differ from the two read here.
  std::string_view obj = text.substr(i, end - i);
  auto num = [&](std::string_view key) -> int64_t {
    size_t k = obj.find(key);
    if (k == std::string_view::npos) return 0;
    size_t p = k + key.size();
    while (p < obj.size() && (obj[p] == ' ' || obj[p] == ':')) ++p;
    int64_t v = 0;
    while (p < obj.size() && obj[p] >= '0' && obj[p] <= '9' && v < (INT64_MAX / 10 - 10)) v = v * 10 + (obj[p++] - '0');
    return v;
  };
  u.prompt_tokens = num("\"prompt_tokens\"");
  u.completion_tokens = num("\"completion_tokens\"");
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
