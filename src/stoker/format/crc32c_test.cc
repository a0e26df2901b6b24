#include "stoker/format/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace stoker::format::crc32c {
namespace {

TEST(Crc32cTest, KnownValues) {
  // The check value of CRC-32C and the iSCSI test vectors (RFC 3720, B.4).
  EXPECT_EQ(Value("123456789"), 0xe3069283u);
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Value(ascending), 0x46dd794eu);
  EXPECT_EQ(Value(""), 0u);
}

TEST(Crc32cTest, HardwareMatchesPortableAtEveryAlignmentAndLength) {
  std::mt19937 rng(1);
  std::string data((110 << 10) + 16, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  // Lengths around the three-block thresholds of the hardware path (3 x 256, 3 x 4096 bytes) too,
  // from a zero and a non-zero starting CRC.
  for (size_t start = 0; start < 9; ++start) {
    for (size_t length : {0,
                          1,
                          7,
                          8,
                          9,
                          63,
                          64,
                          767,
                          768,
                          769,
                          776,
                          1000,
                          1543,
                          4096,
                          12287,
                          12288,
                          12289,
                          13067,
                          24576 + 768 + 9,
                          100 << 10,
                          (110 << 10) + 7}) {
      for (uint32_t initial : {0u, 0xdeadbeefu}) {
        EXPECT_EQ(Extend(initial, data.data() + start, length),
                  ExtendPortable(initial, data.data() + start, length))
            << start << " " << length << " " << initial;
      }
    }
  }
}

TEST(Crc32cTest, ExtendIsIncremental) {
  std::string a = "hello, ", b = "world";
  EXPECT_EQ(Extend(Value(a), b.data(), b.size()), Value(a + b));
}

TEST(Crc32cTest, MaskRoundTrips) {
  for (uint32_t v : {0u, 1u, 0xe3069283u, 0xffffffffu}) {
    EXPECT_EQ(Unmask(Mask(v)), v);
    EXPECT_NE(Mask(v), v);
  }
}

}  // namespace
}  // namespace stoker::format::crc32c
