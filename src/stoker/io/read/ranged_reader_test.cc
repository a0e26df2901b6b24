#include "stoker/io/read/ranged_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "stoker/io/memory_store.h"

namespace stoker::io {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

TEST(RangedReaderTest, ReadsRangesInAnyOrder) {
  auto store = std::make_shared<MemoryStore>();
  std::string data = Pattern(10000);
  store->Set("obj", Buffer::Copy(data));
  RangedReader reader(store);
  auto got = reader.ReadRanges("obj", {{500, 10}, {0, 4}, {9990, 100}, {503, 20}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].view(), data.substr(500, 10));
  EXPECT_EQ((*got)[1].view(), data.substr(0, 4));
  EXPECT_EQ((*got)[2].view(), data.substr(9990));
  EXPECT_EQ((*got)[3].view(), data.substr(503, 20));
  auto whole = reader.Read("obj");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->view(), data);
}

}  // namespace
}  // namespace stoker::io
