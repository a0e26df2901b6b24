// Read-ahead in the sources, against a store far away: nginx behind the FaultProxy with 20 ms added
// to every response. A dataset source and a tar stream source with several reads in flight must
// reach at least 4x the rate of one read at a time (in theory up to 16x: the margin is for a busy
// shared machine; bench/ has the precise figures), and return exactly the same keys and bytes in
// the same order.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/format/convert.h"
#include "stoker/format/sample_stream.h"
#include "stoker/testing/fault_proxy.h"
#include "stoker/testing/http_server.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;

struct ReadResult {
  std::vector<std::string> keys;
  std::vector<std::string> bytes;  // every field's bytes, in order
  double seconds = 0;              // iterating only (not opening the source)
  int64_t read_ahead = 0;          // the source stage's setting at the end
};

ReadResult RunPipeline(const json& spec) {
  ReadResult run;
  auto pipeline = Pipeline::FromJson(spec);
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  if (!pipeline.ok()) return run;
  auto start = std::chrono::steady_clock::now();
  auto it = (*pipeline)->MakeIterator(0, 2);
  while (true) {
    auto e = it->GetNext();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || !e->has_value()) break;
    run.keys.push_back((*e)->FirstKey());
    for (const auto& [name, tensor] : (*e)->fields) {
      run.bytes.push_back(StrCat(name, "=", tensor.data.view()));
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const StageStats* s : it->runtime().AllStats()) {
    if (s->name == "source") run.read_ahead = s->parallelism;
  }
  return run;
}

class ReadAheadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::HttpTestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    auto proxy = testing::FaultProxy::Start(
        {.upstream_port = Port(server_->url()), .latency = absl::Milliseconds(20)});
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = proxy->release();
  }
  static void TearDownTestSuite() {
    delete proxy_;
    delete server_;
  }
  static int Port(const std::string& url) {  // "http://127.0.0.1:PORT/"
    return std::atoi(url.substr(url.rfind(':') + 1).c_str());
  }
  // A folder of `n` small random files of two classes.
  static std::string MakeFolder(int n, size_t size) {
    std::string dir = server_->root_dir() + "/src";
    std::mt19937 rng(7);
    for (int i = 0; i < n; ++i) {
      std::string cls = i % 2 ? "b" : "a";
      std::filesystem::create_directories(StrCat(dir, "/", cls));
      std::string bytes(size, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      std::ofstream(StrCat(dir, "/", cls, "/", 10000 + i, ".bin"), std::ios::binary) << bytes;
    }
    return dir;
  }

  static testing::HttpTestServer* server_;
  static testing::FaultProxy* proxy_;
};
testing::HttpTestServer* ReadAheadTest::server_ = nullptr;
testing::FaultProxy* ReadAheadTest::proxy_ = nullptr;

TEST_F(ReadAheadTest, DatasetSourceReadsAheadWithTheSameOrder) {
  // 3,072 samples of 512 bytes in 6 shards: 96 reads of 32 samples, each one request.
  std::string src = MakeFolder(3072, 512);
  format::ConvertOptions options;
  options.shard_bytes = 300 << 10;
  auto converted = format::Convert(src, server_->root_dir() + "/ds", options);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const std::string url = proxy_->endpoint() + "/ds/";

  // Without the block cache: it would hold the whole dataset after the first run.
  json one = {{"source", {{"dataset", url}, {"read_ahead", 1}, {"cache", "off"}}}};
  json ahead = {{"source", {{"dataset", url}, {"cache", "off"}}}};
  ReadResult serial = RunPipeline(one);
  ReadResult parallel = RunPipeline(ahead);
  ASSERT_EQ(serial.keys.size(), 3072u);
  EXPECT_EQ(parallel.keys, serial.keys);
  EXPECT_EQ(parallel.bytes, serial.bytes);
  EXPECT_EQ(serial.read_ahead, 1);
  EXPECT_GT(parallel.read_ahead, 4);  // autotuned up from 2
  double ratio = serial.seconds / parallel.seconds;
  std::printf("dataset source: one read at a time %.3f s, read-ahead (%lld) %.3f s: %.1fx\n",
              serial.seconds, static_cast<long long>(parallel.read_ahead), parallel.seconds, ratio);
  EXPECT_GE(ratio, 4.0);

  // The same through the local folder (no proxy), shuffled: read-ahead changes no order.
  json local = {{"source", {{"dataset", server_->root_dir() + "/ds/"}}},
                {"seed", 5},
                {"ops", {{{"op", "shuffle"}}}}};
  json remote = local;
  remote["source"]["dataset"] = url;
  remote["source"]["cache"] = "off";
  ReadResult a = RunPipeline(local);
  ReadResult b = RunPipeline(remote);
  json fixed = remote;
  fixed["source"]["read_ahead"] = 1;
  ReadResult c = RunPipeline(fixed);
  ASSERT_EQ(a.keys.size(), 3072u);
  EXPECT_NE(a.keys, serial.keys);  // really shuffled
  EXPECT_EQ(b.keys, a.keys);
  EXPECT_EQ(b.bytes, a.bytes);
  EXPECT_EQ(c.keys, a.keys);
  // Read-ahead is not part of the fingerprint (a checkpoint resumes under another setting).
  EXPECT_EQ(Pipeline::Fingerprint(fixed), Pipeline::Fingerprint(remote));
}

TEST_F(ReadAheadTest, TarStreamReadsAheadWithTheSameOrder) {
  // 4 MB of tar in 64 KB chunks: 64 requests.
  std::string dir = server_->root_dir() + "/tarsrc";
  std::filesystem::create_directories(dir);
  std::mt19937 rng(9);
  for (int i = 0; i < 480; ++i) {
    std::string bytes(8000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    std::ofstream(StrCat(dir, "/s", 10000 + i, ".bin"), std::ios::binary) << bytes;
    std::ofstream(StrCat(dir, "/s", 10000 + i, ".cls")) << i % 10;
  }
  ASSERT_EQ(std::system(StrCat("cd ", dir, " && tar --sort=name -cf ../a.tar *").c_str()), 0);
  const std::string url = proxy_->endpoint() + "/a.tar";

  auto read = [&](int read_ahead) {
    ReadResult run;
    format::StreamOptions options;
    options.chunk_bytes = 64 << 10;
    options.read_ahead = read_ahead;
    auto start = std::chrono::steady_clock::now();
    auto stream = format::OpenSampleStream(url, options);
    EXPECT_TRUE(stream.ok()) << stream.status();
    if (!stream.ok()) return run;
    while (true) {
      auto sample = (*stream)->Next();
      EXPECT_TRUE(sample.ok()) << sample.status();
      if (!sample.ok() || !sample->has_value()) break;
      run.keys.push_back((*sample)->key);
      for (const auto& f : (*sample)->fields)
        run.bytes.push_back(StrCat(f.name, "=", f.value.view()));
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return run;
  };
  ReadResult serial = read(1);
  ReadResult parallel = read(16);
  ASSERT_EQ(serial.keys.size(), 480u);
  EXPECT_EQ(parallel.keys, serial.keys);
  EXPECT_EQ(parallel.bytes, serial.bytes);
  double ratio = serial.seconds / parallel.seconds;
  std::printf("tar stream: one chunk ahead %.3f s, 16 chunks ahead %.3f s: %.1fx\n", serial.seconds,
              parallel.seconds, ratio);
  EXPECT_GE(ratio, 4.0);

  // Through a pipeline (autotuned read-ahead) the stream gives the same samples.
  json spec = {{"source", {{"tar", {url}}}}};
  ReadResult piped = RunPipeline(spec);
  EXPECT_EQ(piped.keys, serial.keys);
}

}  // namespace
}  // namespace stoker::data
