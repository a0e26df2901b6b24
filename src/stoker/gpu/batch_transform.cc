#include "stoker/gpu/batch_transform.h"

namespace stoker::gpu {

std::string CheckTransform(const TransformParams& p, const SampleParams* samples, ScalarType in,
                           ScalarType out) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (p.n < 0 || p.in_h <= 0 || p.in_w <= 0 || p.channels <= 0 || p.out_h <= 0 || p.out_w <= 0) {
    return "the batch must be [n, height, width, channels] with positive sizes and a positive "
           "output size";
  }
  if (p.channels > kMaxChannels) {
    return "images have " + str(p.channels) + " channels; at most " + str(kMaxChannels) +
           " are supported";
  }
  if (p.out_h > p.in_h || p.out_w > p.in_w) {
    return "the crop " + str(p.out_h) + "x" + str(p.out_w) + " is larger than the " + str(p.in_h) +
           "x" + str(p.in_w) + " images";
  }
  if (p.affine && out != ScalarType::kFloat32) return "normalizing needs a float32 output";
  if (out != in && out != ScalarType::kFloat32) {
    return "the output type must be the input's or float32";
  }
  if (samples != nullptr) {
    for (int32_t i = 0; i < p.n; ++i) {
      const SampleParams& s = samples[i];
      if (s.y0 < 0 || s.x0 < 0 || s.y0 + p.out_h > p.in_h || s.x0 + p.out_w > p.in_w) {
        return "the crop window of sample " + str(i) + " at (" + str(s.y0) + ", " + str(s.x0) +
               ") is outside the image";
      }
    }
  }
  return "";
}

void TransformBatchOnCpu(const TransformParams& p, const SampleParams* samples, ScalarType in_type,
                         const void* in, ScalarType out_type, void* out) {
  DispatchTypes(in_type, out_type, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    const In* src = static_cast<const In*>(in);
    Out* dst = static_cast<Out*>(out);
    const int64_t pixels = p.OutputPixels();
    for (int64_t i = 0; i < pixels; ++i) TransformPixel(p, samples, src, dst, i);
  });
}

}  // namespace stoker::gpu
