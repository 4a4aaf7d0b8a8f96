#pragma once
// Process-wide logging (spdlog): text to stderr. Level names are spdlog's:
// trace, debug, info, warn, error, critical, off.

#include <spdlog/spdlog.h>

#include <string>

#include "drover/common/status.h"

namespace drover::runtime {

Status InitLogging(const std::string& level);

}  // namespace drover::runtime
