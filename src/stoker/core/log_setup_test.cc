#include "stoker/core/log_setup.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(LogSetup, JsonEscapeQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonEscape("job 'a' \"b\" c\\d"), "job 'a' \\\"b\\\" c\\\\d");
  EXPECT_EQ(JsonEscape("x\ny\tz\r\x01"), "x\\ny\\tz\\r\\u0001");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 passes through
}

TEST(LogSetup, RefusesUnknownFormats) {
  EXPECT_TRUE(SetLogFormat("text").ok());
  absl::Status s = SetLogFormat("xml");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'xml' is not text or json"), std::string::npos) << s;
}

}  // namespace
}  // namespace stoker
