// Tensors and elements: what flows between pipeline stages.
//
// A Tensor is a dtype, a shape and one contiguous, immutable Buffer (row-major). Because the bytes
// live in a stoker::Buffer, a batch can be handed to numpy or torch without a copy. An Element is a
// set of named tensors plus the keys of the samples it was made from (one key before `batch`, one
// per sample after).
//
// Thread safety: Tensor and Element are values; distinct objects may be used from different
// threads concurrently (their Buffers are read-only).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"

namespace stoker::data {

// Like MutableBuffer, but the bytes start uninitialised: for outputs that are overwritten whole
// (decoded images, batches), where zero-filling would cost a pass over memory. Not thread-safe
// while being filled.
class UninitBuffer {
 public:
  UninitBuffer() = default;
  // Large buffers (batches) are mapped with transparent huge pages where the kernel allows, so
  // filling them costs hundreds of page faults instead of tens of thousands. When the last user
  // of such a mapping lets go, it is kept (up to 1 GiB in all, thread-safe) for the next buffer
  // of the same size, whose pages are then already there: zeroing fresh pages for every batch was
  // a quarter of the image pipeline's CPU (P3, measured).
  explicit UninitBuffer(size_t size);
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }
  Buffer Finish() && {
    const uint8_t* bytes = data_;
    data_ = nullptr;
    return Buffer::Wrap(std::move(owner_), bytes, size_);
  }

 private:
  std::shared_ptr<void> owner_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// kBytes is an undecoded field (a JPEG, a text file): shape [] and the raw bytes as data.
enum class DType { kUint8, kInt32, kInt64, kFloat32, kBytes };

std::string_view DTypeName(DType dtype);
std::optional<DType> DTypeFromName(std::string_view name);
// Size of one value in bytes; 1 for kBytes.
size_t DTypeSize(DType dtype);

struct Tensor {
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;  // empty for a scalar
  Buffer data;
  // -1: `data` is host memory. Otherwise the CUDA device whose memory `data` points into (made
  // only by the to_device op, see to_device.h): its bytes must not be read on the host.
  int32_t device = -1;

  int64_t NumValues() const;        // product of shape (1 for a scalar)
  std::string ShapeString() const;  // "[224,224,3]"

  static Tensor Bytes(Buffer bytes) { return Tensor{DType::kBytes, {}, std::move(bytes)}; }
  static Tensor Scalar(int64_t value);
  static Tensor FromFloats(std::vector<int64_t> shape, const std::vector<float>& values);
  template <typename T>
  const T* values() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

struct Element {
  std::map<std::string, Tensor> fields;  // sorted by name, so iteration order is stable
  std::vector<std::string> keys;
  // Identity of the element for derived randomness: the source's sample index (for a batch, that
  // of its first sample) and the epoch it was read in.
  uint64_t sample_index = 0;
  int64_t epoch = 0;

  size_t ByteSize() const;
  // The field `name`, or NotFound naming the field, the key and the fields present.
  absl::StatusOr<const Tensor*> Field(std::string_view name) const;
  std::string FirstKey() const { return keys.empty() ? std::string() : keys.front(); }
};

// Reads a scalar numeric tensor (any integer or float dtype) or decimal text (kBytes) as int64.
absl::StatusOr<int64_t> ScalarAsInt(const Tensor& tensor);

}  // namespace stoker::data
