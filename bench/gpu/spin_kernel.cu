#include "spin_kernel.h"

namespace stoker::bench {
namespace {

__device__ uint64_t GlobalNanos() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Stands in for a training step: busy for `nanos`, reading one byte of the batch so that the step
// depends on it.
__global__ void Spin(const uint8_t* batch, uint64_t nanos, uint64_t* sink) {
  const uint64_t start = GlobalNanos();
  uint64_t x = batch != nullptr ? batch[threadIdx.x] : 0;
  while (GlobalNanos() - start < nanos) x = x * 6364136223846793005ull + 1;
  if (x == 42) *sink = x;  // never true in practice; keeps the loop
}

}  // namespace

cudaError_t LaunchTrainingStep(const void* batch, double seconds, uint64_t* sink,
                               cudaStream_t stream) {
  Spin<<<1, 32, 0, stream>>>(static_cast<const uint8_t*>(batch),
                             static_cast<uint64_t>(seconds * 1e9), sink);
  return cudaGetLastError();
}

}  // namespace stoker::bench
