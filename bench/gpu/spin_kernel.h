// The stand-in training step of the device check: a kernel that keeps the GPU busy for a fixed
// time per batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace stoker::bench {

// Queues a kernel on `stream` that reads `batch` (device memory, >= 32 bytes, or null) and spins
// for `seconds`. `sink` is a device word it may write.
cudaError_t LaunchTrainingStep(const void* batch, double seconds, uint64_t* sink,
                               cudaStream_t stream);

}  // namespace stoker::bench
