// The byte-size grammar shared by every flag and environment variable.
#include "stoker/core/byte_size.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(ByteSizeTest, PlainBytes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("123"), 123u);
  EXPECT_EQ(*ParseByteSize("123B"), 123u);
  EXPECT_EQ(*ParseByteSize("18446744073709551615"), UINT64_MAX);
}

TEST(ByteSizeTest, UnitsInAnyCaseAreBinaryMultiples) {
  for (const char* k : {"64K", "64k", "64KB", "64kb", "64KiB", "64kib", "64KIB"}) {
    EXPECT_EQ(*ParseByteSize(k), uint64_t{64} << 10) << k;
  }
  EXPECT_EQ(*ParseByteSize("512M"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("512mib"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("4g"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("4GiB"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("2T"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("2tib"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("16777215T"), uint64_t{16777215} << 40);
}

TEST(ByteSizeTest, RejectsWithTheTextAndTheGrammar) {
  for (const char* bad : {"", "G", "12X", "1.5G", "-1", " 1", "1 G", "1GG", "0x10", "1e9", "K1"}) {
    auto parsed = ParseByteSize(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << parsed.status();
  }
  EXPECT_NE(ParseByteSize("1x").status().message().find("K, M, G or T"), std::string::npos);
}

TEST(ByteSizeTest, RejectsValuesPast64Bits) {
  EXPECT_FALSE(ParseByteSize("18446744073709551616").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("16777216T").ok());
  EXPECT_FALSE(ParseByteSize("17179869184G").ok());
}

}  // namespace
}  // namespace stoker
