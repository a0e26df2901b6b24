#include "stoker/io/memory_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stoker::io {
namespace {

using ::testing::ElementsAre;

TEST(MemoryStoreTest, PutStatReadRanges) {
  MemoryStore store;
  ASSERT_TRUE(store.Put("a/b", Buffer::Copy("0123456789")).ok());
  auto info = store.Stat("a/b");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 10u);
  EXPECT_EQ(store.Read("a/b")->view(), "0123456789");
  EXPECT_EQ(store.Read("a/b", {2, 3})->view(), "234");
  EXPECT_EQ(store.Read("a/b", {8, 100})->view(), "89");
  EXPECT_EQ(store.Read("a/b", {10, 0})->view(), "");
  EXPECT_EQ(store.Read("a/b", {11, 1}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store.Read("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(store.Read("missing").status().message()),
              ::testing::HasSubstr("mem://test/missing"));
}

TEST(MemoryStoreTest, IfMatchDetectsChange) {
  MemoryStore store;
  ASSERT_TRUE(store.Put("k", Buffer::Copy("v1")).ok());
  std::string etag = store.Stat("k")->etag;
  ASSERT_TRUE(store.Put("k", Buffer::Copy("v2")).ok());
  absl::StatusOr<Buffer> got;
  store.ReadAsync({"k", {}, etag}, [&](absl::StatusOr<Buffer> r) { got = std::move(r); });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MemoryStoreTest, ListWithDelimiterRollsUpFolders) {
  MemoryStore store;
  for (const char* key : {"d/a", "d/b/1", "d/b/2", "d/c", "e"}) {
    ASSERT_TRUE(store.Put(key, Buffer::Copy("x")).ok());
  }
  auto shallow = store.List({"d/", "/"});
  ASSERT_TRUE(shallow.ok());
  std::vector<std::string> keys;
  for (const auto& o : shallow->objects) keys.push_back(o.key);
  EXPECT_THAT(keys, ElementsAre("d/a", "d/c"));
  EXPECT_THAT(shallow->common_prefixes, ElementsAre("d/b/"));
  auto deep = store.List({"d/", ""});
  EXPECT_EQ(deep->objects.size(), 4u);
  EXPECT_EQ(store.List({"d/", "", 2})->objects.size(), 2u);
}

}  // namespace
}  // namespace stoker::io
