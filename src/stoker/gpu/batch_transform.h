// The arithmetic of the device batch transform (crop, flip, layout, dtype conversion, normalize),
// written once for the CUDA kernel and the CPU reference: every output pixel is computed by
// TransformPixel, which compiles as __host__ __device__ under nvcc and as plain C++ elsewhere. The
// CPU build runs it through TransformBatchOnCpu (unit-tested against the pipeline's own flip,
// center_crop, cast and normalize ops); the CUDA build launches it per pixel (device_batcher.cu).
//
// A batch is [n, in_h, in_w, channels] (HWC per sample, row-major). The output is
// [n, out_h, out_w, channels] or, with out_chw, [n, channels, out_h, out_w]. Sample i reads the
// window of out_h x out_w pixels at (samples[i].y0, samples[i].x0), mirrored as samples[i].flip
// says. With `affine` the output is float32 and out = float(x) * scale[c] + shift[c] (what the
// pipeline's normalize computes: scale = pixel_scale / std, shift = -mean / std); without it the
// value is converted with a C++ static_cast to the output type (the same type or float32).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define STOKER_HOST_DEVICE __host__ __device__
#else
#define STOKER_HOST_DEVICE
#endif

namespace stoker::gpu {

// Element types of the tensors the device path moves (the numeric dtypes of stoker's tensors).
enum class ScalarType : int32_t { kUint8 = 0, kInt32 = 1, kInt64 = 2, kFloat32 = 3 };

STOKER_HOST_DEVICE inline size_t ScalarSize(ScalarType t) {
  return t == ScalarType::kUint8 ? 1 : t == ScalarType::kInt64 ? 8 : 4;
}

inline constexpr int kMaxChannels = 4;

// Mirroring of one sample (bits).
enum FlipBits : int32_t { kFlipHorizontal = 1, kFlipVertical = 2 };

// The choices made for one sample of the batch (on the host, from the pipeline's seeded Rng).
struct SampleParams {
  int32_t y0 = 0, x0 = 0;  // top-left corner of the crop window in the input image
  int32_t flip = 0;        // FlipBits
};

// One batch's geometry and value mapping; a plain value passed to the kernel by value.
struct TransformParams {
  int32_t n = 0, in_h = 0, in_w = 0, channels = 0;
  int32_t out_h = 0, out_w = 0;  // the crop window (in_h x in_w: no crop)
  bool out_chw = false;
  bool affine = false;  // float32 output, out = x * scale[c] + shift[c]
  float scale[kMaxChannels] = {1, 1, 1, 1};
  float shift[kMaxChannels] = {0, 0, 0, 0};

  STOKER_HOST_DEVICE int64_t OutputPixels() const { return int64_t{n} * out_h * out_w; }
  STOKER_HOST_DEVICE int64_t OutputValues() const { return OutputPixels() * channels; }
};

// Multiplies and adds with one rounding each (no fused multiply-add on the device), so that the
// kernel's float32 output is bit-identical to the CPU's.
STOKER_HOST_DEVICE inline float Affine(float x, float scale, float shift) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(x, scale), shift);
#else
  const float product = x * scale;
  return product + shift;
#endif
}

// Computes every channel of output pixel `pixel` (in [0, p.OutputPixels())).
template <typename In, typename Out>
STOKER_HOST_DEVICE inline void TransformPixel(const TransformParams& p, const SampleParams* samples,
                                              const In* in, Out* out, int64_t pixel) {
  const int64_t plane = int64_t{p.out_h} * p.out_w;
  const int64_t n = pixel / plane;
  const int64_t in_plane = pixel - n * plane;  // index within the sample's output plane
  const int32_t y = static_cast<int32_t>(in_plane / p.out_w);
  const int32_t x = static_cast<int32_t>(in_plane - int64_t{y} * p.out_w);
  const SampleParams s = samples[n];
  const int32_t sy = s.y0 + ((s.flip & kFlipVertical) ? p.out_h - 1 - y : y);
  const int32_t sx = s.x0 + ((s.flip & kFlipHorizontal) ? p.out_w - 1 - x : x);
  const In* src = in + ((n * p.in_h + sy) * p.in_w + sx) * p.channels;
  for (int32_t k = 0; k < p.channels; ++k) {
    const int64_t o = p.out_chw ? (n * p.channels + k) * plane + in_plane : pixel * p.channels + k;
    if (p.affine) {
      out[o] = static_cast<Out>(Affine(static_cast<float>(src[k]), p.scale[k], p.shift[k]));
    } else {
      out[o] = static_cast<Out>(src[k]);
    }
  }
}

// Why `p`, with input type `in` and output type `out`, cannot be run ("" when it can): shapes,
// windows inside the images, channel count, affine only to float32, conversions only to the same
// type or float32. `samples` may be null (then the windows are not checked).
std::string CheckTransform(const TransformParams& p, const SampleParams* samples, ScalarType in,
                           ScalarType out);

// The affine coefficients of normalize for one channel, computed as the pipeline's normalize op
// computes them: scale = float(pixel_scale / std), shift = float(-mean / std).
inline void NormalizeCoefficients(double mean, double std, double pixel_scale, float* scale,
                                  float* shift) {
  *scale = static_cast<float>(pixel_scale / std);
  *shift = static_cast<float>(-mean / std);
}

// Calls f(In{}, Out{}) with the C++ types of (in, out): one of the seven supported pairs (the same
// type, or any type to float32). Returns false for another pair.
template <typename F>
bool DispatchTypes(ScalarType in, ScalarType out, F&& f) {
  if (out != in && out != ScalarType::kFloat32) return false;
  const bool to_float = out == ScalarType::kFloat32;
  switch (in) {
    case ScalarType::kUint8:
      to_float ? f(uint8_t{}, float{}) : f(uint8_t{}, uint8_t{});
      return true;
    case ScalarType::kInt32:
      to_float ? f(int32_t{}, float{}) : f(int32_t{}, int32_t{});
      return true;
    case ScalarType::kInt64:
      to_float ? f(int64_t{}, float{}) : f(int64_t{}, int64_t{});
      return true;
    case ScalarType::kFloat32:
      f(float{}, float{});
      return true;
  }
  return false;
}

// The CPU reference: runs TransformPixel for every output pixel. `in` holds the input batch,
// `out` p.OutputValues() values of type `out_type`. Checks nothing (call CheckTransform first).
void TransformBatchOnCpu(const TransformParams& p, const SampleParams* samples, ScalarType in_type,
                         const void* in, ScalarType out_type, void* out);

}  // namespace stoker::gpu
