// Semantics of the image and field transforms.
#include "stoker/data/transforms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "stoker/core/strings.h"
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

// The bilinear resize in its direct form (each output value from its four source values), which
// CropResize's separable form must equal bit for bit.
Tensor DirectCropResize(const Tensor& image, double x, double y, double w, double h, int out_h,
                        int out_w) {
  const int ih = static_cast<int>(image.shape[0]), iw = static_cast<int>(image.shape[1]);
  const int c = static_cast<int>(image.shape[2]);
  const uint8_t* src = image.values<uint8_t>();
  MutableBuffer out(static_cast<size_t>(out_h) * out_w * c);
  for (int oy = 0; oy < out_h; ++oy) {
    double fy = std::clamp(y + (oy + 0.5) * h / out_h - 0.5, 0.0, double(ih - 1));
    int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, ih - 1);
    int wy = static_cast<int>(std::lround((fy - y0) * 256));
    for (int ox = 0; ox < out_w; ++ox) {
      double fx = std::clamp(x + (ox + 0.5) * w / out_w - 0.5, 0.0, double(iw - 1));
      int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, iw - 1);
      int wx = static_cast<int>(std::lround((fx - x0) * 256));
      for (int k = 0; k < c; ++k) {
        auto at = [&](int yy, int xx) { return int{src[(size_t(yy) * iw + xx) * c + k]}; };
        int top = at(y0, x0) * 256 + (at(y0, x1) - at(y0, x0)) * wx;
        int bottom = at(y1, x0) * 256 + (at(y1, x1) - at(y1, x0)) * wx;
        int v = top * 256 + (bottom - top) * wy;
        out.data()[(size_t(oy) * out_w + ox) * c + k] = static_cast<uint8_t>((v + 32768) >> 16);
      }
    }
  }
  return Tensor{DType::kUint8, {out_h, out_w, c}, std::move(out).Finish()};
}

TEST(CropResize, SeparableEqualsDirectForm) {
  std::srand(25);
  auto uniform = [] { return std::rand() / (RAND_MAX + 1.0); };
  for (int round = 0; round < 300; ++round) {
    const int c = round % 3 == 2 ? 1 : 3;
    const int ih = 1 + std::rand() % 160, iw = 1 + std::rand() % 160;
    MutableBuffer pixels(static_cast<size_t>(ih) * iw * c);
    for (size_t i = 0; i < pixels.size(); ++i) pixels.data()[i] = static_cast<uint8_t>(std::rand());
    Tensor image{DType::kUint8, {ih, iw, c}, std::move(pixels).Finish()};
    const double w = 0.5 + uniform() * iw, h = 0.5 + uniform() * ih;
    const double x = uniform() * (iw - w + 1), y = uniform() * (ih - h + 1);
    const int out_h = 1 + std::rand() % 120, out_w = 1 + std::rand() % 120;
    Tensor a = CropResize(image, x, y, w, h, out_h, out_w);
    Tensor b = DirectCropResize(image, x, y, w, h, out_h, out_w);
    ASSERT_EQ(a.shape, b.shape);
    ASSERT_EQ(a.data.view(), b.data.view())
        << ih << "x" << iw << "x" << c << " crop " << x << "," << y << " " << w << "x" << h
        << " to " << out_h << "x" << out_w;
  }
}

// CropResizeWithin on a part holding the rectangle plus one pixel each side gives the bytes of
// CropResize on the whole image, for integer and fractional rectangles and output sizes such as
// 256 (whose sample positions can fall exactly half way between two weights).
TEST(CropResize, WithinAPartEqualsTheWholeImage) {
  std::srand(26);
  auto uniform = [] { return std::rand() / (RAND_MAX + 1.0); };
  for (int round = 0; round < 300; ++round) {
    const int c = round % 3 == 2 ? 1 : 3;
    const int ih = 2 + std::rand() % 300, iw = 2 + std::rand() % 300;
    MutableBuffer pixels(static_cast<size_t>(ih) * iw * c);
    for (size_t i = 0; i < pixels.size(); ++i) pixels.data()[i] = static_cast<uint8_t>(std::rand());
    Tensor image{DType::kUint8, {ih, iw, c}, std::move(pixels).Finish()};
    double w = 1 + std::rand() % iw, h = 1 + std::rand() % ih;
    double x = std::rand() % static_cast<int>(iw - w + 1),
           y = std::rand() % static_cast<int>(ih - h + 1);
    if (round % 2 == 1) {  // fractional, as at a reduced DCT scale
      w = std::max(0.5, w * uniform()), h = std::max(0.5, h * uniform());
      x = uniform() * (iw - w), y = uniform() * (ih - h);
    }
    const int sizes[] = {256, 224, 1 + std::rand() % 300};
    const int out_w = sizes[round % 3], out_h = sizes[(round + 1) % 3];
    const int x0 = std::max(0, static_cast<int>(std::floor(x)) - 1);
    const int y0 = std::max(0, static_cast<int>(std::floor(y)) - 1);
    const int x1 = std::min(iw, static_cast<int>(std::ceil(x + w)) + 1);
    const int y1 = std::min(ih, static_cast<int>(std::ceil(y + h)) + 1);
    Tensor part = Crop(image, x0, y0, x1 - x0, y1 - y0);
    Tensor a = CropResizeWithin(part, x0, y0, iw, ih, x, y, w, h, out_h, out_w);
    Tensor b = CropResize(image, x, y, w, h, out_h, out_w);
    ASSERT_EQ(a.data.view(), b.data.view())
        << ih << "x" << iw << "x" << c << " crop " << x << "," << y << " " << w << "x" << h
        << " to " << out_h << "x" << out_w;
  }
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

// A w x h image with texture in every channel (so chroma varies between neighbouring blocks and
// upsampling has something to smooth): smooth waves plus noise, from `seed`.
Tensor Textured(int h, int w, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  MutableBuffer pixels(static_cast<size_t>(h) * w * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < channels; ++k) {
        double v = 128 + 60 * std::sin(x * (0.07 + 0.05 * k) + y * 0.11) +
                   40 * std::cos(y * (0.05 + 0.03 * k) - x * 0.02) + int(rng() % 41) - 20;
        pixels.data()[(size_t(y) * w + x) * channels + k] =
            static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return Tensor{DType::kUint8, {h, w, channels}, std::move(pixels).Finish()};
}

// Every subsampling, baseline and progressive, colour and grey sources, RGB and grey output, every
// DCT scale, odd sizes, many random windows: each pixel of a region decode is the full decode's.
TEST(DecodeJpegRegion, EqualsFullDecodeBitForBit) {
  std::mt19937 rng(7);
  struct Kind {
    const char* subsampling;
    int source_channels;
  };
  const Kind kinds[] = {{"444", 3}, {"422", 3}, {"420", 3}, {"440", 3}, {"411", 3}, {"gray", 1}};
  int windows = 0;
  for (const Kind& kind : kinds) {
    for (bool progressive : {false, true}) {
      const int h = 37 + static_cast<int>(rng() % 150), w = 41 + static_cast<int>(rng() % 190);
      Tensor image = Textured(h, w, kind.source_channels, static_cast<uint32_t>(rng()));
      auto jpeg = EncodeJpeg(image, 90, kind.subsampling, progressive);
      ASSERT_TRUE(jpeg.ok()) << jpeg.status();
      for (int channels : {3, 1}) {
        for (int denom : {1, 2, 4, 8}) {
          auto full = DecodeImage(*jpeg, channels, 1, denom);
          ASSERT_TRUE(full.ok()) << full.status();
          const int fh = static_cast<int>(full->shape[0]), fw = static_cast<int>(full->shape[1]);
          for (int trial = 0; trial < 12; ++trial, ++windows) {
            const int rw = 1 + static_cast<int>(rng() % fw), rh = 1 + static_cast<int>(rng() % fh);
            const int rx = static_cast<int>(rng() % (fw - rw + 1));
            const int ry = static_cast<int>(rng() % (fh - rh + 1));
            auto region = DecodeJpegRegion(*jpeg, channels, denom, rx, ry, rw, rh);
            ASSERT_TRUE(region.ok()) << region.status();
            const std::string where = StrCat(kind.subsampling, progressive ? " progressive" : "",
                                             " ", w, "x", h, " to ", channels, " channels at 1/",
                                             denom, ", region ", rx, ",", ry, " ", rw, "x", rh);
            ASSERT_LE(region->x, rx) << where;
            ASSERT_EQ(region->y, ry) << where;
            const int64_t got_w = region->image.shape[1];
            ASSERT_EQ(region->image.shape, (std::vector<int64_t>{rh, got_w, channels})) << where;
            ASSERT_GE(region->x + got_w, rx + rw) << where;
            for (int y = 0; y < rh; ++y) {
              const uint8_t* got = region->image.values<uint8_t>() +
                                   (size_t(y) * got_w + (rx - region->x)) * channels;
              const uint8_t* want = full->values<uint8_t>() + (size_t(ry + y) * fw + rx) * channels;
              ASSERT_EQ(std::memcmp(got, want, size_t(rw) * channels), 0)
                  << where << ": row " << y << " differs";
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(windows, 6 * 2 * 2 * 4 * 12);
  EXPECT_FALSE(DecodeJpegRegion(Buffer::Copy("\xff\xd8\xff garbage"), 3, 1, 0, 0, 4, 4).ok());
}

// The fused decode_image + random_resized_crop (+ flip + normalize) decodes only the crop's region;
// its output must be bit for bit that of decoding the whole image and cropping it ("dct_scale":
// false), for the same seed, over many random windows: every subsampling, progressive, grey, odd
// sizes, and the ops one by one as well as fused.
TEST(RandomResizedCrop, RegionDecodeEqualsFullDecodeThenCrop) {
  std::mt19937 rng(11);
  const char* kinds[] = {"444", "422", "420", "440", "411", "gray"};
  std::vector<Element> samples;
  for (int i = 0; i < 48; ++i) {
    const char* kind = kinds[i % 6];
    const int channels = std::string(kind) == "gray" ? 1 : 3;
    // At most 200 pixels each way: a 101 x 101 output never allows a reduced DCT scale, so both
    // sides decode at full scale.
    const int h = 60 + static_cast<int>(rng() % 141), w = 60 + static_cast<int>(rng() % 141);
    Element e;
    e.keys = {StrCat("img/", i)};
    e.fields["jpg"] = Tensor::Bytes(
        *EncodeJpeg(Textured(h, w, channels, static_cast<uint32_t>(rng())), 90, kind, i % 4 == 3));
    samples.push_back(std::move(e));
  }
  RegisterMemoryDataset("region_images", samples);
  for (bool fuse : {true, false}) {
    for (int out_channels : {3, 1}) {
      json ops = {{{"op", "decode_image"}, {"field", "jpg"}, {"channels", out_channels}},
                  {{"op", "random_resized_crop"}, {"field", "jpg"}, {"size", {101, 103}}},
                  {{"op", "flip"}, {"field", "jpg"}},
                  {{"op", "normalize"},
                   {"field", "jpg"},
                   {"mean", {0.4}},
                   {"std", {0.2}},
                   {"layout", "CHW"}}};
      json spec = {
          {"source", {{"memory", "region_images"}}}, {"fuse_image_ops", fuse}, {"ops", ops}};
      json whole = spec;
      whole["ops"][1]["dct_scale"] = false;
      for (int64_t epoch : {0, 1, 2}) {
        auto region = RunAll(spec, 1, epoch), full = RunAll(whole, 1, epoch);
        ASSERT_EQ(region.size(), samples.size());
        ASSERT_EQ(full.size(), samples.size());
        for (size_t i = 0; i < region.size(); ++i) {
          EXPECT_EQ(region[i].fields.at("jpg").data.view(), full[i].fields.at("jpg").data.view())
              << "sample " << i << " epoch " << epoch << (fuse ? " fused" : " one by one") << ", "
              << out_channels << " channels";
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker::data
