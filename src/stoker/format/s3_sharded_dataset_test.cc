// The same dataset converted to a local folder and to S3 (the Swift test server) reads identically.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "stoker/core/strings.h"
#include "stoker/format/convert.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/testing/s3_server.h"

namespace stoker::format {
namespace {

class S3DatasetTest : public testing::S3ServerTest {};

TEST_F(S3DatasetTest, ConvertedLocallyAndToS3ReadsIdentically) {
  ASSERT_TRUE(s3().CreateBucket("format-test").ok());
  std::string pattern = (std::filesystem::temp_directory_path() / "stoker-s3ds-XXXXXX").string();
  std::string dir = mkdtemp(pattern.data());
  std::mt19937 rng(3);
  for (const char* cls : {"cat", "dog"}) {
    for (int i = 0; i < 40; ++i) {
      std::string bytes(20000 + rng() % 20000, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      std::filesystem::create_directories(StrCat(dir, "/src/", cls));
      std::ofstream(StrCat(dir, "/src/", cls, "/", i, ".jpg"), std::ios::binary) << bytes;
    }
  }
  ConvertOptions options;
  options.shard_bytes = 300 << 10;
  auto local = Convert(dir + "/src", dir + "/out", options);
  ASSERT_TRUE(local.ok()) << local.status();
  auto remote = Convert(dir + "/src", "s3://format-test/datasets/pets", options);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ(local->manifest, remote->manifest);

  auto a = ShardedDataset::Open(dir + "/out");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ShardedDataset::Open("s3://format-test/datasets/pets/");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*a)->size(), 80u);
  ASSERT_EQ((*b)->size(), 80u);
  std::vector<uint64_t> order(80);
  for (uint64_t i = 0; i < 80; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t start = 0; start < order.size(); start += 16) {
    std::vector<uint64_t> batch(order.begin() + start, order.begin() + start + 16);
    auto x = (*a)->ReadSamples(batch);
    auto y = (*b)->ReadSamples(batch);
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    for (size_t j = 0; j < batch.size(); ++j) {
      EXPECT_EQ((*x)[j].key, (*y)[j].key);
      EXPECT_EQ((*x)[j].fields, (*y)[j].fields);
    }
  }
  for (size_t s = 0; s < (*b)->directory().shard_count(); ++s) {
    auto count = VerifyShard((*b)->ShardUrl(s));
    ASSERT_TRUE(count.ok()) << count.status();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace stoker::format
