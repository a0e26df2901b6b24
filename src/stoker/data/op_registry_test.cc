// The op registry's declared traits: every built-in op declares them, and what the fusion pass and
// ElementsPerEpoch read from them.
#include "stoker/data/op_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "stoker/data/image_fusion.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(OpRegistryTest, EveryBuiltInOpDeclaresWhatItDoesToTheCount) {
  RegisterBuiltinOps();
  std::vector<std::string> names = RegisteredOpNames();
  ASSERT_GT(names.size(), 15u);
  for (const std::string& name : names) {
    const OpDefinition* def = FindOp(name);
    ASSERT_NE(def, nullptr) << name;
    if (def->plugin) continue;  // another test of this process loaded one
    EXPECT_NE(def->traits.count, CountEffect::kUndeclared)
        << "op '" << name << "' declares no count effect (OpTraits, op_registry.h)";
    EXPECT_EQ(def->traits.per_sample, def->transform != nullptr) << name;
    if (def->traits.fusable) {
      EXPECT_TRUE(def->traits.per_sample) << name;
    }
  }
}

TEST(OpRegistryTest, APluginTransformHasAnUndeclaredCount) {
  ASSERT_TRUE(RegisterTransform("op_registry_test_plugin", [](ParamReader&) {
                return absl::StatusOr<std::unique_ptr<Transform>>(nullptr);
              }).ok());
  EXPECT_EQ(CountEffectOf(json{{"op", "op_registry_test_plugin"}}), CountEffect::kUndeclared);
  EXPECT_TRUE(FindOp("op_registry_test_plugin")->traits.per_sample);
  auto n = ElementsPerEpoch(json::array({{{"op", "op_registry_test_plugin"}}}), 10);
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("ops[0] (op_registry_test_plugin)"));
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("plugin"));
}

TEST(OpRegistryTest, CountEffectTakesParametersIntoAccount) {
  RegisterBuiltinOps();
  EXPECT_EQ(CountEffectOf(json{{"op", "decode_image"}, {"field", "jpg"}}), CountEffect::kKeeps);
  EXPECT_EQ(CountEffectOf(json{{"op", "decode_image"}, {"field", "jpg"}, {"on_error", "skip"}}),
            CountEffect::kMayDrop);
  EXPECT_EQ(CountEffectOf(json{{"op", "filter"}}), CountEffect::kMayDrop);
  EXPECT_EQ(CountEffectOf(json{{"op", "no_such_op"}}), CountEffect::kUndeclared);
  EXPECT_EQ(CountEffectOf(json("batch")), CountEffect::kUndeclared);
}

TEST(OpRegistryTest, ElementsPerEpochFollowsTheDeclaredEffects) {
  auto ops = [](std::initializer_list<json> list) { return json(list); };
  EXPECT_EQ(*ElementsPerEpoch(json::array(), 103), 103);
  EXPECT_EQ(*ElementsPerEpoch(ops({{{"op", "shuffle"}},
                                   {{"op", "decode_image"}, {"field", "jpg"}},
                                   {{"op", "batch"}, {"size", 10}}}),
                              103),
            11);
  EXPECT_EQ(
      *ElementsPerEpoch(ops({{{"op", "batch"}, {"size", 10}, {"drop_remainder", true}}}), 103), 10);
  EXPECT_EQ(*ElementsPerEpoch(ops({{{"op", "take"}, {"count", 50}},
                                   {{"op", "skip"}, {"count", 20}},
                                   {{"op", "repeat"}, {"count", 3}},
                                   {{"op", "prefetch"}}}),
                              103),
            90);
  EXPECT_EQ(*ElementsPerEpoch(ops({{{"op", "skip"}, {"count", 500}}}), 103), 0);
  for (auto [spec, why] : std::vector<std::pair<json, std::string>>{
           {ops({{{"op", "cast"}}, {{"op", "filter"}}}), "ops[1] (filter) drops elements"},
           {ops({{{"op", "decode_image"}, {"on_error", "skip"}}}),
            "ops[0] (decode_image) has on_error"},
           {ops({{{"op", "repeat"}}}), "ops[0] (repeat) repeats forever"},
           {ops({{{"op", "bucket_by_length"}}}), "ops[0] (bucket_by_length) makes batches"},
           {ops({{{"op", "mystery"}}}), "ops[0] (mystery) is a plugin op (not loaded"}}) {
    auto n = ElementsPerEpoch(spec, 103);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition) << spec.dump();
    EXPECT_THAT(std::string(n.status().message()), HasSubstr(why));
  }
}

TEST(ImageFusionTest, PlansChainsByFieldOrderAndOption) {
  RegisterBuiltinOps();
  json ops = json::array({
      {{"op", "decode_image"}, {"field", "jpg"}},         // 0
      {{"op", "random_resized_crop"}, {"field", "jpg"}},  // 1
      {{"op", "flip"}, {"field", "jpg"}},                 // 2
      {{"op", "flip"}, {"field", "jpg"}},                 // 3
      {{"op", "normalize"}, {"field", "jpg"}},            // 4
      {{"op", "batch"}, {"size", 2}},                     // 5
      {{"op", "decode_image"}, {"field", "png"}},         // 6
      {{"op", "flip"}, {"field", "other"}},               // 7: another field
      {{"op", "decode_image"}, {"field", "x"}},           // 8
      {{"op", "normalize"}, {"field", "x"}},              // 9
      {{"op", "flip"}, {"field", "x"}},                   // 10: after normalize: not fused
  });
  auto fused = PlanImageChains(ops, true);
  ASSERT_EQ(fused.size(), 3u);
  EXPECT_EQ(fused[0].crop, 1u);
  EXPECT_THAT(fused[0].flips, ElementsAre(2u, 3u));
  EXPECT_EQ(fused[0].normalize, 4u);
  EXPECT_EQ(fused[0].last(), 4u);
  EXPECT_EQ(fused[6].last(), 6u);
  EXPECT_EQ(fused[8].normalize, 9u);
  EXPECT_TRUE(fused[8].flips.empty());
  EXPECT_EQ(fused[8].last(), 9u);

  auto plain = PlanImageChains(ops, false);
  EXPECT_EQ(plain[0].crop, 1u);  // the region decode is part of the two ops' definition
  EXPECT_TRUE(plain[0].flips.empty());
  EXPECT_FALSE(plain[0].normalize.has_value());
  EXPECT_EQ(plain[0].last(), 1u);
  EXPECT_EQ(plain[8].last(), 8u);
  EXPECT_TRUE(PlanImageChains(json::object(), true).empty());
}

}  // namespace
}  // namespace stoker::data
