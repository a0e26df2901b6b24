// The CUDA kernel of the batch transform (batch_transform.h), behind a plain launch function so
// that only transform_kernels.cu goes through nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include "stoker/gpu/batch_transform.h"

namespace stoker::gpu {

// Queues the transform of the batch at `in` (device memory) into `out` (device memory,
// p.OutputValues() values of out_type) on `stream`; `samples` (device memory) has p.n entries.
// Returns cudaErrorInvalidValue for an unsupported type pair, else the launch's error. The
// arguments must have passed CheckTransform.
cudaError_t LaunchTransform(const TransformParams& p, const SampleParams* samples,
                            ScalarType in_type, const void* in, ScalarType out_type, void* out,
                            cudaStream_t stream);

}  // namespace stoker::gpu
