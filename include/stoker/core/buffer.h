// Buffer: an immutable, reference-counted byte range. Copies and slices share the same storage, so
// a coalesced read can hand each sample a slice without copying, and a Python array can keep the
// bytes alive after the reader is gone.
//
// Thread safety: a Buffer is a value; distinct Buffer objects may be used from different threads
// concurrently (the shared storage is read-only once built).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace stoker {

class Buffer {
 public:
  Buffer() = default;

  // Takes ownership of `bytes` without copying.
  static Buffer FromString(std::string bytes);
  static Buffer FromVector(std::vector<uint8_t> bytes);
  // Copies `bytes`.
  static Buffer Copy(std::string_view bytes);
  // Concatenates `parts` into one new buffer (a single part is returned as is).
  static Buffer Concat(const std::vector<Buffer>& parts);

  const uint8_t* data() const { return data_; }
  const char* chars() const { return reinterpret_cast<const char*>(data_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {chars(), size_}; }
  std::string ToString() const { return std::string(view()); }

  // A view of [offset, offset + length) sharing this buffer's storage; clamped to the buffer.
  Buffer Slice(size_t offset, size_t length) const;

  // Wraps storage owned by `owner` (which must keep [data, data + size) alive and unchanged).
  static Buffer Wrap(std::shared_ptr<const void> owner, const uint8_t* data, size_t size) {
    return Buffer(std::move(owner), data, size);
  }

  // The object that owns the storage (for keeping it alive from other languages).
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  Buffer(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// MutableBuffer: a fixed-size writable allocation that becomes a Buffer when done. The bytes start
// uninitialised (no zero-fill pass: readers overwrite them anyway). Not thread-safe while being
// filled.
class MutableBuffer {
 public:
  explicit MutableBuffer(size_t size);
  uint8_t* data() { return storage_.get(); }
  char* chars() { return reinterpret_cast<char*>(storage_.get()); }
  size_t size() const { return size_; }
  // Shrinks the logical size (for a read that returned fewer bytes than allocated).
  void Truncate(size_t size) { size_ = std::min(size, size_); }
  // Gives up the storage; this object is empty afterwards.
  Buffer Finish() &&;

 private:
  std::unique_ptr<uint8_t[]> storage_;
  size_t size_;
};

}  // namespace stoker
