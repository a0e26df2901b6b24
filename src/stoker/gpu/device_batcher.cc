#include "stoker/gpu/device_batcher.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "stoker/gpu/transform_kernels.h"

namespace stoker::gpu {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(std::string("CUDA: ") + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

#define STOKER_CUDA_RETURN(call)                  \
  do {                                            \
    cudaError_t stoker_cuda_error = (call);       \
    if (stoker_cuda_error != cudaSuccess) {       \
      return CudaError(stoker_cuda_error, #call); \
    }                                             \
  } while (0)

// Makes `device` the calling thread's current CUDA device for a scope and restores the previous
// one after, so that stoker never changes the device a caller (e.g. torch) works on.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) error_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && error_ == cudaSuccess) cudaSetDevice(previous_);
  }
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

#define STOKER_DEVICE_SCOPE(device) \
  DeviceScope device_scope(device); \
  STOKER_CUDA_RETURN(device_scope.error())

cudaStream_t AsStream(uintptr_t value) {
  if (value == 0 || value == 1) return cudaStreamLegacy;
  if (value == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(value);
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct BatcherShared {
  int device = 0;
  cudaStream_t stream = nullptr;  // nullptr: the legacy default stream
  bool own_stream = false;
  cudaMemPool_t pool = nullptr;
  ~BatcherShared() {
    DeviceScope device_scope(device);
    cudaStreamSynchronize(stream);
    if (own_stream) cudaStreamDestroy(stream);
    if (pool != nullptr) cudaMemPoolDestroy(pool);
  }
};

struct DeviceBatcher::Slot {
  void* host = nullptr;  // pinned
  size_t capacity = 0;
  cudaEvent_t done = nullptr;  // recorded after the last copy out of `host`
  bool used = false;
  ~Slot() {
    if (done != nullptr) {
      cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
    if (host != nullptr) cudaFreeHost(host);
  }
};

size_t HostArray::ByteSize() const {
  size_t n = ScalarSize(type);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

int CudaDeviceCount(std::string* why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr) {
      *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
      if (e == cudaErrorInsufficientDriver) *why += "; is the NVIDIA driver installed?";
    }
    cudaGetLastError();  // clear it
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the CUDA driver reports no device";
  return count;
}

DeviceBlock::~DeviceBlock() {
  DeviceScope device_scope(device_);
  if (data_ != nullptr) cudaFreeAsync(data_, AsStream(free_stream_.load()));
  if (ready_event_ != 0) cudaEventDestroy(reinterpret_cast<cudaEvent_t>(ready_event_));
}

absl::Status DeviceBlock::WaitOnStream(uintptr_t stream) const {
  if (stream == static_cast<uintptr_t>(-1)) return absl::OkStatus();
  STOKER_DEVICE_SCOPE(device_);
  STOKER_CUDA_RETURN(
      cudaStreamWaitEvent(AsStream(stream), reinterpret_cast<cudaEvent_t>(ready_event_), 0));
  free_stream_.store(stream);
  return absl::OkStatus();
}

absl::Status DeviceBlock::Synchronize() const {
  STOKER_DEVICE_SCOPE(device_);
  STOKER_CUDA_RETURN(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(ready_event_)));
  return absl::OkStatus();
}

DeviceBatcher::DeviceBatcher(const DeviceBatcherOptions& options) : options_(options) {}

DeviceBatcher::~DeviceBatcher() {
  DeviceScope device_scope(options_.device);
  slots_.clear();  // waits for their copies
}

absl::StatusOr<std::unique_ptr<DeviceBatcher>> DeviceBatcher::Create(
    const DeviceBatcherOptions& options) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible (" + why + ")");
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError("CUDA device " + std::to_string(options.device) +
                                      " does not exist (" + std::to_string(count) +
                                      " visible: 0.." + std::to_string(count - 1) + ")");
  }
  if (options.slots < 1 || options.chunk_bytes == 0) {
    return absl::InvalidArgumentError("DeviceBatcher needs at least one slot and chunk_bytes > 0");
  }
  std::unique_ptr<DeviceBatcher> b(new DeviceBatcher(options));
  auto shared = std::make_shared<BatcherShared>();
  shared->device = options.device;
  STOKER_DEVICE_SCOPE(options.device);
  if (options.own_stream) {
    STOKER_CUDA_RETURN(cudaStreamCreateWithFlags(&shared->stream, cudaStreamNonBlocking));
    shared->own_stream = true;
  }
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = options.device;
  STOKER_CUDA_RETURN(cudaMemPoolCreate(&shared->pool, &props));
  uint64_t keep = options.pool_keep_bytes;
  STOKER_CUDA_RETURN(cudaMemPoolSetAttribute(shared->pool, cudaMemPoolAttrReleaseThreshold, &keep));
  b->shared_ = std::move(shared);
  for (int i = 0; i < options.slots; ++i) {
    auto slot = std::make_unique<Slot>();
    STOKER_CUDA_RETURN(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
    b->slots_.push_back(std::move(slot));
  }
  return b;
}

uintptr_t DeviceBatcher::stream() const { return reinterpret_cast<uintptr_t>(shared_->stream); }

absl::StatusOr<DeviceBatcher::Slot*> DeviceBatcher::AcquireSlot(size_t bytes) {
  Slot* slot = slots_[next_slot_].get();
  next_slot_ = (next_slot_ + 1) % slots_.size();
  if (slot->used) {
    auto t0 = std::chrono::steady_clock::now();
    STOKER_CUDA_RETURN(cudaEventSynchronize(slot->done));
    stats_.staging_wait_seconds += Since(t0);
  }
  if (slot->capacity < bytes) {
    if (slot->host != nullptr) STOKER_CUDA_RETURN(cudaFreeHost(slot->host));
    slot->host = nullptr;
    slot->capacity = 0;
    const size_t capacity =
        (bytes + options_.chunk_bytes - 1) / options_.chunk_bytes * options_.chunk_bytes;
    STOKER_CUDA_RETURN(cudaHostAlloc(&slot->host, capacity, cudaHostAllocDefault));
    slot->capacity = capacity;
  }
  slot->used = true;
  return slot;
}

absl::Status DeviceBatcher::StageAndCopy(Slot& slot, const void* src, size_t bytes, void* dst) {
  auto* staged = static_cast<uint8_t*>(slot.host);
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t offset = 0; offset < bytes; offset += options_.chunk_bytes) {
    const size_t n = std::min(options_.chunk_bytes, bytes - offset);
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(staged + offset, from + offset, n);
    stats_.staging_copy_seconds += Since(t0);
    STOKER_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + offset, staged + offset, n,
                                       cudaMemcpyHostToDevice, shared_->stream));
  }
  stats_.bytes_copied += static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DeviceBlock>> DeviceBatcher::Allocate(size_t bytes) {
  std::shared_ptr<DeviceBlock> block(new DeviceBlock);
  block->shared_ = shared_;
  block->device_ = options_.device;
  block->free_stream_.store(reinterpret_cast<uintptr_t>(shared_->stream));
  cudaEvent_t event = nullptr;
  STOKER_CUDA_RETURN(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  block->ready_event_ = reinterpret_cast<uintptr_t>(event);
  void* data = nullptr;
  STOKER_CUDA_RETURN(
      cudaMallocFromPoolAsync(&data, std::max<size_t>(bytes, 1), shared_->pool, shared_->stream));
  block->data_ = data;
  block->size_ = bytes;
  return block;
}

absl::Status DeviceBatcher::Finish(DeviceBlock& block) {
  STOKER_CUDA_RETURN(
      cudaEventRecord(reinterpret_cast<cudaEvent_t>(block.ready_event_), shared_->stream));
  ++stats_.batches;
  return absl::OkStatus();
}

absl::StatusOr<DeviceArray> DeviceBatcher::Submit(const HostArray& in) {
  STOKER_DEVICE_SCOPE(options_.device);
  const size_t bytes = in.ByteSize();
  auto slot = AcquireSlot(bytes);
  if (!slot.ok()) return slot.status();
  auto block = Allocate(bytes);
  if (!block.ok()) return block.status();
  if (absl::Status s = StageAndCopy(**slot, in.data, bytes, (*block)->data()); !s.ok()) return s;
  STOKER_CUDA_RETURN(cudaEventRecord((*slot)->done, shared_->stream));
  if (absl::Status s = Finish(**block); !s.ok()) return s;
  return DeviceArray{*std::move(block), in.type, in.shape};
}

absl::StatusOr<DeviceArray> DeviceBatcher::SubmitTransform(const HostArray& in,
                                                           const TransformParams& p,
                                                           const std::vector<SampleParams>& samples,
                                                           ScalarType out_type) {
  if (in.shape.size() != 4 || in.shape[0] != p.n || in.shape[1] != p.in_h ||
      in.shape[2] != p.in_w || in.shape[3] != p.channels) {
    return absl::InvalidArgumentError("the batch's shape does not match the transform's [n, " +
                                      std::to_string(p.in_h) + ", " + std::to_string(p.in_w) +
                                      ", " + std::to_string(p.channels) + "]");
  }
  if (samples.size() != static_cast<size_t>(p.n)) {
    return absl::InvalidArgumentError("one SampleParams per sample is needed");
  }
  if (std::string why = CheckTransform(p, samples.data(), in.type, out_type); !why.empty()) {
    return absl::InvalidArgumentError(why);
  }
  STOKER_DEVICE_SCOPE(options_.device);
  // The input and the per-sample parameters travel together through one staging buffer.
  const size_t in_bytes = AlignUp(in.ByteSize());
  const size_t sample_bytes = samples.size() * sizeof(SampleParams);
  auto slot = AcquireSlot(in_bytes + sample_bytes);
  if (!slot.ok()) return slot.status();
  auto input = Allocate(in_bytes + sample_bytes);
  if (!input.ok()) return input.status();
  auto* device_in = static_cast<uint8_t*>((*input)->data());
  std::memcpy(static_cast<uint8_t*>((*slot)->host) + in_bytes, samples.data(), sample_bytes);
  STOKER_CUDA_RETURN(cudaMemcpyAsync(device_in + in_bytes,
                                     static_cast<uint8_t*>((*slot)->host) + in_bytes, sample_bytes,
                                     cudaMemcpyHostToDevice, shared_->stream));
  if (absl::Status s = StageAndCopy(**slot, in.data, in.ByteSize(), device_in); !s.ok()) return s;
  STOKER_CUDA_RETURN(cudaEventRecord((*slot)->done, shared_->stream));

  auto output = Allocate(static_cast<size_t>(p.OutputValues()) * ScalarSize(out_type));
  if (!output.ok()) return output.status();
  const auto* device_samples = reinterpret_cast<const SampleParams*>(device_in + in_bytes);
  STOKER_CUDA_RETURN(LaunchTransform(p, device_samples, in.type, device_in, out_type,
                                     (*output)->data(), shared_->stream));
  if (absl::Status s = Finish(**output); !s.ok()) return s;
  // The input block goes back to the pool in stream order, after the kernel.
  input->reset();
  std::vector<int64_t> shape = p.out_chw ? std::vector<int64_t>{p.n, p.channels, p.out_h, p.out_w}
                                         : std::vector<int64_t>{p.n, p.out_h, p.out_w, p.channels};
  return DeviceArray{*std::move(output), out_type, std::move(shape)};
}

absl::StatusOr<std::vector<uint8_t>> DeviceBlock::CopyToHost() const {
  if (absl::Status s = Synchronize(); !s.ok()) return s;
  STOKER_DEVICE_SCOPE(device_);
  std::vector<uint8_t> out(size_);
  STOKER_CUDA_RETURN(cudaMemcpy(out.data(), data_, size_, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace stoker::gpu
