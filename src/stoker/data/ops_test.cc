// Semantics of the structural ops (sources, shuffle, batch, bucket, repeat, take, skip, prefetch)
// and of iterator checkpoints, on the `range` source and in-memory datasets.
#include "stoker/data/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "stoker/data/source.h"
#include "stoker/data/test_util.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using testing::FirstError;
using testing::Int64s;
using testing::Keys;
using testing::RunAll;

std::vector<std::string> RangeKeys(int n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  for (int i = 0; i < n; ++i) keys.push_back(std::to_string(i));
  return keys;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Samples "t<i>" with a text field "txt" of i % 7 + 1 bytes and a "cls" text label.
void RegisterTexts(const std::string& name, int n) {
  std::vector<Element> samples;
  for (int i = 0; i < n; ++i) {
    Element e;
    e.keys = {"t" + std::to_string(i)};
    e.fields["txt"] = Tensor::Bytes(Buffer::Copy(std::string(i % 7 + 1, 'a' + i % 26)));
    e.fields["cls"] = Tensor::Bytes(Buffer::Copy(std::to_string(i % 3)));
    samples.push_back(std::move(e));
  }
  RegisterMemoryDataset(name, std::move(samples));
}

TEST(Source, RangeInOrder) {
  auto out = RunAll({{"source", {{"range", 5}}}});
  EXPECT_EQ(Keys(out), RangeKeys(5));
  EXPECT_EQ(Int64s(out[3].fields.at("value")), std::vector<int64_t>{3});
}

TEST(Source, MemoryStreamShards) {
  RegisterTexts("texts20", 20);
  auto out = RunAll({{"source", {{"memory", "texts20"}, {"shards", 4}}}});
  ASSERT_EQ(out.size(), 20u);
  EXPECT_EQ(out[0].FirstKey(), "t0");
}

TEST(Shuffle, IndexedIsAPermutationFromSeedAndEpoch) {
  json spec = {{"source", {{"range", 100}}}, {"seed", 7}, {"ops", {{{"op", "shuffle"}}}}};
  auto a = Keys(RunAll(spec));
  EXPECT_EQ(Sorted(a), Sorted(RangeKeys(100)));
  EXPECT_NE(a, RangeKeys(100));
  EXPECT_EQ(a, Keys(RunAll(spec)));                  // same seed, same order
  EXPECT_NE(a, Keys(RunAll(spec, 1, /*epoch=*/1)));  // next epoch, new order
  spec["seed"] = 8;
  EXPECT_NE(a, Keys(RunAll(spec)));  // other seed, other order
  spec["ops"][0]["reshuffle_each_epoch"] = false;
  EXPECT_EQ(Keys(RunAll(spec)), Keys(RunAll(spec, 1, 1)));
}

TEST(Shuffle, StreamShardOrderAndBuffer) {
  RegisterTexts("texts50", 50);
  json spec = {{"source", {{"memory", "texts50"}, {"shards", 5}}},
               {"ops", {{{"op", "shuffle"}, {"seed", 3}, {"buffer", 8}}}}};
  auto a = Keys(RunAll(spec));
  EXPECT_EQ(a.size(), 50u);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 50u);
  EXPECT_EQ(a, Keys(RunAll(spec)));
}

TEST(Shuffle, BufferAfterAMap) {
  json spec = {{"source", {{"range", 64}}},
               {"ops",
                {{{"op", "cast"}, {"field", "value"}, {"to", "int32"}},
                 {{"op", "shuffle"}, {"buffer", 10}}}}};
  auto a = Keys(RunAll(spec));
  EXPECT_EQ(Sorted(a), Sorted(RangeKeys(64)));
  EXPECT_NE(a, RangeKeys(64));
}

TEST(Batch, CollatesAndKeepsRemainderUnlessDropped) {
  json spec = {{"source", {{"range", 10}}}, {"ops", {{{"op", "batch"}, {"size", 4}}}}};
  auto out = RunAll(spec);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].fields.at("value").shape, std::vector<int64_t>{4});
  EXPECT_EQ(Int64s(out[1].fields.at("value")), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(out[2].keys, (std::vector<std::string>{"8", "9"}));
  spec["ops"][0]["drop_remainder"] = true;
  EXPECT_EQ(RunAll(spec).size(), 2u);
  EXPECT_EQ(testing::MustBuild(spec)->Cardinality(), 2);
}

TEST(Batch, RaggedFieldIsAnErrorNamingTheField) {
  RegisterTexts("texts10", 10);
  json spec = {{"source", {{"memory", "texts10"}}},
               {"ops",
                {{{"op", "cast"}, {"field", "txt"}, {"to", "uint8"}},
                 {{"op", "map_field"}, {"drop", {"cls"}}},
                 {{"op", "batch"}, {"size", 3}}}}};
  auto s = FirstError(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("field 'txt' is ragged"), std::string::npos) << s;
  EXPECT_NE(s.message().find("padded_batch"), std::string::npos) << s;
}

TEST(Batch, UndecodedBytesAreAnErrorExceptIntegerLabels) {
  RegisterTexts("texts10", 10);
  auto s =
      FirstError({{"source", {{"memory", "texts10"}}}, {"ops", {{{"op", "batch"}, {"size", 2}}}}});
  EXPECT_NE(s.message().find("field 'txt' holds undecoded bytes"), std::string::npos) << s;
  auto out =
      RunAll({{"source", {{"memory", "texts10"}}},
              {"ops", {{{"op", "map_field"}, {"drop", {"txt"}}}, {{"op", "batch"}, {"size", 4}}}}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(Int64s(out[0].fields.at("cls")), (std::vector<int64_t>{0, 1, 2, 0}));
}

TEST(PaddedBatch, PadsToLongest) {
  RegisterTexts("texts10", 10);
  json spec = {{"source", {{"memory", "texts10"}}},
               {"ops",
                {{{"op", "cast"}, {"field", "txt"}, {"to", "uint8"}},
                 {{"op", "cast"}, {"field", "cls"}, {"to", "int64"}},
                 {{"op", "padded_batch"}, {"size", 3}, {"padding_value", 9}}}}};
  auto out = RunAll(spec);
  ASSERT_EQ(out.size(), 4u);
  const Tensor& txt = out[0].fields.at("txt");  // lengths 1, 2, 3
  EXPECT_EQ(txt.shape, (std::vector<int64_t>{3, 3}));
  std::string bytes(txt.data.view());
  EXPECT_EQ(bytes, std::string("a\x09\x09"
                               "bb\x09"
                               "ccc"));
  EXPECT_EQ(Int64s(out[0].fields.at("cls")), (std::vector<int64_t>{0, 1, 2}));
}

TEST(BucketByLength, GroupsByLengthAndPads) {
  RegisterTexts("texts70", 70);
  json spec = {{"source", {{"memory", "texts70"}}},
               {"ops",
                {{{"op", "cast"}, {"field", "txt"}, {"to", "uint8"}},
                 {{"op", "map_field"}, {"keep", {"txt"}}},
                 {{"op", "bucket_by_length"},
                  {"field", "txt"},
                  {"boundaries", {3, 6}},
                  {"batch_sizes", {4, 4, 2}}}}}};
  auto out = RunAll(spec);
  std::set<std::string> keys;
  auto bucket_of = [](int64_t length) { return length < 3 ? 0 : length < 6 ? 1 : 2; };
  for (const Element& b : out) {
    const Tensor& t = b.fields.at("txt");
    for (const auto& k : b.keys) keys.insert(k);
    // All samples of a batch come from one bucket (lengths < 3, 3..5, >= 6); padding is 0 and
    // the texts have no zero bytes, so a row's length is its count of non-zero bytes.
    std::set<int> buckets;
    for (int64_t row = 0; row < t.shape[0]; ++row) {
      int64_t length = 0;
      for (int64_t i = 0; i < t.shape[1]; ++i)
        length += t.values<uint8_t>()[row * t.shape[1] + i] != 0;
      buckets.insert(bucket_of(length));
    }
    EXPECT_EQ(buckets.size(), 1u);
    EXPECT_LE(t.shape[0], *buckets.begin() == 2 ? 2 : 4);
  }
  EXPECT_EQ(keys.size(), 70u);
}

TEST(RepeatTakeSkip, Semantics) {
  json spec = {{"source", {{"range", 5}}}, {"ops", {{{"op", "repeat"}, {"count", 3}}}}};
  EXPECT_EQ(RunAll(spec).size(), 15u);
  spec = {{"source", {{"range", 10}}},
          {"ops", {{{"op", "skip"}, {"count", 2}}, {{"op", "take"}, {"count", 5}}}}};
  EXPECT_EQ(Keys(RunAll(spec)), (std::vector<std::string>{"2", "3", "4", "5", "6"}));
  // Repetitions are epochs: a shuffle differs between them.
  spec = {{"source", {{"range", 20}}},
          {"ops", {{{"op", "shuffle"}}, {{"op", "repeat"}, {"count", 2}}}}};
  auto keys = Keys(RunAll(spec));
  ASSERT_EQ(keys.size(), 40u);
  EXPECT_NE(std::vector<std::string>(keys.begin(), keys.begin() + 20),
            std::vector<std::string>(keys.begin() + 20, keys.end()));
  // repeat forever over an empty input ends.
  EXPECT_EQ(RunAll({{"source", {{"range", 0}}}, {"ops", {{{"op", "repeat"}}}}}).size(), 0u);
}

TEST(FilterAndMapField, Semantics) {
  RegisterTexts("texts30", 30);
  json spec = {{"source", {{"memory", "texts30"}}},
               {"ops",
                {{{"op", "filter"}, {"field", "cls"}, {"in", {1}}},
                 {{"op", "map_field"}, {"rename", {{"txt", "text"}}}, {"drop", {"cls"}}}}}};
  auto out = RunAll(spec);
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out[0].FirstKey(), "t1");
  EXPECT_EQ(out[0].fields.size(), 1u);
  EXPECT_TRUE(out[0].fields.count("text"));
  spec["ops"][0] = {{"op", "filter"}, {"field", "txt"}, {"min_length", 7}};
  EXPECT_EQ(RunAll(spec).size(), 4u);  // i % 7 == 6
}

TEST(Prefetch, SameElementsAsWithout) {
  json spec = {{"source", {{"range", 50}}},
               {"ops", {{{"op", "shuffle"}}, {{"op", "batch"}, {"size", 8}}}}};
  auto plain = Keys(RunAll(spec));
  spec["ops"].push_back({{"op", "prefetch"}, {"buffer", 3}});
  EXPECT_EQ(Keys(RunAll(spec)), plain);
  spec["ops"].back() = {{"op", "prefetch"}};
  EXPECT_EQ(Keys(RunAll(spec, 2)), plain);
}

TEST(ParallelMap, NonDeterministicDeliversEverything) {
  json spec = {{"source", {{"range", 200}}},
               {"deterministic", false},
               {"ops", {{{"op", "cast"}, {"field", "value"}, {"to", "float32"}}}}};
  auto keys = Keys(RunAll(spec, 4));
  EXPECT_EQ(Sorted(keys), Sorted(RangeKeys(200)));
  auto p = testing::MustBuild(spec);
  auto it = p->MakeIterator(0, 2);
  ASSERT_TRUE(it->GetNext().ok());
  EXPECT_EQ(it->Save().status().code(), absl::StatusCode::kFailedPrecondition);
}

// Saving after k elements and restoring into a fresh iterator yields exactly the rest.
TEST(Checkpoint, RestoreAtEveryPositionYieldsTheRest) {
  RegisterTexts("texts40", 40);
  json spec = {{"source", {{"memory", "texts40"}}},
               {"seed", 11},
               {"ops",
                {{{"op", "shuffle"}},
                 {{"op", "filter"}, {"field", "cls"}, {"in", {0, 1}}},
                 {{"op", "cast"}, {"field", "txt"}, {"to", "uint8"}},
                 {{"op", "cast"}, {"field", "cls"}, {"to", "int32"}},
                 {{"op", "shuffle"}, {"buffer", 5}},
                 {{"op", "padded_batch"}, {"size", 3}},
                 {{"op", "repeat"}, {"count", 2}},
                 {{"op", "prefetch"}, {"buffer", 2}}}}};
  auto pipeline = testing::MustBuild(spec);
  auto full = Keys(RunAll(spec, 2));
  ASSERT_FALSE(full.empty());
  auto elements = RunAll(spec, 2);
  for (size_t k = 0; k <= elements.size(); ++k) {
    auto it = pipeline->MakeIterator(0, 2);
    std::vector<std::string> got;
    for (size_t i = 0; i < k; ++i) {
      auto e = it->GetNext();
      ASSERT_TRUE(e.ok() && e->has_value());
      got.insert(got.end(), (*e)->keys.begin(), (*e)->keys.end());
    }
    auto token = it->Save();
    ASSERT_TRUE(token.ok()) << token.status();
    it.reset();
    auto resumed = pipeline->MakeIterator(0, 1);
    ASSERT_TRUE(resumed->Restore(*token).ok());
    while (true) {
      auto e = resumed->GetNext();
      ASSERT_TRUE(e.ok()) << e.status();
      if (!e->has_value()) break;
      got.insert(got.end(), (*e)->keys.begin(), (*e)->keys.end());
    }
    EXPECT_EQ(got, full) << "saved after " << k << " elements";
  }
}

TEST(Checkpoint, TokenFromAnotherPipelineIsRejected) {
  auto a = testing::MustBuild({{"source", {{"range", 10}}}});
  auto b = testing::MustBuild({{"source", {{"range", 11}}}});
  auto token = a->MakeIterator()->Save();
  ASSERT_TRUE(token.ok());
  auto s = b->MakeIterator()->Restore(*token);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("different pipeline"), std::string::npos);
  EXPECT_FALSE(b->MakeIterator()->Restore("garbage").ok());
}

}  // namespace
}  // namespace stoker::data

namespace stoker::data {
namespace {

class VectorSplits : public SplitProvider {
 public:
  explicit VectorSplits(std::vector<Split> splits) : splits_(std::move(splits)) {}
  absl::StatusOr<std::optional<Split>> GetNext() override {
    if (next_ >= splits_.size()) return std::nullopt;
    return splits_[next_++];
  }

 private:
  std::vector<Split> splits_;
  size_t next_ = 0;
};

TEST(Splits, SourceReadsOnlyItsSplitsOfTheShuffledOrder) {
  json spec = {
      {"source", {{"range", 100}}},
      {"seed", 3},
      {"ops", {{{"op", "shuffle"}}, {{"op", "batch"}, {"size", 7}}, {{"op", "prefetch"}}}}};
  auto pipeline = testing::MustBuild(spec);
  EXPECT_EQ(pipeline->source_size(), 100);
  auto whole = Keys(RunAll(spec));
  // Two workers sharing the epoch: splits [0,30) and [60,100) to one, [30,60) to the other.
  VectorSplits a({{0, 30}, {60, 100}}), b({{30, 60}});
  std::vector<std::string> got_a, got_b;
  for (auto [provider, out] : {std::make_pair(&a, &got_a), std::make_pair(&b, &got_b)}) {
    auto it = pipeline->MakeIterator(0, 2, provider);
    while (true) {
      auto e = it->GetNext();
      ASSERT_TRUE(e.ok()) << e.status();
      if (!e->has_value()) break;
      out->insert(out->end(), (*e)->keys.begin(), (*e)->keys.end());
    }
  }
  std::vector<std::string> want_a(whole.begin(), whole.begin() + 30);
  want_a.insert(want_a.end(), whole.begin() + 60, whole.end());
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, std::vector<std::string>(whole.begin() + 30, whole.begin() + 60));
  VectorSplits bad({{90, 120}});
  EXPECT_EQ(pipeline->MakeIterator(0, 1, &bad)->GetNext().status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace stoker::data
