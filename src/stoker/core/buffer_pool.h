// BufferPool: recycled, aligned allocations for reads. A block comes from a size class (powers of
// two from 4 KiB); when the last Buffer sharing it is dropped, it goes back to the pool instead of
// to the allocator, so a steady stream of reads reuses memory whose pages are already mapped (no
// page faults and no kernel zero-fill per read). Blocks are aligned to 4096 bytes, which direct I/O
// (O_DIRECT) needs. The pool keeps at most `max_cached_bytes` of idle blocks; beyond that, returned
// blocks are freed.
//
// Thread safety: every method is thread-safe; blocks may be returned from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "stoker/core/buffer.h"

namespace stoker {

class BufferPool {
 public:
  static constexpr size_t kAlignment = 4096;

  // A writable block of at least `size` bytes, owned by the caller until it is shared.
  class Block {
   public:
    Block() = default;
    uint8_t* data() const { return data_; }
    size_t capacity() const { return capacity_; }
    // An immutable view of [offset, offset + length) that keeps the whole block alive; the block
    // goes back to the pool when this and every copy or slice of it are gone. The Block must not
    // be written after sharing.
    Buffer Share(size_t offset, size_t length) const;

   private:
    friend class BufferPool;
    std::shared_ptr<uint8_t> storage_;
    uint8_t* data_ = nullptr;
    size_t capacity_ = 0;
  };

  explicit BufferPool(size_t max_cached_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool (256 MiB of idle blocks at most); never destroyed.
  static BufferPool& Default();

  Block Get(size_t size);

  struct Stats {
    uint64_t allocated = 0;  // blocks that came from the allocator
    uint64_t reused = 0;     // blocks that came from the pool
    uint64_t idle_bytes = 0;
  };
  Stats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the blocks' deleters, which may outlive the pool
};

}  // namespace stoker
