#include "stoker/core/buffer_pool.h"

#include <bit>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace stoker {
namespace {

constexpr int kMinShift = 12;  // 4 KiB
constexpr int kClasses = 40;

int ClassOf(size_t size) {
  size = std::max<size_t>(size, size_t{1} << kMinShift);
  return std::bit_width(size - 1) - kMinShift;
}

}  // namespace

struct BufferPool::State {
  explicit State(size_t max_cached) : max_cached_bytes(max_cached) {}
  const size_t max_cached_bytes;
  mutable absl::Mutex mu;
  std::vector<uint8_t*> free[kClasses] ABSL_GUARDED_BY(mu);
  size_t idle_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t allocated ABSL_GUARDED_BY(mu) = 0;
  uint64_t reused ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;

  void Return(uint8_t* p, int cls) {
    size_t bytes = size_t{1} << (cls + kMinShift);
    {
      absl::MutexLock lock(&mu);
      if (!closed && idle_bytes + bytes <= max_cached_bytes) {
        free[cls].push_back(p);
        idle_bytes += bytes;
        return;
      }
    }
    std::free(p);
  }
};

Buffer BufferPool::Block::Share(size_t offset, size_t length) const {
  offset = std::min(offset, capacity_);
  length = std::min(length, capacity_ - offset);
  return Buffer::Wrap(std::shared_ptr<const void>(storage_, data_), data_ + offset, length);
}

BufferPool::BufferPool(size_t max_cached_bytes)
    : state_(std::make_shared<State>(max_cached_bytes)) {}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&state_->mu);
  state_->closed = true;
  for (auto& list : state_->free) {
    for (uint8_t* p : list) std::free(p);
    list.clear();
  }
  state_->idle_bytes = 0;
}

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool(size_t{256} << 20);
  return *pool;
}

BufferPool::Block BufferPool::Get(size_t size) {
  int cls = ClassOf(size);
  size_t bytes = size_t{1} << (cls + kMinShift);
  uint8_t* p = nullptr;
  {
    absl::MutexLock lock(&state_->mu);
    if (!state_->free[cls].empty()) {
      p = state_->free[cls].back();
      state_->free[cls].pop_back();
      state_->idle_bytes -= bytes;
      ++state_->reused;
    } else {
      ++state_->allocated;
    }
  }
  if (p == nullptr) {
    p = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, bytes));
    if (p == nullptr) throw std::bad_alloc();
  }
  Block block;
  block.data_ = p;
  block.capacity_ = bytes;
  block.storage_ =
      std::shared_ptr<uint8_t>(p, [state = state_, cls](uint8_t* q) { state->Return(q, cls); });
  return block;
}

BufferPool::Stats BufferPool::stats() const {
  absl::MutexLock lock(&state_->mu);
  return {state_->allocated, state_->reused, state_->idle_bytes};
}

}  // namespace stoker
