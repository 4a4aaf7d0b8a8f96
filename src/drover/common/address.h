#pragma once
// Listen addresses ("host:port", "[::1]:port"): the host part, and whether
// it is loopback (where plain HTTP and unauthenticated metrics may listen).

#include <string>
#include <string_view>

namespace drover {

// "10.0.0.7:8080" -> "10.0.0.7"; "[::1]:80" -> "[::1]"; no port: as given.
std::string HostOf(std::string_view listen);

// 127.0.0.0/8, localhost or [::1].
bool IsLoopbackHost(std::string_view host);

}  // namespace drover
