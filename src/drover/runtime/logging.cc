#include "drover/runtime/logging.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace drover::runtime {

Status InitLogging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return InvalidArgument(
        fmt::format("log level '{}' is unknown (use trace, debug, info, warn, error, critical, off)", level));
  }
  auto logger = spdlog::stderr_color_mt("drover");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%t] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace drover::runtime
