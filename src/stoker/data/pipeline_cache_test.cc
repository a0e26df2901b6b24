// Pipelines on the block cache, against the Swift S3 test server behind the FaultProxy (which
// counts the requests that reach the store): the second epoch of a dataset that fits in the cache
// sends no request to S3, gives the same samples (in its own shuffled order) as a run without the
// cache, and `stoker run` reports the cache's hits and misses.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/format/convert.h"
#include "stoker/testing/fault_proxy.h"
#include "stoker/testing/s3_server.h"
#include "stoker/testing/subprocess.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;

struct Epoch {
  std::vector<std::string> keys;
  std::vector<std::string> bytes;  // "key field=bytes", for comparing sets of samples
};

Epoch RunEpoch(const Pipeline& pipeline, int64_t epoch) {
  Epoch out;
  auto it = pipeline.MakeIterator(epoch, 2);
  while (true) {
    auto e = it->GetNext();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || !e->has_value()) break;
    out.keys.push_back((*e)->FirstKey());
    for (const auto& [name, tensor] : (*e)->fields) {
      out.bytes.push_back(StrCat((*e)->FirstKey(), " ", name, "=", tensor.data.view()));
    }
  }
  std::sort(out.bytes.begin(), out.bytes.end());
  return out;
}

class PipelineCacheTest : public testing::S3ServerTest {
 protected:
  void SetUp() override {
    S3ServerTest::SetUp();
    if (HasFatalFailure()) return;
    if (proxy_ == nullptr) {  // one for the suite: the process keeps one store per bucket
      const std::string& endpoint = s3().endpoint();  // http://127.0.0.1:PORT
      auto proxy = testing::FaultProxy::Start(
          {.upstream_port = std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str())});
      ASSERT_TRUE(proxy.ok()) << proxy.status();
      proxy_ = proxy->release();
    }
    // Everything reaches S3 through the proxy, which counts what reaches the store. (Set before
    // the bucket's store is first opened.)
    setenv("AWS_ENDPOINT_URL", proxy_->endpoint().c_str(), 1);
  }
  void TearDown() override { s3().ExportEnvironment(); }
  static void TearDownTestSuite() {
    delete proxy_;
    proxy_ = nullptr;
  }

  // 3,200 samples of 2.5 KB (8 MB) in shards of 3 MB (several 1 MiB blocks each, so opening the
  // dataset, which reads each shard's last block, does not read it all), converted to
  // s3://pipeline-cache/NAME/.
  void MakeDataset(const std::string& name) {
    static bool created = false;
    if (!created) {
      ASSERT_TRUE(s3().CreateBucket("pipeline-cache").ok());
      created = true;
    }
    std::mt19937 rng(11);
    for (int i = 0; i < 3200; ++i) {
      std::string cls = i % 4 == 0 ? "x" : "y";
      std::filesystem::create_directories(StrCat(dir_.path(), "/src/", cls));
      std::string bytes(2500, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      std::ofstream(StrCat(dir_.path(), "/src/", cls, "/", 1000 + i, ".bin"), std::ios::binary)
          << bytes;
    }
    format::ConvertOptions options;
    options.shard_bytes = 3 << 20;
    auto converted = format::Convert(dir_.path() + "/src", "s3://pipeline-cache/" + name, options);
    ASSERT_TRUE(converted.ok()) << converted.status();
  }

  static testing::FaultProxy* proxy_;
  testing::ScopedTempDir dir_{"stoker-pipeline-cache"};
};
testing::FaultProxy* PipelineCacheTest::proxy_ = nullptr;

TEST_F(PipelineCacheTest, SecondEpochReadsNothingFromTheStore) {
  MakeDataset("in-process");
  json spec = {{"source", {{"dataset", "s3://pipeline-cache/in-process/"}}},
               {"seed", 3},
               {"ops", {{{"op", "shuffle"}}}}};
  auto pipeline = Pipeline::FromJson(spec);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  ASSERT_TRUE((*pipeline)->source_cache_stats().has_value()) << "8 MB fit in the default cache";

  const int64_t before_first = proxy_->requests_seen();
  Epoch first = RunEpoch(**pipeline, 0);
  const int64_t after_first = proxy_->requests_seen();
  Epoch second = RunEpoch(**pipeline, 1);
  const int64_t after_second = proxy_->requests_seen();
  ASSERT_EQ(first.keys.size(), 3200u);
  EXPECT_GT(after_first, before_first);
  EXPECT_EQ(after_second, after_first) << "epoch 2 sent requests to the store";
  EXPECT_NE(second.keys, first.keys);    // reshuffled...
  EXPECT_EQ(second.bytes, first.bytes);  // ...the same samples, byte for byte
  auto stats = (*pipeline)->source_cache_stats();
  EXPECT_GT(stats->misses, 0u);
  EXPECT_GT(stats->hits, stats->misses);

  // Without the cache: the same samples, and every epoch goes to the store.
  json uncached = spec;
  uncached["source"]["cache"] = "off";
  auto plain = Pipeline::FromJson(uncached);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE((*plain)->source_cache_stats().has_value());
  EXPECT_EQ((*plain)->fingerprint(), (*pipeline)->fingerprint());
  const int64_t before_plain = proxy_->requests_seen();
  Epoch third = RunEpoch(**plain, 1);
  EXPECT_EQ(third.keys, second.keys);
  EXPECT_EQ(third.bytes, first.bytes);
  EXPECT_GT(proxy_->requests_seen(), before_plain);

  // A cache too small for the dataset is not used under "auto".
  json small = spec;
  small["source"]["cache_mb"] = 1;
  auto too_small = Pipeline::FromJson(small);
  ASSERT_TRUE(too_small.ok()) << too_small.status();
  EXPECT_FALSE((*too_small)->source_cache_stats().has_value());
}

TEST_F(PipelineCacheTest, StokerRunReportsHitsAndMisses) {
  MakeDataset("cli");
  std::string spec_path = dir_.path() + "/spec.json";
  std::ofstream(spec_path) << json{
      {"source", {{"dataset", "s3://pipeline-cache/cli/"}}},
      {"ops",
       {{{"op", "shuffle"}}}}}.dump();
  const int64_t before = proxy_->requests_seen();
  auto result = testing::RunCommandOk({"env", StrCat("AWS_ENDPOINT_URL=", proxy_->endpoint()),
                                       StrCat(STOKER_TEST_BINARY_DIR, "/stoker"), "run", spec_path,
                                       "--epochs", "2"});
  ASSERT_TRUE(result.ok()) << result.status();
  // 8 MB in 1 MiB blocks: each block missed once (epoch 1), hit afterwards.
  size_t at = result->find("block cache: ");
  ASSERT_NE(at, std::string::npos) << *result;
  unsigned long long hits = 0, misses = 0;
  ASSERT_EQ(
      std::sscanf(result->c_str() + at, "block cache: %llu hits, %llu misses", &hits, &misses), 2)
      << *result;
  EXPECT_GT(misses, 0u);
  EXPECT_LE(misses, 16u);
  EXPECT_GT(hits, misses);
  EXPECT_GT(proxy_->requests_seen(), before);
}

}  // namespace
}  // namespace stoker::data
