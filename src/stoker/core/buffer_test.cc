#include "stoker/core/buffer.h"

#include <gtest/gtest.h>

#include <cstring>

namespace stoker {
namespace {

TEST(BufferTest, SliceSharesStorageAndOutlivesParent) {
  Buffer slice;
  {
    Buffer whole = Buffer::FromString("hello world");
    slice = whole.Slice(6, 5);
    EXPECT_EQ(slice.data(), whole.data() + 6);
  }
  EXPECT_EQ(slice.view(), "world");
}

TEST(BufferTest, SliceClampsToEnd) {
  Buffer b = Buffer::FromString("abc");
  EXPECT_EQ(b.Slice(1, 100).view(), "bc");
  EXPECT_TRUE(b.Slice(10, 1).empty());
}

TEST(BufferTest, ConcatJoinsParts) {
  Buffer joined = Buffer::Concat({Buffer::Copy("ab"), Buffer::Copy(""), Buffer::Copy("cd")});
  EXPECT_EQ(joined.view(), "abcd");
}

TEST(BufferTest, MutableBufferFinish) {
  MutableBuffer m(4);
  std::memcpy(m.data(), "wxyz", 4);
  m.Truncate(3);
  Buffer b = std::move(m).Finish();
  EXPECT_EQ(b.view(), "wxy");
}

}  // namespace
}  // namespace stoker
