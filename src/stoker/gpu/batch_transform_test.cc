// The device transform's arithmetic (TransformPixel, through its CPU reference) against the
// pipeline's own CPU ops: center_crop, flip, cast and normalize, then batch. Byte-exact.
#include "stoker/gpu/batch_transform.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "stoker/data/pipeline.h"
#include "stoker/data/source.h"

namespace stoker::gpu {
namespace {

using json = nlohmann::json;
using data::DType;
using data::Element;
using data::Tensor;

constexpr int kH = 37, kW = 53, kN = 5;

// kN random images [kH, kW, channels] of `dtype` (uint8 values, or floats in [0, 255)).
void RegisterImages(const std::string& name, int channels, DType dtype) {
  std::vector<Element> samples;
  uint32_t state = 12345;
  for (int i = 0; i < kN; ++i) {
    const size_t values = size_t{kH} * kW * channels;
    MutableBuffer b(values * data::DTypeSize(dtype));
    for (size_t v = 0; v < values; ++v) {
      state = state * 1664525u + 1013904223u;
      if (dtype == DType::kUint8) {
        b.data()[v] = static_cast<uint8_t>(state >> 24);
      } else {
        const float f = static_cast<float>(state >> 8) / (1 << 24) * 255.0f;
        std::memcpy(b.data() + v * 4, &f, 4);
      }
    }
    Element e;
    e.keys = {name + "/" + std::to_string(i)};
    e.fields["img"] = Tensor{dtype, {kH, kW, channels}, std::move(b).Finish()};
    samples.push_back(std::move(e));
  }
  data::RegisterMemoryDataset(name, std::move(samples));
}

// The single batch of the pipeline `ops` + batch(kN) over dataset `name`.
Tensor RunBatch(const std::string& name, json ops) {
  ops.push_back({{"op", "batch"}, {"size", kN}});
  auto pipeline = data::Pipeline::FromJson({{"source", {{"memory", name}}}, {"ops", ops}});
  EXPECT_TRUE(pipeline.ok()) << pipeline.status();
  auto it = (*pipeline)->MakeIterator(0, 1);
  auto e = it->GetNext();
  EXPECT_TRUE(e.ok() && e->has_value());
  return (*e)->fields.at("img");
}

TransformParams Params(int channels, int out_h, int out_w, bool chw) {
  TransformParams p;
  p.n = kN;
  p.in_h = kH;
  p.in_w = kW;
  p.channels = channels;
  p.out_h = out_h;
  p.out_w = out_w;
  p.out_chw = chw;
  return p;
}

// Center windows (as center_crop places them) with `flip` for every sample.
std::vector<SampleParams> Centered(const TransformParams& p, int32_t flip) {
  SampleParams s;
  s.y0 = (p.in_h - p.out_h) / 2;
  s.x0 = (p.in_w - p.out_w) / 2;
  s.flip = flip;
  return std::vector<SampleParams>(p.n, s);
}

std::vector<uint8_t> Reference(const Tensor& in, const TransformParams& p,
                               const std::vector<SampleParams>& samples, ScalarType in_type,
                               ScalarType out_type) {
  EXPECT_EQ(CheckTransform(p, samples.data(), in_type, out_type), "");
  std::vector<uint8_t> out(p.OutputValues() * ScalarSize(out_type));
  TransformBatchOnCpu(p, samples.data(), in_type, in.data.data(), out_type, out.data());
  return out;
}

std::vector<uint8_t> Bytes(const Tensor& t) {
  return {t.data.data(), t.data.data() + t.data.size()};
}

TEST(BatchTransform, CropAndFlipUint8MatchTheCpuOpsByteForByte) {
  RegisterImages("gpu_u8", 3, DType::kUint8);
  const Tensor raw = RunBatch("gpu_u8", json::array());
  for (const char* direction : {"horizontal", "vertical"}) {
    SCOPED_TRACE(direction);
    const Tensor expected = RunBatch(
        "gpu_u8", {{{"op", "center_crop"}, {"field", "img"}, {"size", {24, 31}}},
                   {{"op", "flip"}, {"field", "img"}, {"p", 1.0}, {"direction", direction}}});
    ASSERT_EQ(expected.shape, (std::vector<int64_t>{kN, 24, 31, 3}));
    TransformParams p = Params(3, 24, 31, /*chw=*/false);
    const int32_t flip = std::string(direction) == "vertical" ? kFlipVertical : kFlipHorizontal;
    EXPECT_EQ(Reference(raw, p, Centered(p, flip), ScalarType::kUint8, ScalarType::kUint8),
              Bytes(expected));
  }
}

TEST(BatchTransform, NormalizeToChwFloatMatchesTheCpuOpBitForBit) {
  RegisterImages("gpu_norm", 3, DType::kUint8);
  const Tensor raw = RunBatch("gpu_norm", json::array());
  const std::vector<double> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};
  const Tensor expected = RunBatch(
      "gpu_norm",
      {{{"op", "center_crop"}, {"field", "img"}, {"size", {32, 32}}},
       {{"op", "flip"}, {"field", "img"}, {"p", 1.0}},
       {{"op", "normalize"}, {"field", "img"}, {"mean", mean}, {"std", std}, {"layout", "CHW"}}});
  ASSERT_EQ(expected.shape, (std::vector<int64_t>{kN, 3, 32, 32}));
  TransformParams p = Params(3, 32, 32, /*chw=*/true);
  p.affine = true;
  for (int k = 0; k < 3; ++k) {
    NormalizeCoefficients(mean[k], std[k], 1.0 / 255.0, &p.scale[k], &p.shift[k]);
  }
  EXPECT_EQ(
      Reference(raw, p, Centered(p, kFlipHorizontal), ScalarType::kUint8, ScalarType::kFloat32),
      Bytes(expected));
}

TEST(BatchTransform, FloatInputNormalizeHwcAndOneChannel) {
  RegisterImages("gpu_f32", 1, DType::kFloat32);
  const Tensor raw = RunBatch("gpu_f32", json::array());
  const Tensor expected = RunBatch(
      "gpu_f32", {{{"op", "normalize"}, {"field", "img"}, {"mean", {100.0}}, {"std", {50.0}}}});
  TransformParams p = Params(1, kH, kW, /*chw=*/false);
  p.affine = true;
  NormalizeCoefficients(100.0, 50.0, 1.0, &p.scale[0], &p.shift[0]);  // float input: no 1/255
  EXPECT_EQ(Reference(raw, p, Centered(p, 0), ScalarType::kFloat32, ScalarType::kFloat32),
            Bytes(expected));
}

TEST(BatchTransform, CastUint8ToFloatLikeTheCastOp) {
  RegisterImages("gpu_cast", 4, DType::kUint8);
  const Tensor raw = RunBatch("gpu_cast", json::array());
  const Tensor expected =
      RunBatch("gpu_cast", {{{"op", "cast"}, {"field", "img"}, {"to", "float32"}}});
  TransformParams p = Params(4, kH, kW, /*chw=*/false);
  EXPECT_EQ(Reference(raw, p, Centered(p, 0), ScalarType::kUint8, ScalarType::kFloat32),
            Bytes(expected));
}

TEST(BatchTransform, RandomWindowsAndPerSampleFlips) {
  // Sample i reads its own window; compare against direct indexing.
  TransformParams p = Params(2, 4, 6, /*chw=*/true);
  p.n = 3;
  std::vector<uint8_t> in(size_t{3} * kH * kW * 2);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + i / 13);
  std::vector<SampleParams> samples = {{0, 0, 0}, {5, 9, kFlipHorizontal}, {kH - 4, kW - 6, 3}};
  ASSERT_EQ(CheckTransform(p, samples.data(), ScalarType::kUint8, ScalarType::kUint8), "");
  std::vector<uint8_t> out(p.OutputValues());
  TransformBatchOnCpu(p, samples.data(), ScalarType::kUint8, in.data(), ScalarType::kUint8,
                      out.data());
  for (int n = 0; n < 3; ++n) {
    for (int k = 0; k < 2; ++k) {
      for (int y = 0; y < 4; ++y) {
        for (int x = 0; x < 6; ++x) {
          const SampleParams& s = samples[n];
          const int sy = s.y0 + ((s.flip & kFlipVertical) ? 3 - y : y);
          const int sx = s.x0 + ((s.flip & kFlipHorizontal) ? 5 - x : x);
          ASSERT_EQ(out[((n * 2 + k) * 4 + y) * 6 + x], in[((n * kH + sy) * kW + sx) * 2 + k])
              << "n=" << n << " k=" << k << " y=" << y << " x=" << x;
        }
      }
    }
  }
}

TEST(BatchTransform, CheckTransformNamesWhatDoesNotFit) {
  TransformParams p = Params(3, 40, 10, false);
  EXPECT_NE(CheckTransform(p, nullptr, ScalarType::kUint8, ScalarType::kUint8).find("larger"),
            std::string::npos);
  p = Params(3, 10, 10, false);
  p.affine = true;
  EXPECT_NE(CheckTransform(p, nullptr, ScalarType::kUint8, ScalarType::kUint8).find("float32"),
            std::string::npos);
  p.affine = false;
  EXPECT_NE(CheckTransform(p, nullptr, ScalarType::kFloat32, ScalarType::kUint8).find("output"),
            std::string::npos);
  p = Params(5, 10, 10, false);
  EXPECT_NE(CheckTransform(p, nullptr, ScalarType::kUint8, ScalarType::kUint8).find("channels"),
            std::string::npos);
  p = Params(3, 10, 10, false);
  std::vector<SampleParams> samples(kN);
  samples[2].x0 = kW - 9;
  EXPECT_NE(
      CheckTransform(p, samples.data(), ScalarType::kUint8, ScalarType::kUint8).find("sample 2"),
      std::string::npos);
}

}  // namespace
}  // namespace stoker::gpu
