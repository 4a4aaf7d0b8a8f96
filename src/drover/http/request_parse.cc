#include "drover/http/request_parse.h"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <charconv>

namespace drover::http {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

}  // namespace

Result<std::string> PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i] == '+' ? ' ' : text[i];
      continue;
    }
    unsigned byte = 0;
    const char* hex = text.data() + i + 1;
    if (i + 2 >= text.size() || std::from_chars(hex, hex + 2, byte, 16).ptr != hex + 2) {
      return InvalidArgument("bad percent escape in query '" + std::string(text) + "'");
    }
    out += static_cast<char>(byte);
    i += 2;
  }
  return out;
}

Result<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> result;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    DROVER_ASSIGN_OR_RETURN(std::string key, PercentDecode(pair.substr(0, eq)));
    std::string value;
    if (eq != std::string_view::npos) {
      DROVER_ASSIGN_OR_RETURN(value, PercentDecode(pair.substr(eq + 1)));
    }
    result[std::move(key)] = std::move(value);
  }
  return result;
}

Result<tcp::endpoint> ParseListen(const std::string& listen) {
  std::string host;
  std::string port_text;
  if (listen.starts_with("[")) {
    size_t close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return InvalidArgument("listen address '" + listen + "' is not [host]:port");
    }
    host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    size_t colon = listen.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("listen address '" + listen + "' has no port (want host:port)");
    }
    host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return InvalidArgument("listen address '" + listen + "': write IPv6 hosts as [addr]:port");
    }
  }
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port_text) > 65535) {
    return InvalidArgument("listen address '" + listen + "' has a bad port '" + port_text + "'");
  }
  const auto port = static_cast<uint16_t>(std::stoi(port_text));
  if (host.empty() || host == "*") return tcp::endpoint(net::ip::address_v4::any(), port);
  if (host == "localhost") return tcp::endpoint(net::ip::address_v4::loopback(), port);
  error_code ec;
  net::ip::address address = net::ip::make_address(host, ec);
  if (ec) {
    return InvalidArgument("listen address '" + listen + "': host '" + host + "' is not an IP address or localhost");
  }
  return tcp::endpoint(address, port);
}

}  // namespace drover::http
