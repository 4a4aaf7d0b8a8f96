// The HTTP server's view of a connection's bytes (http/server.cc): Beast's
// request_parser with the server's limits (body 1 MiB, header 64 KiB),
// read_header then read as ServeRequests does, requests pipelined on one
// keep-alive connection; then what Dispatch does with a parsed request (the
// target's query through ParseQuery, header names lower-cased, repeated
// fields joined). The same bytes also go to PercentDecode, ParseQuery and
// ParseListen (http/request_parse.cc) directly.
//
// Properties: no parse reads past its input (ASan); a body is within the
// limit; decoding never makes a query longer; errors are kInvalidArgument
// with a message.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cstring>

#include "beast_input.h"
#include "drover/http/request_parse.h"
#include "drover/http/server.h"  // Request (a struct; nothing of the server is linked)
#include "fuzz_util.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using drover::fuzz::AsText;

constexpr size_t kMaxBodyBytes = 1 << 20;       // ServerOptions::max_body_bytes
constexpr uint32_t kMaxHeaderBytes = 64 << 10;  // server.cc kMaxHeaderBytes

std::string ToString(beast::string_view text) { return std::string(text.data(), text.size()); }

void CheckError(const drover::Status& status) {
  FUZZ_CHECK(status.code() == drover::Code::kInvalidArgument && !status.message().empty());
}

void CheckQuery(std::string_view query) {
  auto parsed = drover::http::ParseQuery(query);
  if (!parsed.ok()) {
    CheckError(parsed.status());
    return;
  }
  // Every '%' of the input was an escape, so no more than a third of the
  // input's bytes disappear in decoding.
  size_t decoded = 0;
  for (const auto& [k, v] : *parsed) decoded += k.size() + v.size();
  FUZZ_CHECK(decoded <= query.size());
}

// What Dispatch builds from a parsed request, less the handler.
void Dispatch(const bhttp::request<bhttp::string_body>& message) {
  drover::http::Request request;
  request.method = ToString(message.method_string());
  const std::string_view target(message.target().data(), message.target().size());
  size_t question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) CheckQuery(target.substr(question + 1));
  for (const auto& field : message) {
    std::string name = ToString(field.name_string());
    for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    std::string value = ToString(field.value());
    auto [it, inserted] = request.headers.emplace(std::move(name), value);
    if (!inserted) it->second += ", " + value;
  }
  request.body = message.body();
  FUZZ_CHECK(request.body.size() <= kMaxBodyBytes);
}

void ServeConnection(std::string_view bytes, size_t chunk) {
  drover::fuzz::InputStream stream(bytes, chunk);
  beast::flat_buffer buffer;
  for (int requests = 0; requests < 64; ++requests) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(kMaxBodyBytes);
    parser.header_limit(kMaxHeaderBytes);
    error_code ec;
    bhttp::read_header(stream, buffer, parser, ec);
    if (!ec && !parser.is_done()) bhttp::read(stream, buffer, parser, ec);
    if (ec) return;  // the server answers 400, 413 or 431, or the client left
    FUZZ_CHECK(parser.is_done());
    bhttp::request<bhttp::string_body> request = parser.release();
    const bool keep_alive = request.keep_alive();
    Dispatch(request);
    if (!keep_alive) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte sets the read size: 1..255 bytes, or 0 for 64 KiB.
  const size_t chunk = data[0] == 0 ? 64 << 10 : data[0];
  const std::string_view bytes = AsText(data + 1, size - 1);
  ServeConnection(bytes, chunk);

  CheckQuery(bytes);
  if (auto decoded = drover::http::PercentDecode(bytes); decoded.ok()) FUZZ_CHECK(decoded->size() <= bytes.size());
  if (bytes.size() <= 256) {
    auto endpoint = drover::http::ParseListen(std::string(bytes));
    if (!endpoint.ok()) CheckError(endpoint.status());
  }
  return 0;
}
