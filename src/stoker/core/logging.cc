#include "stoker/core/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "stoker/core/log_setup.h"
#include "stoker/core/strings.h"

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

void SetDefaultLogLevel(spdlog::level::level_enum level) {
  if (std::getenv("STOKER_LOG") == nullptr) spdlog::set_level(level);
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  return out;
}

namespace {

// %* in a pattern: the message, escaped for a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string escaped = JsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

absl::Status SetLogFormat(std::string_view format) {
  if (format == "text") return absl::OkStatus();
  if (format != "json")
    return absl::InvalidArgumentError(StrCat("--log-format: '", format, "' is not text or json"));
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<JsonMessageFlag>('*').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","thread":%t,"msg":"%*"})");
  spdlog::set_formatter(std::move(formatter));
  return absl::OkStatus();
}

}  // namespace stoker
