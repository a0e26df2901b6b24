#include "stoker/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

namespace stoker {

void InitLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    // spdlog's default logger writes to stdout, which carries data (stoker consume --print-keys,
    // stoker cat): logs go to stderr.
    spdlog::set_default_logger(spdlog::stderr_color_mt("stoker"));
    const char* level = std::getenv("STOKER_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    spdlog::set_pattern("[%H:%M:%S.%e %^%l%$ %t] %v");
  });
}

}  // namespace stoker
