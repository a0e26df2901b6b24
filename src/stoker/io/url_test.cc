#include "stoker/io/url.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace stoker::io {
namespace {

TEST(UrlTest, ParsesEachScheme) {
  auto s3 = ParseUrl("s3://bucket/a/b.bin");
  ASSERT_TRUE(s3.ok());
  EXPECT_EQ(s3->scheme, "s3");
  EXPECT_EQ(s3->bucket, "bucket");
  EXPECT_EQ(s3->key, "a/b.bin");
  EXPECT_EQ(ParseUrl("s3://bucket")->key, "");
  EXPECT_EQ(ParseUrl("http://127.0.0.1:8080/x/y")->bucket, "127.0.0.1:8080");
  EXPECT_EQ(ParseUrl("file:///tmp/x")->key, "tmp/x");
  EXPECT_EQ(ParseUrl("/tmp/dir/")->key, "tmp/dir/");
  EXPECT_EQ(ParseUrl("rel")->key, (std::filesystem::current_path() / "rel").string().substr(1));
}

TEST(UrlTest, RejectsMalformed) {
  EXPECT_EQ(ParseUrl("s3://").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("gs://b/k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("file://relative").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseUrl("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(UrlTest, SameBucketSharesOneStore) {
  auto a = OpenUrl("mem://shared/a");
  auto b = OpenUrl("mem://shared/b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->store.get(), b->store.get());
  EXPECT_NE(a->store.get(), OpenUrl("mem://other/a")->store.get());
}

TEST(UrlTest, Join) {
  EXPECT_EQ(JoinUrl("s3://b/p/", "/x"), "s3://b/p/x");
  EXPECT_EQ(JoinUrl("s3://b/p", "x"), "s3://b/p/x");
}

}  // namespace
}  // namespace stoker::io
