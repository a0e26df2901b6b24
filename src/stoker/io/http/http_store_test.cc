// HttpStore against a real nginx (HttpTestServer, label "http").
#include "stoker/io/http/http_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "stoker/testing/http_server.h"

namespace stoker::io {
namespace {

using ::testing::HasSubstr;

class HttpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::HttpTestServer::Shared();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *server;
    ASSERT_TRUE(server_->WriteFile("dir/data.bin", "0123456789").ok());
    ASSERT_TRUE(server_->WriteFile("dir/sub/x", "x").ok());
    std::string base = server_->url();
    if (base.ends_with("/")) base.pop_back();
    store_ = std::make_unique<HttpStore>(base);
  }

  testing::HttpTestServer* server_ = nullptr;
  std::unique_ptr<HttpStore> store_;
};

TEST_F(HttpStoreTest, StatAndRangedReads) {
  auto info = store_->Stat("dir/data.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 10u);
  EXPECT_FALSE(info->etag.empty());
  EXPECT_EQ(store_->Read("dir/data.bin")->view(), "0123456789");
  EXPECT_EQ(store_->Read("dir/data.bin", {3, 4})->view(), "3456");
  EXPECT_EQ(store_->Read("dir/data.bin", {8, 100})->view(), "89");
}

TEST_F(HttpStoreTest, EmptyRangesAndRangesPastTheEnd) {
  auto at_end = store_->Read("dir/data.bin", {10, 0});
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_TRUE(at_end->empty());
  EXPECT_EQ(store_->Read("dir/data.bin", {11, 0}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store_->Read("dir/data.bin", {20, 5}).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(HttpStoreTest, MissingObjectIsNotFoundNamingTheUrl) {
  auto read = store_->Read("dir/missing");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("/dir/missing"));
  EXPECT_EQ(store_->Read("dir/missing", {0, 0}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HttpStoreTest, ListsNginxJsonListingsAndRefusesWrites) {
  auto shallow = store_->List({"dir/", "/"});
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  ASSERT_EQ(shallow->objects.size(), 1u);
  EXPECT_EQ(shallow->objects[0].key, "dir/data.bin");
  EXPECT_EQ(shallow->objects[0].size, 10u);
  EXPECT_THAT(shallow->common_prefixes, ::testing::ElementsAre("dir/sub/"));
  EXPECT_EQ(store_->List({"dir/", ""})->objects.size(), 2u);
  EXPECT_EQ(store_->OpenWriter("dir/new").status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace stoker::io
