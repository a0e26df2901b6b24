// Logging goes through spdlog's default logger (stderr). STOKER_LOG=trace|debug|info|warn|error|off
// sets the level (default: warn, so command-line output stays clean). Credentials never reach a
// log.
#pragma once

#include <spdlog/spdlog.h>

namespace stoker {

// Applies STOKER_LOG once; idempotent and thread-safe.
void InitLogging();

}  // namespace stoker
