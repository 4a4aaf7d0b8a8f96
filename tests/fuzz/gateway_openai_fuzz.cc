// What the OpenAI-compatible gateway reads from clients and engines
// (src/drover/gateway/openai.cc). The first byte picks the input:
//   even: a client's request body: ParseRequest (the gateway's own scan for
//         the usual body, nlohmann's SAX parser for any other) and
//         ParseDocument;
//   odd:  an engine's answer or SSE stream: FindUsage, and SseFilter fed
//         whole and in pieces (the second byte sets the piece size).
//
// Properties: the scan, when it answers, agrees with the full parser
// (status, the parameter it names, every field); an accepted body has a
// non-empty model and max_tokens >= 0, and parses as a document; SseFilter
// passes on exactly the bytes it was fed (what it passed plus what it
// holds) without strip, gives the same events and usage however the stream
// is cut, and passes on a subset of them with strip.

#include <algorithm>
#include <string>

#include "drover/gateway/openai.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;
namespace gw = drover::gateway;

void Request(std::string_view body) {
  std::string param_fast, param_full, param;
  auto fast = gw::ParseRequestFast(body, &param_fast);
  auto full = gw::ParseRequestFull(body, &param_full);
  if (fast.has_value()) {
    FUZZ_CHECK(fast->ok() == full.ok());
    if (full.ok()) {
      FUZZ_CHECK((*fast)->model == full->model);
      FUZZ_CHECK((*fast)->stream == full->stream);
      FUZZ_CHECK((*fast)->include_usage == full->include_usage);
      FUZZ_CHECK((*fast)->user == full->user);
      FUZZ_CHECK((*fast)->max_tokens == full->max_tokens);
    } else {
      FUZZ_CHECK(fast->status().code() == full.status().code());
      FUZZ_CHECK(param_fast == param_full);
    }
  }
  auto r = gw::ParseRequest(body, &param);
  FUZZ_CHECK(r.ok() == full.ok());
  if (!r.ok()) {
    FUZZ_CHECK(r.status().code() == drover::Code::kInvalidArgument);
    FUZZ_CHECK(!r.status().message().empty());
    return;
  }
  FUZZ_CHECK(!r->model.empty());
  FUZZ_CHECK(r->max_tokens >= 0);
  FUZZ_CHECK(gw::ParseDocument(body, &*r).ok());
}

void Answer(std::string_view text, size_t piece) {
  (void)gw::FindUsage(text);
  gw::SseFilter whole(false);
  std::string whole_out;
  whole.Feed(text, &whole_out);
  std::string held = whole_out;
  FUZZ_CHECK(whole.pending() <= text.size());
  held.append(text.substr(text.size() - whole.pending()));
  FUZZ_CHECK(held == text);

  gw::SseFilter cut(false);
  gw::SseFilter strip(true);
  std::string cut_out, strip_out;
  for (size_t at = 0; at < text.size(); at += piece) {
    std::string_view p = text.substr(at, piece);
    cut.Feed(p, &cut_out);
    strip.Feed(p, &strip_out);
  }
  FUZZ_CHECK(cut_out == whole_out);
  FUZZ_CHECK(cut.pending() == whole.pending());
  FUZZ_CHECK(cut.saw_done() == whole.saw_done());
  FUZZ_CHECK(cut.usage().found == whole.usage().found);
  FUZZ_CHECK(cut.usage().prompt_tokens == whole.usage().prompt_tokens);
  FUZZ_CHECK(cut.usage().completion_tokens == whole.usage().completion_tokens);
  FUZZ_CHECK(strip_out.size() <= cut_out.size());
  size_t events = 0;
  gw::ForEachData(cut_out, [&](std::string_view payload) {
    FUZZ_CHECK(payload.size() <= cut_out.size());
    ++events;
  });
  (void)events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view text = AsText(data + 2, size - 2);
  if (data[0] % 2 == 0) {
    Request(text);
  } else {
    Answer(text, std::max<size_t>(1, data[1] % 64));
  }
  return 0;
}
