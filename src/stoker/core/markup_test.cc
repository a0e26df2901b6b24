#include "stoker/core/markup.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(EscapeMarkup, EscapesTheFiveCharactersAndKeepsEverythingElse) {
  EXPECT_EQ(EscapeMarkup(R"(<a href="x">Tom & Jerry's</a>)"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
  EXPECT_EQ(EscapeMarkup("plain, UTF-8 caf\xc3\xa9"), "plain, UTF-8 caf\xc3\xa9");
  EXPECT_EQ(EscapeMarkup(""), "");
  EXPECT_EQ(EscapeMarkup("&amp;"), "&amp;amp;");  // not idempotent: escape once
}

}  // namespace
}  // namespace stoker
