#include "stoker/io/local/local_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace stoker::io {
namespace {

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("stoker-local-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    prefix_ = root_.string().substr(1) + "/";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
  std::string prefix_;  // key of the test folder, ending in '/'
  LocalStore store_{2};
};

TEST_F(LocalStoreTest, WriteIsInvisibleUntilClose) {
  auto writer = store_.OpenWriter(prefix_ + "sub/file");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(Buffer::Copy("hello ")).ok());
  ASSERT_TRUE((*writer)->Append(Buffer::Copy("world")).ok());
  EXPECT_EQ(store_.Stat(prefix_ + "sub/file").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(store_.Read(prefix_ + "sub/file")->view(), "hello world");
  EXPECT_EQ(store_.Read(prefix_ + "sub/file", {6, 5})->view(), "world");
  EXPECT_EQ(store_.Stat(prefix_ + "sub/file")->size, 11u);
}

TEST_F(LocalStoreTest, AbandonedWriterLeavesNothing) {
  {
    auto writer = store_.OpenWriter(prefix_ + "gone");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Buffer::Copy("partial")).ok());
  }
  auto listing = store_.List({prefix_, ""});
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->objects.empty());
}

TEST_F(LocalStoreTest, ListAndErrors) {
  for (const char* name : {"a", "b/1", "b/2", "c"}) {
    ASSERT_TRUE(store_.Put(prefix_ + name, Buffer::Copy(name)).ok());
  }
  auto shallow = store_.List({prefix_, "/"});
  ASSERT_TRUE(shallow.ok());
  ASSERT_EQ(shallow->objects.size(), 2u);
  EXPECT_EQ(shallow->objects[0].key, prefix_ + "a");
  EXPECT_THAT(shallow->common_prefixes, ::testing::ElementsAre(prefix_ + "b/"));
  EXPECT_EQ(store_.List({prefix_, ""})->objects.size(), 4u);
  EXPECT_EQ(store_.List({prefix_ + "b", ""})->objects.size(), 2u);

  auto missing = store_.Read(prefix_ + "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr(root_.string() + "/nope"));
  EXPECT_EQ(store_.Read(prefix_ + "a", {5, 1}).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(store_.Delete(prefix_ + "a").ok());
  ASSERT_TRUE(store_.Delete(prefix_ + "a").ok());
  EXPECT_EQ(store_.Stat(prefix_ + "a").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace stoker::io
