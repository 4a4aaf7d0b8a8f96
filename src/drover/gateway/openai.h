#pragma once
// The OpenAI wire shapes the gateway needs (private): error bodies, the few
// request fields it routes on, `usage` in answers and in SSE streams.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "drover/common/status.h"

namespace drover::gateway {

// {"error":{"message":m,"type":t,"param":null|p,"code":c}}
std::string ErrorJson(std::string_view message, std::string_view type, std::string_view code,
                      std::string_view param = {});

// The HTTP status, OpenAI type and code of a gateway error.
struct ErrorShape {
  int status;
  const char* type;
  const char* code;
};
ErrorShape ShapeFor(Code code);

// The fields of a request body the gateway reads.
struct RequestInfo {
  nlohmann::json doc;  // the parsed body, only after ParseDocument
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage asked by the client
  std::string user;
  int64_t max_tokens = 0;
};
// Errors (InvalidArgument; *bad_param names the field): not JSON, not an
// object, no non-empty string "model", a "stream" that is not a boolean, a
// max_tokens that is not a non-negative integer.
// Reads the fields without building a document: a scan of its own for the
// usual body (printable ASCII, no escapes), nlohmann's SAX parser for any
// other; both give the same answer.
Result<RequestInfo> ParseRequest(std::string_view body, std::string* bad_param);
// ParseRequest's two halves, for tests: the scan (nullopt: it gave up on
// this body) and the full parser.
std::optional<Result<RequestInfo>> ParseRequestFast(std::string_view body, std::string* bad_param);
Result<RequestInfo> ParseRequestFull(std::string_view body, std::string* bad_param);
// Fills info->doc, for the requests the gateway rewrites or merges.
Status ParseDocument(std::string_view body, RequestInfo* info);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  bool found = false;
};
// The last "usage" object of a JSON text (an answer or one SSE event), read
// without parsing the rest: found=false when there is none or it is null.
Usage FindUsage(std::string_view json_text);

// Passes an SSE stream through event by event, unchanged, reading `usage`
// from the events that carry it. With strip_usage_only, an event whose
// data has "choices":[] and a usage (the chunk the gateway asked for with
// stream_options.include_usage on the client's behalf) is not passed on.
// Not thread-safe: one per stream.
class SseFilter {
 public:
  explicit SseFilter(bool strip_usage_only) : strip_(strip_usage_only) {}
  // Appends the complete events of `in` (with what was pending) to *out.
  void Feed(std::string_view in, std::string* out);
  const Usage& usage() const { return usage_; }
  bool saw_done() const { return done_; }
  // Bytes of an incomplete event still held.
  size_t pending() const { return pending_.size(); }
  // An event longer than any an engine sends: the stream is broken (and the
  // filter holds no more than this, plus one read).
  static constexpr size_t kMaxEventBytes = 16 << 20;
  bool overflowed() const { return pending_.size() > kMaxEventBytes; }

 private:
  void Event(std::string_view ev, std::string* out);

  const bool strip_;
  std::string pending_;
  Usage usage_;
  bool done_ = false;
};

// The payloads of the "data:" lines of complete SSE events in `events`
// (as SseFilter passes them on), in order; calls fn(payload) for each.
template <typename Fn>
void ForEachData(std::string_view events, Fn&& fn) {
  size_t pos = 0;
  while (pos < events.size()) {
    size_t end = events.find('\n', pos);
    if (end == std::string_view::npos) end = events.size();
    std::string_view line = events.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 5) == "data:") {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      fn(line);
    }
    pos = end + 1;
  }
}

}  // namespace drover::gateway
