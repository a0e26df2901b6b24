// The weighted mix source (mix_source.h) through whole pipelines: quotas, stratified batches,
// epochs, checkpoint and resume, and clear errors.
#include "stoker/data/mix_source.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "stoker/data/pipeline.h"
#include "stoker/data/source.h"
#include "stoker/data/test_util.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using testing::RunAll;

// Three in-memory streams whose keys start with their name: "a0", "a1", ..., "b0", ...
void RegisterStreams() {
  static bool done = false;
  if (done) return;
  done = true;
  for (auto [name, n] : {std::pair<std::string, int>{"a", 500}, {"b", 300}, {"c", 100}}) {
    std::vector<Element> samples;
    for (int i = 0; i < n; ++i) {
      Element e;
      e.keys = {name + std::to_string(i)};
      e.fields["v"] = Tensor::Scalar(i);
      samples.push_back(std::move(e));
    }
    RegisterMemoryDataset("mix-" + name, std::move(samples));
  }
}

json MixSpec(json extra_source, json ops = json::array()) {
  RegisterStreams();
  json source = {{"mix",
                  {{{"memory", "mix-a"}, {"weight", 0.5}},
                   {{"memory", "mix-b"}, {"weight", 0.3}},
                   {{"memory", "mix-c"}, {"weight", 0.2}}}}};
  source.update(extra_source);
  return {{"seed", 7}, {"source", source}, {"ops", ops}};
}

std::map<char, int> CountStreams(const std::vector<std::string>& keys) {
  std::map<char, int> count;
  for (const auto& k : keys) ++count[k[0]];
  return count;
}

TEST(MixSource, WeightsGiveExactQuotasEveryEpoch) {
  const json spec = MixSpec({{"epoch_size", 1000}});
  for (int64_t epoch : {0, 1}) {
    auto keys = testing::Keys(RunAll(spec, 1, epoch));
    ASSERT_EQ(keys.size(), 1000u);
    auto count = CountStreams(keys);
    EXPECT_EQ(count['a'], 500);
    EXPECT_EQ(count['b'], 300);
    EXPECT_EQ(count['c'], 200);
    // c has 100 samples: two whole passes, each sample twice.
    std::map<std::string, int> c_seen;
    for (const auto& k : keys)
      if (k[0] == 'c') ++c_seen[k];
    EXPECT_EQ(c_seen.size(), 100u);
    for (const auto& [k, n] : c_seen) EXPECT_EQ(n, 2) << k;
    // b is drawn without replacement: 300 distinct of its 300.
    std::set<std::string> b_seen;
    for (const auto& k : keys)
      if (k[0] == 'b') b_seen.insert(k);
    EXPECT_EQ(b_seen.size(), 300u);
  }
  EXPECT_NE(testing::Keys(RunAll(spec, 1, 0)), testing::Keys(RunAll(spec, 1, 1)));
  EXPECT_EQ(testing::Keys(RunAll(spec, 1, 1)), testing::Keys(RunAll(spec, 4, 1)));
}

TEST(MixSource, RemainderIsHandedOutBySeedAndTotalsStay) {
  // 997 = 498.5 + 299.1 + 199.4: floors 498 + 299 + 199 = 996, one left for a seeded stream.
  const json spec = MixSpec({{"epoch_size", 997}});
  std::set<std::map<char, int>> seen;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    auto count = CountStreams(testing::Keys(RunAll(spec, 1, epoch)));
    EXPECT_EQ(count['a'] + count['b'] + count['c'], 997);
    EXPECT_GE(count['a'], 498);
    EXPECT_LE(count['a'], 499);
    EXPECT_GE(count['b'], 299);
    EXPECT_LE(count['b'], 300);
    EXPECT_GE(count['c'], 199);
    EXPECT_LE(count['c'], 200);
    seen.insert(count);
  }
  EXPECT_GT(seen.size(), 1u) << "the remainder should not always go to the same stream";
}

TEST(MixSource, RepeatAndChooseAreAbsoluteCounts) {
  RegisterStreams();
  json spec = {{"source",
                {{"mix",
                  {{{"memory", "mix-a"}, {"choose", 50}},
                   {{"memory", "mix-b"}, {"repeat", 0.5}},
                   {{"memory", "mix-c"}, {"repeat", 3}}}}}}};
  auto count = CountStreams(testing::Keys(RunAll(spec)));
  EXPECT_EQ(count['a'], 50);
  EXPECT_EQ(count['b'], 150);
  EXPECT_EQ(count['c'], 300);
}

TEST(MixSource, StratifiedBatchesHoldEachShareWithinOne) {
  const json spec =
      MixSpec({{"epoch_size", 1000}, {"stratified", true}}, {{{"op", "batch"}, {"size", 20}}});
  auto batches = RunAll(spec, 1, 3);
  ASSERT_EQ(batches.size(), 50u);
  for (const auto& b : batches) {
    auto count = CountStreams(b.keys);
    EXPECT_NEAR(count['a'], 10, 1);
    EXPECT_NEAR(count['b'], 6, 1);
    EXPECT_NEAR(count['c'], 4, 1);
  }
}

TEST(MixSource, ResumeMidEpochKeepsTheQuotas) {
  const json spec = MixSpec({{"epoch_size", 1000}}, {{{"op", "batch"}, {"size", 10}}});
  auto whole = testing::Keys(RunAll(spec, 1, 1));
  auto pipeline = testing::MustBuild(spec);
  auto it = pipeline->MakeIterator(1, 1);
  std::vector<std::string> keys;
  for (int i = 0; i < 37; ++i) {
    auto e = it->GetNext();
    ASSERT_TRUE(e.ok() && e->has_value());
    keys.insert(keys.end(), (*e)->keys.begin(), (*e)->keys.end());
  }
  auto token = it->Save();
  ASSERT_TRUE(token.ok()) << token.status();
  auto resumed = pipeline->MakeIterator(1, 1);
  ASSERT_TRUE(resumed->Restore(*token).ok());
  while (true) {
    auto e = resumed->GetNext();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;
    keys.insert(keys.end(), (*e)->keys.begin(), (*e)->keys.end());
  }
  EXPECT_EQ(keys, whole);
}

TEST(MixSource, ErrorsNameTheStream) {
  RegisterStreams();
  auto error = [](const json& spec) {
    auto p = Pipeline::FromJson(spec);
    return p.ok() ? std::string("ok") : p.status().ToString();
  };
  json two_kinds = {{"source", {{"mix", {{{"memory", "mix-a"}, {"weight", 1}, {"choose", 3}}}}}}};
  EXPECT_NE(error(two_kinds).find("$.source.mix[0]: give exactly one"), std::string::npos)
      << error(two_kinds);
  json bad_weight = {
      {"source",
       {{"mix", {{{"memory", "mix-a"}, {"weight", 1}}, {{"memory", "mix-b"}, {"weight", -2}}}}}}};
  EXPECT_NE(error(bad_weight).find("$.source.mix[1].weight"), std::string::npos)
      << error(bad_weight);
  json missing = {{"source", {{"mix", {{{"memory", "no-such"}, {"weight", 1}}}}}}};
  EXPECT_NE(error(missing).find("$.source.mix[0]"), std::string::npos) << error(missing);
  json too_small = {
      {"source", {{"mix", {{{"memory", "mix-a"}, {"choose", 600}}}}, {"epoch_size", 100}}}};
  EXPECT_NE(error(too_small).find("epoch_size"), std::string::npos) << error(too_small);
}

}  // namespace
}  // namespace stoker::data
