#include "stoker/core/mapped_files.h"

#include <gtest/gtest.h>

#include <vector>

namespace stoker {
namespace {

TEST(MappedFiles, FindsTheFileOfBytesInsideARegisteredMappingOnly) {
  std::vector<uint8_t> a(1000), b(500);  // stand-ins for two mappings
  RegisterMappedFile(a.data(), a.size(), 7, 1, 11);
  RegisterMappedFile(b.data(), b.size(), 8, 1, 12);
  auto found = FindMappedFile(a.data() + 100, 900);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->fd, 7);
  EXPECT_EQ(found->inode, 11u);
  EXPECT_EQ(found->offset, 100u);
  EXPECT_EQ(found->file_size, 1000u);
  found = FindMappedFile(b.data(), 500);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->fd, 8);
  EXPECT_EQ(found->offset, 0u);
  EXPECT_FALSE(FindMappedFile(a.data() + 100, 901));  // runs past the mapping's end
  EXPECT_FALSE(FindMappedFile(b.data() + 500, 1));    // just past it
  const uint8_t other = 0;
  EXPECT_FALSE(FindMappedFile(&other, 1));
  UnregisterMappedFile(a.data());
  EXPECT_FALSE(FindMappedFile(a.data() + 100, 10));
  EXPECT_TRUE(FindMappedFile(b.data() + 10, 10));
  UnregisterMappedFile(b.data());
  EXPECT_FALSE(FindMappedFile(b.data() + 10, 10));
}

}  // namespace
}  // namespace stoker
