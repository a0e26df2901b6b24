// How a long-running process (stoker dispatcher, worker, consume) logs: its default level and the
// line format. See docs/operations.md ("Logs").
//
// Thread safety: call at start-up, after InitLogging and before threads log.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "spdlog/common.h"

namespace stoker {

// Sets the level to `level` unless STOKER_LOG chose one.
void SetDefaultLogLevel(spdlog::level::level_enum level);

// "text" (the default: [time level thread] message) or "json": one JSON object a line,
//   {"time":"2026-12-01T18:00:00.123Z","level":"info","thread":123,"msg":"..."}
// with the time in UTC and the message escaped. InvalidArgument naming the value otherwise.
absl::Status SetLogFormat(std::string_view format);

// `s` as the body of a JSON string: quotes, backslashes and control characters escaped.
std::string JsonEscape(std::string_view s);

}  // namespace stoker
