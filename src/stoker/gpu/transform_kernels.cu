#include <algorithm>

#include "stoker/gpu/transform_kernels.h"

namespace stoker::gpu {
namespace {

// One thread per output pixel (grid-stride): consecutive threads write consecutive pixels of
// each output plane, so the stores coalesce in both layouts.
template <typename In, typename Out>
__global__ void TransformKernel(TransformParams p, const SampleParams* samples, const In* in,
                                Out* out) {
  const int64_t pixels = p.OutputPixels();
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < pixels; i += step) {
    TransformPixel(p, samples, in, out, i);
  }
}

}  // namespace

cudaError_t LaunchTransform(const TransformParams& p, const SampleParams* samples,
                            ScalarType in_type, const void* in, ScalarType out_type, void* out,
                            cudaStream_t stream) {
  const int64_t pixels = p.OutputPixels();
  if (pixels == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((pixels + kThreads - 1) / kThreads, int64_t{1} << 20));
  const bool supported = DispatchTypes(in_type, out_type, [&](auto in_tag, auto out_tag) {
    using In = decltype(in_tag);
    using Out = decltype(out_tag);
    TransformKernel<In, Out><<<blocks, kThreads, 0, stream>>>(
        p, samples, static_cast<const In*>(in), static_cast<Out*>(out));
  });
  if (!supported) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace stoker::gpu
