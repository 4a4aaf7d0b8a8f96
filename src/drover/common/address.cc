#include "drover/common/address.h"

namespace drover {

std::string HostOf(std::string_view listen) {
  size_t colon = listen.rfind(':');
  return std::string(colon == std::string_view::npos ? listen : listen.substr(0, colon));
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "[::1]" || host.starts_with("127.");
}

}  // namespace drover
