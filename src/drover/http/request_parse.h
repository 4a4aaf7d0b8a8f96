#pragma once
// The parts of an HTTP request the server decodes itself (Beast parses the
// rest): the query string of the target, and the listen address of
// StartServer. Pure functions; the server and the fuzz targets call them.

#include <boost/asio/ip/tcp.hpp>

#include <map>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover::http {

// Form-style decoding: "%41" -> "A" and "+" -> " ". A truncated or non-hex
// escape is an error rather than passed through, so handlers never see it.
Result<std::string> PercentDecode(std::string_view text);

// "a=1&b=x%20y&flag" -> {a: "1", b: "x y", flag: ""}; a repeated key keeps the last value.
Result<std::map<std::string, std::string>> ParseQuery(std::string_view query);

// "host:port", "[v6addr]:port", "*:port" or ":port" (every address),
// "localhost:port"; kInvalidArgument naming the address otherwise.
Result<boost::asio::ip::tcp::endpoint> ParseListen(const std::string& listen);

}  // namespace drover::http
