// The to_device op: validation in every build, the refusal without CUDA, the spec split the service
// uses, and (CUDA build with a GPU) pipeline output on the device against the CPU ops.
#include "stoker/data/to_device.h"

#include <gtest/gtest.h>

#include <cstring>

#include "stoker/data/pipeline.h"
#include "stoker/data/source.h"
#include "stoker/data/test_util.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using testing::FirstError;

json RangeSpec(json ops) { return {{"source", {{"range", 8}}}, {"ops", std::move(ops)}}; }

TEST(ToDevice, MustBeTheLastOp) {
  absl::Status s = FirstError(RangeSpec({{{"op", "to_device"}}, {{"op", "batch"}, {"size", 2}}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("$.ops[0].op: to_device must be the last op"), std::string::npos) << s;
}

TEST(ToDevice, ParametersAreValidatedWithTheirPath) {
  struct Case {
    json op;
    std::string expected;
  } cases[] = {
      {{{"op", "to_device"}, {"crop", 224}}, "$.ops[1].crop: \"crop\" transforms an image"},
      {{{"op", "to_device"}, {"field", "x"}, {"mean", {0.5}}}, "$.ops[1].std: normalizing needs"},
      {{{"op", "to_device"}, {"field", "x"}, {"layout", "NCHW"}}, "$.ops[1].layout"},
      {{{"op", "to_device"}, {"field", "x"}, {"mean", {1}}, {"std", {2}}, {"dtype", "uint8"}},
       "$.ops[1].dtype: normalizing"},
      {{{"op", "to_device"}, {"device", -1}}, "$.ops[1].device"},
      {{{"op", "to_device"}, {"in_flight", 0}}, "$.ops[1].in_flight"},
      {{{"op", "to_device"}, {"flip_p", 2}}, "$.ops[1].flip_p"},
      {{{"op", "to_device"}, {"colour", 1}}, "colour"},
  };
  for (const Case& c : cases) {
    absl::Status s = FirstError(RangeSpec({{{"op", "batch"}, {"size", 2}}, c.op}));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.op << ": " << s;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << c.op << ": " << s;
  }
}

TEST(ToDevice, ABuildWithoutCudaRefusesIt) {
  if (CudaBuilt()) GTEST_SKIP() << "this build has CUDA";
  auto p = Pipeline::FromJson(RangeSpec({{{"op", "batch"}, {"size", 2}}, {{"op", "to_device"}}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("$.ops[1]: to_device needs stoker built with CUDA "
                                      "(-DSTOKER_CUDA=ON"),
            std::string::npos)
      << p.status();
  EXPECT_FALSE(DeviceStage::Create({}, 0).ok());
}

TEST(ToDevice, SplitDeviceOpKeepsTheRestOfTheSpec) {
  json spec = RangeSpec({{{"op", "batch"}, {"size", 2}}, {{"op", "to_device"}, {"device", 1}}});
  spec["seed"] = 5;
  DeviceSplit split = SplitDeviceOp(spec);
  EXPECT_EQ(split.op_index, 1u);
  EXPECT_EQ(split.device_op, json({{"op", "to_device"}, {"device", 1}}));
  json host = RangeSpec({{{"op", "batch"}, {"size", 2}}});
  host["seed"] = 5;
  EXPECT_EQ(split.host_spec, host);
  // Not at the end, absent, or no ops at all: nothing is split off.
  for (const json& other : {RangeSpec({{{"op", "to_device"}}, {{"op", "batch"}, {"size", 2}}}),
                            RangeSpec(json::array()), json{{"source", {{"range", 3}}}}}) {
    DeviceSplit s = SplitDeviceOp(other);
    EXPECT_TRUE(s.device_op.is_null()) << other;
    EXPECT_EQ(s.host_spec, other);
  }
}

// --- On a GPU (CUDA build) ----------------------------------------------------------------------

// Copies a device tensor back (after waiting for it).
std::vector<uint8_t> ToHost(const Tensor& t);

class ToDeviceOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBuilt()) GTEST_SKIP() << "this build has no CUDA (-DSTOKER_CUDA=ON)";
    auto stage = DeviceStage::Create({}, 0);
    if (!stage.ok()) GTEST_SKIP() << "no GPU: " << stage.status();
  }
};

void RegisterImages() {
  std::vector<Element> samples;
  uint32_t state = 7;
  for (int i = 0; i < 12; ++i) {
    MutableBuffer b(30 * 40 * 3);
    for (size_t v = 0; v < b.size(); ++v) {
      state = state * 1664525u + 1013904223u;
      b.data()[v] = static_cast<uint8_t>(state >> 24);
    }
    Element e;
    e.keys = {"img/" + std::to_string(i)};
    e.fields["img"] = Tensor{DType::kUint8, {30, 40, 3}, std::move(b).Finish()};
    e.fields["label"] = Tensor::Scalar(i);
    samples.push_back(std::move(e));
  }
  RegisterMemoryDataset("to_device_images", std::move(samples));
}

TEST_F(ToDeviceOnGpu, MatchesTheCpuOpsAndKeepsLabels) {
  RegisterImages();
  const json source = {{"memory", "to_device_images"}};
  const json mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  // Center crop, flip every sample, normalize to CHW: on the CPU, then on the device.
  json cpu = {
      {"source", source},
      {"ops",
       {{{"op", "center_crop"}, {"field", "img"}, {"size", {24, 32}}},
        {{"op", "flip"}, {"field", "img"}, {"p", 1.0}},
        {{"op", "normalize"}, {"field", "img"}, {"mean", mean}, {"std", std}, {"layout", "CHW"}},
        {{"op", "batch"}, {"size", 4}}}}};
  json gpu = {{"source", source},
              {"ops",
               {{{"op", "batch"}, {"size", 4}},
                {{"op", "to_device"},
                 {"field", "img"},
                 {"crop", {24, 32}},
                 {"flip_p", 1.0},
                 {"mean", mean},
                 {"std", std},
                 {"layout", "CHW"}}}}};
  auto want = testing::RunAll(cpu);
  auto got = testing::RunAll(gpu);
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor& w = want[i].fields.at("img");
    const Tensor& g = got[i].fields.at("img");
    EXPECT_EQ(g.device, 0);
    EXPECT_EQ(g.dtype, DType::kFloat32);
    EXPECT_EQ(g.shape, w.shape);
    EXPECT_EQ(ToHost(g), std::vector<uint8_t>(w.data.data(), w.data.data() + w.data.size()));
    const Tensor& label = got[i].fields.at("label");
    EXPECT_EQ(label.device, 0);
    const Tensor& want_label = want[i].fields.at("label");
    EXPECT_EQ(ToHost(label), std::vector<uint8_t>(want_label.data.data(),
                                                  want_label.data.data() + want_label.data.size()));
    EXPECT_EQ(got[i].keys, want[i].keys);
  }
}

std::vector<uint8_t> ToHost(const Tensor& t) {
  EXPECT_TRUE(SynchronizeDeviceTensor(t).ok());
  return CopyDeviceTensorToHost(t).value_or(std::vector<uint8_t>{});
}

}  // namespace
}  // namespace stoker::data
