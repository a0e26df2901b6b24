// The image transforms: decode_image, resize, center_crop, random_resized_crop (and its fusion with
// decode_image), flip, normalize. docs/pipeline.md lists their parameters.
#include <cmath>
#include <cstring>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/image.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/transforms.h"

namespace stoker::data {
namespace {

using Result = absl::StatusOr<std::optional<Element>>;

// Checks that `t` is a decoded uint8 image [H, W, C].
absl::Status CheckImage(const Tensor& t, const std::string& field) {
  if (t.dtype != DType::kUint8 || t.shape.size() != 3) {
    return absl::InvalidArgumentError(
        StrCat("field '", field, "' must be a decoded uint8 image [height, width, channels], got ",
               DTypeName(t.dtype), " ", t.ShapeString(),
               t.dtype == DType::kBytes ? " (add decode_image first)" : ""));
  }
  return absl::OkStatus();
}

class DecodeImageOp : public Transform {
 public:
  explicit DecodeImageOp(ParamReader& p)
      : field_(p.String("field")),
        channels_(static_cast<int>(p.Int("channels", 3, 1, 3))),
        skip_errors_(p.String("on_error", "fail", {"fail", "skip"}) == "skip") {
    if (channels_ == 2) p.Fail("channels", "expected 1 (gray) or 3 (RGB), got 2");
  }
  Result Apply(Element e, Rng& rng) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    if (t->dtype != DType::kBytes) {
      return absl::InvalidArgumentError(
          StrCat("field '", field_, "' is already decoded (", DTypeName(t->dtype), ")"));
    }
    auto image = Decode(*t, rng);
    if (!image.ok()) {
      if (skip_errors_) return std::nullopt;
      return Annotate(image.status(), StrCat("decode_image field '", field_, "'"));
    }
    e.fields[field_] = std::move(*image);
    return e;
  }

 protected:
  virtual absl::StatusOr<Tensor> Decode(const Tensor& bytes, Rng& rng) const {
    return DecodeImage(bytes.data, channels_);
  }
  std::string field_;
  int channels_;
  bool skip_errors_;
};

// resize: to exactly "size" [h, w], or so that the shorter side is "shorter_side" (aspect kept).
class Resize : public Transform {
 public:
  explicit Resize(ParamReader& p) : field_(p.String("field")) {
    p.Raw("size");  // both are known fields, whichever is given
    p.Raw("shorter_side");
    if (p.Has("size") == p.Has("shorter_side")) {
      p.Fail("size",
             "resize needs exactly one of \"size\" ([height, width]) and "
             "\"shorter_side\" (an integer)");
    } else if (p.Has("size")) {
      size_ = p.Size("size");
    } else {
      shorter_side_ = static_cast<int>(p.Int("shorter_side", std::nullopt, 1, 65535));
    }
  }
  Result Apply(Element e, Rng&) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    RETURN_IF_ERROR(CheckImage(*t, field_));
    const int64_t h = t->shape[0], w = t->shape[1];
    std::pair<int, int> out = size_;
    if (shorter_side_ > 0) {
      out = h <= w ? std::make_pair(shorter_side_,
                                    static_cast<int>(std::lround(double(w) * shorter_side_ / h)))
                   : std::make_pair(static_cast<int>(std::lround(double(h) * shorter_side_ / w)),
                                    shorter_side_);
    }
    e.fields[field_] = CropResize(*t, 0, 0, w, h, out.first, out.second);
    return e;
  }

 private:
  std::string field_;
  std::pair<int, int> size_{0, 0};
  int shorter_side_ = 0;
};

class CenterCrop : public Transform {
 public:
  explicit CenterCrop(ParamReader& p) : field_(p.String("field")), size_(p.Size("size")) {}
  Result Apply(Element e, Rng&) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    RETURN_IF_ERROR(CheckImage(*t, field_));
    int h = static_cast<int>(t->shape[0]), w = static_cast<int>(t->shape[1]);
    if (size_.first > h || size_.second > w) {
      return absl::InvalidArgumentError(StrCat("center_crop ", size_.first, "x", size_.second,
                                               " is larger than the ", h, "x", w,
                                               " image in field '", field_, "'; resize first"));
    }
    e.fields[field_] =
        Crop(*t, (w - size_.second) / 2, (h - size_.first) / 2, size_.second, size_.first);
    return e;
  }

 private:
  std::string field_;
  std::pair<int, int> size_;
};

struct Rect {
  double x, y, w, h;
};

// Random area fraction in `scale` and aspect ratio (log-uniform) in `ratio`; 10 tries, then the
// largest centered crop with a ratio in range.
class RandomResizedCrop : public Transform {
 public:
  explicit RandomResizedCrop(ParamReader& p)
      : field_(p.String("field")),
        size_(p.Size("size")),
        scale_(p.NumberList("scale", std::vector<double>{0.08, 1.0}, 2, 2, 1e-6, 1.0)),
        ratio_(p.NumberList("ratio", std::vector<double>{3.0 / 4, 4.0 / 3}, 2, 2, 1e-3, 1e3)),
        dct_scale_(p.Bool("dct_scale", true)) {
    if (scale_[0] > scale_[1]) p.Fail("scale", "expected [min, max] with min <= max");
    if (ratio_[0] > ratio_[1]) p.Fail("ratio", "expected [min, max] with min <= max");
  }
  Result Apply(Element e, Rng& rng) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    RETURN_IF_ERROR(CheckImage(*t, field_));
    Rect r = PickRect(static_cast<int>(t->shape[1]), static_cast<int>(t->shape[0]), rng);
    e.fields[field_] = CropResize(*t, r.x, r.y, r.w, r.h, size_.first, size_.second);
    return e;
  }

  Rect PickRect(int width, int height, Rng& rng) const {
    const double area = static_cast<double>(width) * height;
    const double log_lo = std::log(ratio_[0]), log_hi = std::log(ratio_[1]);
    for (int attempt = 0; attempt < 10; ++attempt) {
      double target = area * rng.Uniform(scale_[0], scale_[1]);
      double aspect = std::exp(rng.Uniform(log_lo, log_hi));
      int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
      int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
      if (w > 0 && h > 0 && w <= width && h <= height) {
        int x = static_cast<int>(rng.Below(width - w + 1));
        int y = static_cast<int>(rng.Below(height - h + 1));
        return {double(x), double(y), double(w), double(h)};
      }
    }
    double in_ratio = static_cast<double>(width) / height;
    double w = width, h = height;
    if (in_ratio < ratio_[0]) {
      h = std::round(w / ratio_[0]);
    } else if (in_ratio > ratio_[1]) {
      w = std::round(h * ratio_[1]);
    }
    return {(width - w) / 2, (height - h) / 2, w, h};
  }
  const std::string& field() const { return field_; }
  std::pair<int, int> size() const { return size_; }
  bool dct_scale() const { return dct_scale_; }

 private:
  std::string field_;
  std::pair<int, int> size_;
  std::vector<double> scale_, ratio_;
  bool dct_scale_;  // used when fused with decode_image
};

class DecodeRandomResizedCrop : public DecodeImageOp {
 public:
  DecodeRandomResizedCrop(ParamReader& decode, ParamReader& crop)
      : DecodeImageOp(decode), crop_(crop) {}

 protected:
  absl::StatusOr<Tensor> Decode(const Tensor& bytes, Rng& rng) const override {
    auto [out_h, out_w] = crop_.size();
    std::optional<ImageSize> full = JpegSize(bytes.data);
    // A header without a size (a damaged file) goes the whole decode's way, to its error.
    if (!full || full->width <= 0 || full->height <= 0 || !crop_.dct_scale()) {
      ASSIGN_OR_RETURN(Tensor image, DecodeImage(bytes.data, channels_));
      Rect r =
          crop_.PickRect(static_cast<int>(image.shape[1]), static_cast<int>(image.shape[0]), rng);
      return CropResize(image, r.x, r.y, r.w, r.h, out_h, out_w);
    }
    Rect r = crop_.PickRect(full->width, full->height, rng);
    // Smallest scale at which the crop still has at least the output's pixels.
    int need_w = static_cast<int>(std::ceil(out_w * full->width / r.w));
    int need_h = static_cast<int>(std::ceil(out_h * full->height / r.h));
    const int denom = PickJpegScale(*full, need_w, need_h).second;  // numerator is 1
    // Decode only the crop at that scale, plus one pixel each side (the bilinear interpolation
    // reads up to half a pixel beyond the crop), and resize it in the whole image's coordinates:
    // the result is bit for bit that of the whole image decoded at this scale, cropped and
    // resized.
    const int scaled_w = (full->width + denom - 1) / denom;
    const int scaled_h = (full->height + denom - 1) / denom;
    const double fx = static_cast<double>(scaled_w) / full->width;
    const double fy = static_cast<double>(scaled_h) / full->height;
    const int x0 = std::max(0, static_cast<int>(std::floor(r.x * fx)) - 1);
    const int y0 = std::max(0, static_cast<int>(std::floor(r.y * fy)) - 1);
    const int x1 = std::min(scaled_w, static_cast<int>(std::ceil((r.x + r.w) * fx)) + 1);
    const int y1 = std::min(scaled_h, static_cast<int>(std::ceil((r.y + r.h) * fy)) + 1);
    ASSIGN_OR_RETURN(DecodedRegion region,
                     DecodeJpegRegion(bytes.data, channels_, denom, x0, y0, x1 - x0, y1 - y0));
    return CropResizeWithin(region.image, region.x, region.y, scaled_w, scaled_h, r.x * fx,
                            r.y * fy, r.w * fx, r.h * fy, out_h, out_w);
  }

 private:
  RandomResizedCrop crop_;
};

class Flip : public Transform {
 public:
  explicit Flip(ParamReader& p)
      : field_(p.String("field")),
        p_(p.Number("p", 0.5, 0.0, 1.0)),
        vertical_(p.String("direction", "horizontal", {"horizontal", "vertical"}) == "vertical") {}
  Result Apply(Element e, Rng& rng) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    if (t->dtype == DType::kBytes || t->shape.size() < 2 || t->shape.size() > 3) {
      return absl::InvalidArgumentError(
          StrCat("flip: field '", field_, "' must be an image [height, width(, channels)], got ",
                 DTypeName(t->dtype), " ", t->ShapeString()));
    }
    if (!Draw(rng)) return e;
    const int64_t h = t->shape[0], w = t->shape[1];
    const size_t pixel = DTypeSize(t->dtype) * (t->shape.size() == 3 ? t->shape[2] : 1);
    UninitBuffer out(t->data.size());
    const uint8_t* src = t->data.data();
    for (int64_t y = 0; y < h; ++y) {
      const uint8_t* row = src + (vertical_ ? (h - 1 - y) : y) * w * pixel;
      uint8_t* dst = out.data() + y * w * pixel;
      if (vertical_) {
        std::memcpy(dst, row, w * pixel);
      } else {
        for (int64_t x = 0; x < w; ++x)
          std::memcpy(dst + x * pixel, row + (w - 1 - x) * pixel, pixel);
      }
    }
    e.fields[field_] = Tensor{t->dtype, t->shape, std::move(out).Finish()};
    return e;
  }
  // Whether this element is flipped (the op's one random draw).
  bool Draw(Rng& rng) const { return rng.Uniform() < p_; }
  bool vertical() const { return vertical_; }

 private:
  std::string field_;
  double p_;
  bool vertical_;
};

// out[i] = float(in[i]) * a[i] + b[i] for i < n. SSE2 does 16 values at a time with exactly the
// scalar expression per lane (one multiply, then one add, each rounded to float: no fused
// multiply-add), so the result is bit for bit the scalar loop's. With `stream` (and `out` 16-byte
// aligned) the stores bypass the cache: a batch buffer is written once and read much later, so
// loading its lines first (as ordinary stores do) only costs memory bandwidth. The caller issues
// the fence (EndStreaming) before the values are read.
void ConvertRow(const uint8_t* in, const float* a, const float* b, size_t n, float* out,
                bool stream) {
  size_t i = 0;
#ifdef __SSE2__
  stream = stream && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const __m128i zero = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
    const __m128i words[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                              _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
    for (size_t j = 0; j < 4; ++j) {
      const __m128 f = _mm_cvtepi32_ps(words[j]);
      const __m128 scaled = _mm_mul_ps(f, _mm_loadu_ps(a + i + 4 * j));
      const __m128 value = _mm_add_ps(scaled, _mm_loadu_ps(b + i + 4 * j));
      if (stream) {
        _mm_stream_ps(out + i + 4 * j, value);
      } else {
        _mm_storeu_ps(out + i + 4 * j, value);
      }
    }
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]) * a[i] + b[i];
}

// Orders the streaming stores before whatever follows (handing the values to another thread).
void EndStreaming() {
#ifdef __SSE2__
  _mm_sfence();
#endif
}

// Copies one row of a uint8 HWC image (w pixels of c values) to `out` in output order: HWC, or
// CHW planes of `plane` values apart; mirrored when hflip.
void GatherRow(const uint8_t* row, int64_t w, int64_t c, bool hflip, bool chw, int64_t plane,
               uint8_t* out) {
  if (!chw && !hflip) {
    std::memcpy(out, row, static_cast<size_t>(w * c));
  } else if (!chw) {
    for (int64_t x = 0; x < w; ++x) std::memcpy(out + x * c, row + (w - 1 - x) * c, c);
  } else if (c == 3) {
    uint8_t *r = out, *g = out + plane, *bl = out + 2 * plane;
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t* p = row + (hflip ? w - 1 - x : x) * 3;
      r[x] = p[0], g[x] = p[1], bl[x] = p[2];
    }
  } else {
    for (int64_t k = 0; k < c; ++k)
      for (int64_t x = 0; x < w; ++x) out[k * plane + x] = row[(hflip ? w - 1 - x : x) * c + k];
  }
}

// One pass from a uint8 HWC image to `dst`: flipped as asked, in HWC or CHW layout, each value
// kept (a == nullptr: uint8 out) or converted to v * a[k] + b[k] (float out), the expression
// normalize evaluates, so the values are bit for bit those of flip, then normalize. Each row is
// gathered into output order, then converted 16 values at a time (ConvertRow).
// `stream`: dst is a batch buffer's slot (see ConvertRow).
void FlipConvert(const uint8_t* src, int64_t h, int64_t w, int64_t c, bool hflip, bool vflip,
                 bool chw, const float* a, const float* b, uint8_t* dst, bool stream = false) {
  const int64_t plane = h * w;
  auto source_row = [&](int64_t y) { return src + (vflip ? h - 1 - y : y) * w * c; };
  if (a == nullptr) {
    for (int64_t y = 0; y < h; ++y)
      GatherRow(source_row(y), w, c, hflip, chw, plane, chw ? dst + y * w : dst + y * w * c);
    return;
  }
  // The row's values and their coefficients, in output order.
  const size_t n = static_cast<size_t>(w * c);
  std::vector<uint8_t> values(n);
  std::vector<float> as(n), bs(n);
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t x = 0; x < w; ++x) {
      const size_t i = static_cast<size_t>(chw ? k * w + x : x * c + k);
      as[i] = a[k], bs[i] = b[k];
    }
  }
  float* out = reinterpret_cast<float*>(dst);
  for (int64_t y = 0; y < h; ++y) {
    GatherRow(source_row(y), w, c, hflip, chw, w, values.data());
    if (!chw) {
      ConvertRow(values.data(), as.data(), bs.data(), n, out + y * w * c, stream);
      continue;
    }
    for (int64_t k = 0; k < c; ++k) {
      ConvertRow(values.data() + k * w, as.data() + k * w, bs.data() + k * w,
                 static_cast<size_t>(w), out + k * plane + y * w, stream);
    }
  }
  if (stream) EndStreaming();
}

class Normalize : public Transform {
 public:
  explicit Normalize(ParamReader& p)
      : field_(p.String("field")),
        mean_(p.NumberList("mean", std::vector<double>{0.0}, 1, 4)),
        std_(p.NumberList("std", std::vector<double>{1.0}, 1, 4, 1e-12, 1e12)),
        chw_(p.String("layout", "HWC", {"HWC", "CHW"}) == "CHW"),
        scale_(p.Number("scale", 1.0 / 255.0)),
        uint8_(p.String("dtype", "float32", {"float32", "uint8"}) == "uint8") {
    if (uint8_ && (p.Has("mean") || p.Has("std") || p.Has("scale"))) {
      p.Fail("dtype",
             "with \"dtype\": \"uint8\" the values are left as they are (for normalizing on the "
             "GPU); drop mean, std and scale, or use \"dtype\": \"float32\"");
    }
  }
  Result Apply(Element e, Rng&) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    RETURN_IF_ERROR(CheckInput(*t));
    const int64_t h = t->shape[0], w = t->shape[1], c = t->shape[2];
    const int64_t plane = h * w;
    UninitBuffer out(static_cast<size_t>(plane * c) * (uint8_ ? 1 : sizeof(float)));
    std::vector<int64_t> shape = chw_ ? std::vector<int64_t>{c, h, w} : t->shape;
    if (uint8_) {
      FlipConvert(t->values<uint8_t>(), h, w, c, false, false, chw_, nullptr, nullptr, out.data());
      e.fields[field_] = Tensor{DType::kUint8, std::move(shape), std::move(out).Finish()};
      return e;
    }
    std::vector<float> a, b;
    Coefficients(c, t->dtype, &a, &b);
    if (t->dtype == DType::kUint8) {
      // The fused image chain's conversion routine, without flips: one place for the arithmetic.
      FlipConvert(t->values<uint8_t>(), h, w, c, false, false, chw_, a.data(), b.data(),
                  out.data());
    } else {
      ConvertFloat(t->values<float>(), reinterpret_cast<float*>(out.data()), plane, c, a, b);
    }
    e.fields[field_] = Tensor{DType::kFloat32, std::move(shape), std::move(out).Finish()};
    return e;
  }

  // The checks Apply makes on its input.
  absl::Status CheckInput(const Tensor& t) const {
    if ((t.dtype != DType::kUint8 && t.dtype != DType::kFloat32) || t.shape.size() != 3) {
      return absl::InvalidArgumentError(StrCat("normalize: field '", field_,
                                               "' must be an image [height, width, channels] "
                                               "of uint8 or float32, got ",
                                               DTypeName(t.dtype), " ", t.ShapeString()));
    }
    if (uint8_ && t.dtype != DType::kUint8) {
      return absl::InvalidArgumentError(StrCat("normalize: \"dtype\": \"uint8\" needs a uint8 ",
                                               "image, but field '", field_, "' is ",
                                               DTypeName(t.dtype)));
    }
    const int64_t c = t.shape[2];
    if ((mean_.size() != 1 && static_cast<int64_t>(mean_.size()) != c) ||
        (std_.size() != 1 && static_cast<int64_t>(std_.size()) != c)) {
      return absl::InvalidArgumentError(StrCat("normalize: field '", field_, "' has ", c,
                                               " channels but mean/std have ", mean_.size(), "/",
                                               std_.size(), " values"));
    }
    return absl::OkStatus();
  }
  // out = (x * scale - mean) / std = x * a + b, per channel.
  void Coefficients(int64_t c, DType in, std::vector<float>* a, std::vector<float>* b) const {
    a->resize(c);
    b->resize(c);
    for (int64_t k = 0; k < c; ++k) {
      double m = mean_.size() == 1 ? mean_[0] : mean_[k];
      double s = std_.size() == 1 ? std_[0] : std_[k];
      double in_scale = in == DType::kUint8 ? scale_ : 1.0;
      (*a)[k] = static_cast<float>(in_scale / s);
      (*b)[k] = static_cast<float>(-m / s);
    }
  }
  bool chw() const { return chw_; }
  bool uint8() const { return uint8_; }

 private:
  // A float image: one pass per channel with the layout decided outside the inner loop
  // (vectorises). uint8 images go through FlipConvert.
  void ConvertFloat(const float* src, float* dst, int64_t plane, int64_t c,
                    const std::vector<float>& a, const std::vector<float>& b) const {
    for (int64_t k = 0; k < c; ++k) {
      const float ak = a[k], bk = b[k];
      if (chw_) {
        float* out = dst + k * plane;
        for (int64_t i = 0; i < plane; ++i) out[i] = src[i * c + k] * ak + bk;
      } else {
        for (int64_t i = 0; i < plane; ++i) {
          dst[i * c + k] = src[i * c + k] * ak + bk;
        }
      }
    }
  }

  std::string field_;
  std::vector<double> mean_, std_;
  bool chw_;
  double scale_;
  bool uint8_;
};

// decode_image (with or without random_resized_crop), then flips, then normalize, as one op: the
// decoded (cropped) image goes through one pass that flips, converts and lays it out, straight
// into the batch buffer when the map stage hands it a slot. Each part draws from its own op's
// random stream, so the result is bit for bit that of the ops run one after another.
class ImageChain : public SlotWriter {
 public:
  ImageChain(std::unique_ptr<Transform> decode, uint64_t decode_seed, std::string field,
             int channels, std::optional<std::pair<int, int>> size,
             std::vector<std::pair<Flip, uint64_t>> flips, std::optional<Normalize> normalize)
      : decode_(std::move(decode)),
        decode_seed_(decode_seed),
        field_(std::move(field)),
        channels_(channels),
        size_(size),
        flips_(std::move(flips)),
        normalize_(std::move(normalize)) {}

  size_t slot_bytes() const override {
    if (!size_) return 0;
    return static_cast<size_t>(size_->first) * size_->second * channels_ * ValueBytes();
  }
  Result Apply(Element e, Rng& rng) const override { return ApplyInto(std::move(e), rng, {}, {}); }
  Result ApplyInto(Element e, Rng&, uint8_t* slot, Buffer slot_view) const override {
    const uint64_t epoch = static_cast<uint64_t>(e.epoch), index = e.sample_index;
    Rng decode_rng(MixSeed({decode_seed_, epoch, index}));
    ASSIGN_OR_RETURN(std::optional<Element> decoded, decode_->Apply(std::move(e), decode_rng));
    if (!decoded) return std::nullopt;  // on_error: skip
    e = std::move(*decoded);
    const Tensor image = e.fields.at(field_);
    if (normalize_) RETURN_IF_ERROR(normalize_->CheckInput(image));
    bool hflip = false, vflip = false;
    for (const auto& [flip, seed] : flips_) {
      Rng flip_rng(MixSeed({seed, epoch, index}));
      if (flip.Draw(flip_rng)) (flip.vertical() ? vflip : hflip) ^= true;
    }
    const int64_t h = image.shape[0], w = image.shape[1], c = image.shape[2];
    const size_t bytes = static_cast<size_t>(h * w * c) * ValueBytes();
    UninitBuffer own;
    if (slot == nullptr || bytes != slot_bytes()) {  // no slot, or not the expected size
      own = UninitBuffer(bytes);
      slot = own.data();
    }
    const bool chw = normalize_ && normalize_->chw();
    const uint8_t* src = image.values<uint8_t>();
    if (ValueBytes() == 1) {
      FlipConvert(src, h, w, c, hflip, vflip, chw, nullptr, nullptr, slot);
    } else {
      std::vector<float> a, b;
      normalize_->Coefficients(c, DType::kUint8, &a, &b);
      FlipConvert(src, h, w, c, hflip, vflip, chw, a.data(), b.data(), slot,
                  /*stream=*/own.data() == nullptr);
    }
    std::vector<int64_t> shape = chw ? std::vector<int64_t>{c, h, w} : image.shape;
    Buffer data = own.data() != nullptr ? std::move(own).Finish() : std::move(slot_view);
    e.fields[field_] = Tensor{ValueBytes() == 1 ? DType::kUint8 : DType::kFloat32, std::move(shape),
                              std::move(data)};
    return e;
  }

 private:
  size_t ValueBytes() const { return normalize_ && !normalize_->uint8() ? sizeof(float) : 1; }

  std::unique_ptr<Transform> decode_;
  uint64_t decode_seed_;
  std::string field_;
  int channels_;
  std::optional<std::pair<int, int>> size_;  // the crop's [height, width], if there is a crop
  std::vector<std::pair<Flip, uint64_t>> flips_;
  std::optional<Normalize> normalize_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transform>> MakeDecodeRandomResizedCrop(ParamReader& decode,
                                                                       ParamReader& crop) {
  return std::unique_ptr<Transform>(new DecodeRandomResizedCrop(decode, crop));
}

absl::StatusOr<std::unique_ptr<Transform>> MakeImageChain(
    ParamReader& decode, ParamReader* crop, uint64_t decode_seed,
    const std::vector<std::pair<ParamReader*, uint64_t>>& flips, ParamReader* normalize) {
  const std::string field = decode.String("field");
  const int channels = static_cast<int>(decode.Int("channels", 3, 1, 3));
  std::unique_ptr<Transform> first;
  std::optional<std::pair<int, int>> size;
  if (crop != nullptr) {
    auto fused = std::make_unique<DecodeRandomResizedCrop>(decode, *crop);
    size = crop->Size("size");
    first = std::move(fused);
  } else {
    first = std::make_unique<DecodeImageOp>(decode);
  }
  std::vector<std::pair<Flip, uint64_t>> flip_ops;
  flip_ops.reserve(flips.size());
  for (const auto& [params, seed] : flips) flip_ops.emplace_back(Flip(*params), seed);
  std::optional<Normalize> norm;
  if (normalize != nullptr) norm.emplace(*normalize);
  return std::unique_ptr<Transform>(new ImageChain(std::move(first), decode_seed, field, channels,
                                                   size, std::move(flip_ops), std::move(norm)));
}

void RegisterImageTransforms() {
  const OpTraits keeps{.count = CountEffect::kKeeps};
  const OpTraits fusable{.count = CountEffect::kKeeps, .fusable = true};
  (void)RegisterBuiltinTransform("decode_image", TransformFactoryOf<DecodeImageOp>(),
                                 {.count = CountEffect::kKeeps, .drops_on_error_skip = true});
  (void)RegisterBuiltinTransform("resize", TransformFactoryOf<Resize>(), keeps);
  (void)RegisterBuiltinTransform("center_crop", TransformFactoryOf<CenterCrop>(), keeps);
  (void)RegisterBuiltinTransform("random_resized_crop", TransformFactoryOf<RandomResizedCrop>(),
                                 fusable);
  (void)RegisterBuiltinTransform("flip", TransformFactoryOf<Flip>(), fusable);
  (void)RegisterBuiltinTransform("normalize", TransformFactoryOf<Normalize>(), fusable);
}

}  // namespace stoker::data
