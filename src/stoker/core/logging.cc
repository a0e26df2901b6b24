#include "stoker/core/logging.h"

#include <cstdlib>
#include <mutex>

namespace stoker {

void InitLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* level = std::getenv("STOKER_LOG");
    spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    spdlog::set_pattern("[%H:%M:%S.%e %^%l%$ %t] %v");
  });
}

}  // namespace stoker
