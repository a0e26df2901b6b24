// Semantics of the image and field transforms.
#include "stoker/data/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "stoker/data/image.h"
#include "stoker/data/source.h"
#include "stoker/data/test_util.h"

namespace stoker::data {
namespace {

using json = nlohmann::json;
using testing::FirstError;
using testing::RunAll;

// A smooth h x w RGB gradient (compresses well and survives JPEG nearly unchanged).
Tensor Gradient(int h, int w) {
  MutableBuffer b(static_cast<size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = b.data() + (static_cast<size_t>(y) * w + x) * 3;
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = 128;
    }
  }
  return Tensor{DType::kUint8, {h, w, 3}, std::move(b).Finish()};
}

void RegisterImages() {
  static bool done = false;
  if (done) return;
  done = true;
  std::vector<Element> samples;
  for (int i = 0; i < 6; ++i) {
    Element e;
    e.keys = {"img/" + std::to_string(i)};
    Tensor g = Gradient(60 + 10 * i, 80 + 8 * i);
    e.fields["jpg"] = Tensor::Bytes(i == 5 ? *EncodePng(g) : *EncodeJpeg(g, 95));
    e.fields["cls"] = Tensor::Bytes(Buffer::Copy(std::to_string(i % 2)));
    samples.push_back(std::move(e));
  }
  RegisterMemoryDataset("images", samples);
  Element bad;
  bad.keys = {"broken/0"};
  bad.fields["jpg"] = Tensor::Bytes(Buffer::Copy("\xff\xd8 not really a jpeg"));
  samples.push_back(bad);
  RegisterMemoryDataset("images_with_broken", samples);
}

json ImageSpec(json ops) { return {{"source", {{"memory", "images"}}}, {"ops", std::move(ops)}}; }

TEST(DecodeImage, JpegAndPngToHwc) {
  RegisterImages();
  auto out = RunAll(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}}}));
  ASSERT_EQ(out.size(), 6u);
  const Tensor& t = out[1].fields.at("jpg");
  EXPECT_EQ(t.dtype, DType::kUint8);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{70, 88, 3}));
  EXPECT_NEAR(t.values<uint8_t>()[(35 * 88 + 87) * 3 + 0], 255, 6);  // right edge is red
  const Tensor& png = out[5].fields.at("jpg");
  EXPECT_EQ(png.shape, (std::vector<int64_t>{110, 120, 3}));
  EXPECT_EQ(png.values<uint8_t>()[2], 128);  // lossless
  auto gray = RunAll(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}, {"channels", 1}}}));
  EXPECT_EQ(gray[0].fields.at("jpg").shape, (std::vector<int64_t>{60, 80, 1}));
}

TEST(DecodeImage, BrokenImageFailsWithKeyOrIsSkipped) {
  RegisterImages();
  json spec = {{"source", {{"memory", "images_with_broken"}}},
               {"ops", {{{"op", "decode_image"}, {"field", "jpg"}}}}};
  auto s = FirstError(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("broken/0"), std::string::npos) << s;
  spec["ops"][0]["on_error"] = "skip";
  EXPECT_EQ(RunAll(spec).size(), 6u);
}

TEST(Resize, CropAndCenterCrop) {
  RegisterImages();
  auto out = RunAll(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}},
                               {{"op", "resize"}, {"field", "jpg"}, {"size", {32, 48}}},
                               {{"op", "center_crop"}, {"field", "jpg"}, {"size", 30}}}));
  for (const auto& e : out) EXPECT_EQ(e.fields.at("jpg").shape, (std::vector<int64_t>{30, 30, 3}));
  auto s = FirstError(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}},
                                 {{"op", "center_crop"}, {"field", "jpg"}, {"size", 500}}}));
  EXPECT_NE(s.message().find("larger than the 60x80 image"), std::string::npos) << s;
  EXPECT_NE(s.message().find("img/0"), std::string::npos) << s;
}

TEST(Resize, ShorterSideKeepsAspect) {
  RegisterImages();
  auto out = RunAll(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}},
                               {{"op", "resize"}, {"field", "jpg"}, {"shorter_side", 30}}}));
  EXPECT_EQ(out[0].fields.at("jpg").shape, (std::vector<int64_t>{30, 40, 3}));  // from 60x80
  auto s = FirstError(ImageSpec({{{"op", "resize"}, {"field", "jpg"}}}));
  EXPECT_NE(s.message().find("exactly one of"), std::string::npos) << s;
}

TEST(CropResize, IdentityAndHalving) {
  Tensor g = Gradient(8, 8);
  Tensor same = CropResize(g, 0, 0, 8, 8, 8, 8);
  EXPECT_EQ(same.data.view(), g.data.view());
  Tensor crop = Crop(g, 2, 3, 4, 2);
  EXPECT_EQ(crop.shape, (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(crop.values<uint8_t>()[0], g.values<uint8_t>()[(3 * 8 + 2) * 3]);
}

TEST(RandomResizedCrop, OutputSizeReproducibleAndDctScaled) {
  RegisterImages();
  json ops = {{{"op", "decode_image"}, {"field", "jpg"}},
              {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", 16}}};
  auto a = RunAll(ImageSpec(ops));
  auto b = RunAll(ImageSpec(ops), 4);
  ASSERT_EQ(a.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].fields.at("jpg").shape, (std::vector<int64_t>{16, 16, 3}));
    EXPECT_EQ(a[i].fields.at("jpg").data.view(), b[i].fields.at("jpg").data.view());
  }
  // Without the reduced-DCT decode the crop is the same region, so the pixels are close.
  ops[1]["dct_scale"] = false;
  auto full = RunAll(ImageSpec(ops));
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].fields.at("jpg").data.view(), y = full[i].fields.at("jpg").data.view();
    for (size_t j = 0; j < x.size(); ++j) diff += std::abs(int(uint8_t(x[j])) - int(uint8_t(y[j])));
    diff /= x.size();
  }
  EXPECT_LT(diff, 12.0);
  EXPECT_EQ(PickJpegScale({500, 375}, 224, 224), std::make_pair(1, 1));
  EXPECT_EQ(PickJpegScale({500, 375}, 224, 180), std::make_pair(1, 2));
  EXPECT_EQ(PickJpegScale({500, 375}, 100, 80), std::make_pair(1, 4));
  EXPECT_EQ(PickJpegScale({500, 375}, 600, 80), std::make_pair(1, 1));
}

TEST(Flip, HorizontalAlwaysAndNever) {
  RegisterImages();
  json ops = {{{"op", "decode_image"}, {"field", "jpg"}},
              {{"op", "flip"}, {"field", "jpg"}, {"p", 1.0}}};
  auto flipped = RunAll(ImageSpec(ops));
  ops[1]["p"] = 0.0;
  auto plain = RunAll(ImageSpec(ops));
  const Tensor& f = flipped[0].fields.at("jpg");
  const Tensor& p = plain[0].fields.at("jpg");
  int w = 80;
  for (int x = 0; x < w; ++x) {
    EXPECT_EQ(f.values<uint8_t>()[x * 3], p.values<uint8_t>()[(w - 1 - x) * 3]);
  }
}

TEST(Normalize, FloatHwcAndChw) {
  RegisterImages();
  json ops = {{{"op", "decode_image"}, {"field", "jpg"}},
              {{"op", "center_crop"}, {"field", "jpg"}, {"size", 4}},
              {{"op", "normalize"},
               {"field", "jpg"},
               {"mean", {0.5, 0.5, 0.5}},
               {"std", {0.25, 0.25, 0.25}}}};
  auto hwc = RunAll(ImageSpec(ops));
  ops[1 + 1]["layout"] = "CHW";
  auto chw = RunAll(ImageSpec(ops));
  const Tensor& a = hwc[0].fields.at("jpg");
  const Tensor& b = chw[0].fields.at("jpg");
  EXPECT_EQ(a.dtype, DType::kFloat32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{4, 4, 3}));
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3, 4, 4}));
  EXPECT_NEAR(a.values<float>()[2], (128 / 255.0 - 0.5) / 0.25, 0.05);  // blue = 128
  EXPECT_EQ(a.values<float>()[1 * 3 + 2], b.values<float>()[2 * 16 + 1]);
}

TEST(Cast, TextLabelsAndNumbers) {
  RegisterImages();
  auto out = RunAll(ImageSpec({{{"op", "cast"}, {"field", "cls"}, {"to", "int64"}},
                               {{"op", "cast"}, {"field", "cls"}, {"to", "float32"}}}));
  EXPECT_EQ(out[1].fields.at("cls").dtype, DType::kFloat32);
  EXPECT_EQ(out[1].fields.at("cls").values<float>()[0], 1.0f);
}

TEST(ImagePipeline, BatchesOfNormalizedCrops) {
  RegisterImages();
  auto out =
      RunAll(ImageSpec({{{"op", "decode_image"}, {"field", "jpg"}},
                        {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {24, 32}}},
                        {{"op", "flip"}, {"field", "jpg"}},
                        {{"op", "normalize"}, {"field", "jpg"}, {"layout", "CHW"}},
                        {{"op", "cast"}, {"field", "cls"}, {"to", "int64"}},
                        {{"op", "batch"}, {"size", 4}}}),
             2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].fields.at("jpg").shape, (std::vector<int64_t>{4, 3, 24, 32}));
  EXPECT_EQ(out[0].fields.at("cls").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(out[1].keys.size(), 2u);
}

// Runs `spec` for two epochs on 2 threads, with the image ops fused (the default) or one by one.
std::vector<Element> RunEpochs(json spec, bool fused) {
  if (!fused) spec["fuse_image_ops"] = false;
  std::vector<Element> out = RunAll(spec, 2, 0);
  for (Element& e : RunAll(spec, 2, 1)) out.push_back(std::move(e));
  return out;
}

void ExpectSameElements(const std::vector<Element>& a, const std::vector<Element>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].keys, b[i].keys);
    ASSERT_EQ(a[i].fields.size(), b[i].fields.size());
    for (const auto& [name, t] : a[i].fields) {
      const Tensor& u = b[i].fields.at(name);
      EXPECT_EQ(t.dtype, u.dtype) << name;
      EXPECT_EQ(t.shape, u.shape) << name;
      EXPECT_TRUE(t.data.view() == u.data.view()) << "field " << name << " of element " << i;
    }
  }
}

TEST(FusedImageOps, SameBytesAsTheOpsOneByOne) {
  RegisterImages();
  const json decode = {{"op", "decode_image"}, {"field", "jpg"}};
  const json crop = {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {24, 32}}};
  // 37 wide: the 16-value SIMD steps and a scalar tail, in HWC and CHW.
  const json odd_crop = {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {23, 37}}};
  const json hflip = {{"op", "flip"}, {"field", "jpg"}};
  const json vflip = {{"op", "flip"}, {"field", "jpg"}, {"direction", "vertical"}};
  const json norm = {{"op", "normalize"},
                     {"field", "jpg"},
                     {"mean", {0.485, 0.456, 0.406}},
                     {"std", {0.229, 0.224, 0.225}}};
  json chw = norm;
  chw["layout"] = "CHW";
  const json as_uint8 = {
      {"op", "normalize"}, {"field", "jpg"}, {"layout", "CHW"}, {"dtype", "uint8"}};
  const json cls = {{"op", "cast"}, {"field", "cls"}, {"to", "int64"}};
  const json batch = {{"op", "batch"}, {"size", 4}};
  const std::vector<json> chains = {
      {cls, decode, crop, hflip, chw, batch},          // into the batch buffer
      {cls, decode, crop, hflip, vflip, norm, batch},  // two flips, HWC
      {cls, decode, odd_crop, hflip, norm, batch},     // HWC, an odd width
      {cls, decode, odd_crop, vflip, chw, batch},      // CHW, an odd width
      {cls, decode, crop, hflip, as_uint8, batch},     // uint8 output
      {cls, decode, crop, vflip},                      // flip only, no batch
      {decode, crop, chw, batch},                      // normalize only
      {cls, decode, hflip, norm},                      // no crop: sizes differ
      {cls, decode, crop, hflip, chw, cls, batch},     // another op before the batch
  };
  for (const json& ops : chains) {
    SCOPED_TRACE(ops.dump());
    json spec = {{"source", {{"memory", "images"}}}, {"ops", ops}, {"seed", 3}};
    auto fused = RunEpochs(spec, true);
    EXPECT_FALSE(fused.empty());
    ExpectSameElements(fused, RunEpochs(spec, false));
  }
}

TEST(FusedImageOps, SkippedImagesLeaveTheBatchesAsOneByOne) {
  RegisterImages();
  json spec = {{"source", {{"memory", "images_with_broken"}}},
               {"ops",
                {{{"op", "decode_image"}, {"field", "jpg"}, {"on_error", "skip"}},
                 {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {16, 16}}},
                 {{"op", "flip"}, {"field", "jpg"}},
                 {{"op", "normalize"}, {"field", "jpg"}, {"layout", "CHW"}},
                 {{"op", "batch"}, {"size", 3}}}}};
  // The broken image is the last: put it first by shuffling, so a batch loses one.
  spec["ops"].insert(spec["ops"].begin(), json{{"op", "shuffle"}, {"seed", 1}});
  auto fused = RunEpochs(spec, true);
  auto plain = RunEpochs(spec, false);
  ExpectSameElements(fused, plain);
  int64_t images = 0;
  for (const Element& e : fused) images += e.fields.at("jpg").shape[0];
  EXPECT_EQ(images, 12);  // 6 good images, 2 epochs
}

TEST(Normalize, Uint8OutputKeepsValuesInTheLayout) {
  RegisterImages();
  json ops = {{{"op", "decode_image"}, {"field", "jpg"}},
              {{"op", "center_crop"}, {"field", "jpg"}, {"size", 4}}};
  auto plain = RunAll(ImageSpec(ops));
  ops.push_back({{"op", "normalize"}, {"field", "jpg"}, {"layout", "CHW"}, {"dtype", "uint8"}});
  auto chw = RunAll(ImageSpec(ops));
  const Tensor& a = plain[0].fields.at("jpg");
  const Tensor& b = chw[0].fields.at("jpg");
  EXPECT_EQ(b.dtype, DType::kUint8);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3, 4, 4}));
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(a.values<uint8_t>()[(y * 4 + x) * 3 + k],
                  b.values<uint8_t>()[k * 16 + y * 4 + x]);
  ops.back()["mean"] = {0.5};
  auto s = FirstError(ImageSpec(ops));
  EXPECT_NE(s.message().find("$.ops[2].dtype"), std::string::npos) << s;
  EXPECT_NE(s.message().find("drop mean, std and scale"), std::string::npos) << s;
}

}  // namespace
}  // namespace stoker::data

namespace stoker::data {
namespace {

TEST(DecodeJpegRegion, MatchesFullDecodeCropped) {
  MutableBuffer pixels(120 * 160 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels.data()[i] = static_cast<uint8_t>((i * 31) / 7);
  Tensor image{DType::kUint8, {120, 160, 3}, std::move(pixels).Finish()};
  Buffer jpeg = *EncodeJpeg(image, 92);
  for (int denom : {1, 2}) {
    Tensor full = *DecodeImage(jpeg, 3, 1, denom);
    auto region = DecodeJpegRegion(jpeg, 3, denom, 37 / denom, 21 / denom, 50 / denom, 40 / denom);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_LE(region->x, 37 / denom);
    EXPECT_EQ(region->y, 21 / denom);
    const Tensor& r = region->image;
    EXPECT_EQ(r.shape[0], 40 / denom);
    EXPECT_GE(r.shape[1] + region->x, (37 + 50) / denom);
    // Chroma upsampling at the region's edges sees different neighbours; compare the inside.
    int max_diff = 0;
    const int64_t fw = full.shape[1];
    for (int64_t y = 1; y + 1 < r.shape[0]; ++y) {
      for (int64_t x = 1; x + 1 < r.shape[1]; ++x) {
        for (int k = 0; k < 3; ++k) {
          int a = r.values<uint8_t>()[(y * r.shape[1] + x) * 3 + k];
          int b = full.values<uint8_t>()[((y + region->y) * fw + x + region->x) * 3 + k];
          max_diff = std::max(max_diff, std::abs(a - b));
        }
      }
    }
    EXPECT_LE(max_diff, 2) << "scale 1/" << denom;
  }
  EXPECT_FALSE(DecodeJpegRegion(Buffer::Copy("\xff\xd8\xff garbage"), 3, 1, 0, 0, 4, 4).ok());
}

}  // namespace
}  // namespace stoker::data
