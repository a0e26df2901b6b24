// DeviceBatcher: moves host batches to a CUDA device (docs/gpu.md). Built only with
// -DSTOKER_CUDA=ON; this header needs no CUDA headers (streams and events are passed as
// uintptr_t, the value of a cudaStream_t / cudaEvent_t).
//
// Per Submit: the host bytes are copied, in chunks, into one of a ring of pinned (page-locked)
// staging buffers, and each chunk is sent with cudaMemcpyAsync on the batcher's stream as soon as
// it is staged, so the CPU copy of chunk k+1 overlaps the DMA of chunk k. With a transform, a
// fused kernel (crop, flip, HWC->CHW, dtype conversion, normalize: batch_transform.h) then writes
// the output. Submit returns as soon as the work is queued: the returned DeviceArray carries an
// event recorded after its last operation, and a consumer makes its own stream wait on that event
// (WaitOnStream) rather than the host waiting. Device memory comes from a CUDA memory pool
// (cudaMallocFromPoolAsync) that keeps freed blocks for the next batches. A staging buffer is
// reused only once its copies have completed: with `slots` buffers, at most `slots` batches are
// being copied at once, and Submit blocks when all are busy (the bound on batches in flight).
//
// Thread safety: a DeviceBatcher is used by one thread at a time. DeviceArray and DeviceBlock
// are thread-safe (the last reference may be dropped on any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/gpu/batch_transform.h"

namespace stoker::gpu {

struct BatcherShared;

// Device memory holding one array; freed (stream-ordered, back into the pool) when the last
// reference goes.
class DeviceBlock {
 public:
  ~DeviceBlock();
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }
  // The event recorded after the last operation writing this block (a cudaEvent_t).
  uintptr_t ready_event() const { return ready_event_; }

  // Makes `stream` wait, on the device, until the data is ready; the host does not wait. The
  // memory is later freed in `stream`'s order, so work queued on `stream` before the last
  // reference goes may still read it. stream: a cudaStream_t value, or 1 (the legacy default
  // stream) or 2 (the per-thread default stream), as in the DLPack protocol; -1 does nothing.
  absl::Status WaitOnStream(uintptr_t stream) const;
  // Blocks the calling thread until the data is ready.
  absl::Status Synchronize() const;
  // Waits for the data and copies it to host memory: for tests and checks.
  absl::StatusOr<std::vector<uint8_t>> CopyToHost() const;

 private:
  friend class DeviceBatcher;
  DeviceBlock() = default;
  std::shared_ptr<BatcherShared> shared_;  // keeps the pool and the stream alive
  void* data_ = nullptr;
  size_t size_ = 0;
  int device_ = 0;
  uintptr_t ready_event_ = 0;
  mutable std::atomic<uintptr_t> free_stream_{
      0};  // the batcher's stream until a consumer's is known
};

struct DeviceArray {
  std::shared_ptr<DeviceBlock> block;
  ScalarType type = ScalarType::kUint8;
  std::vector<int64_t> shape;
  void* data() const { return block ? block->data() : nullptr; }
};

// A host tensor: contiguous, row-major, in any memory (pageable or pinned).
struct HostArray {
  const void* data = nullptr;
  ScalarType type = ScalarType::kUint8;
  std::vector<int64_t> shape;
  size_t ByteSize() const;
};

struct DeviceBatcherOptions {
  int device = 0;
  // true: the batcher's own non-blocking stream; false: the legacy default stream (everything
  // else on the device that uses it is then ordered with the batcher's work).
  bool own_stream = true;
  int slots = 3;                             // pinned staging buffers (batches copied at once)
  size_t chunk_bytes = size_t{4} << 20;      // staged and sent in pieces of this size
  size_t pool_keep_bytes = size_t{4} << 30;  // device memory the pool keeps when idle
};

struct DeviceBatcherStats {
  int64_t batches = 0;
  int64_t bytes_copied = 0;         // host-to-device bytes
  double staging_wait_seconds = 0;  // Submit blocked on a busy staging buffer
  double staging_copy_seconds = 0;  // CPU copies into pinned memory
};

class DeviceBatcher {
 public:
  // Fails (naming the device and CUDA's error) when CUDA finds no such device.
  static absl::StatusOr<std::unique_ptr<DeviceBatcher>> Create(const DeviceBatcherOptions& options);
  ~DeviceBatcher();  // waits for the work it queued

  // Copies `in` to the device unchanged.
  absl::StatusOr<DeviceArray> Submit(const HostArray& in);
  // Copies the image batch `in` ([n, h, w, c], the shape must match `p`) and transforms it into an
  // array of `out_type`; `samples` has p.n entries. Errors name what does not fit.
  absl::StatusOr<DeviceArray> SubmitTransform(const HostArray& in, const TransformParams& p,
                                              const std::vector<SampleParams>& samples,
                                              ScalarType out_type);

  // The stream the batcher queues its work on (a cudaStream_t value; 0 for the legacy default).
  uintptr_t stream() const;
  int device() const { return options_.device; }
  DeviceBatcherStats stats() const { return stats_; }

  // Copies a device array back to host memory (waits): for tests and checks.
  static absl::StatusOr<std::vector<uint8_t>> CopyToHost(const DeviceArray& array) {
    if (!array.block) return absl::InvalidArgumentError("empty DeviceArray");
    return array.block->CopyToHost();
  }

 private:
  struct Slot;
  explicit DeviceBatcher(const DeviceBatcherOptions& options);
  absl::StatusOr<Slot*> AcquireSlot(size_t bytes);
  // Stages `bytes` from `src` through `slot` into device memory at `dst`, chunk by chunk.
  absl::Status StageAndCopy(Slot& slot, const void* src, size_t bytes, void* dst);
  absl::StatusOr<std::shared_ptr<DeviceBlock>> Allocate(size_t bytes);
  absl::Status Finish(DeviceBlock& block);  // records its ready event

  DeviceBatcherOptions options_;
  std::shared_ptr<BatcherShared> shared_;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_slot_ = 0;
  DeviceBatcherStats stats_;
};

// The number of CUDA devices (0 when the driver finds none) and, when there are none, CUDA's
// reason in `why`.
int CudaDeviceCount(std::string* why = nullptr);

}  // namespace stoker::gpu
