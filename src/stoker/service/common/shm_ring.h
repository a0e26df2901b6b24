// The shared-memory hand-off between a worker and a consumer on the same host (docs/protocol.md,
// "Shared memory"). GetElements stays the control path (requests, acknowledgements, flow control,
// exactly-once bookkeeping); only the payload bytes move through memory both processes map:
//
//   worker:   ShmSegment (a sealed memfd of fixed size, one per consumer and job) with a ShmRing of
//             slots; Place copies an element's encoding into a free slot, and the response carries
//             (slot id, offset, length) instead of the bytes.
//   consumer: ShmMapping maps the segment read-only through /proc/<worker pid>/fd/<fd> (nothing
//             is left in /dev/shm, and the pages live while either side maps them: a worker killed
//             with SIGKILL takes nothing the consumer received with it). Slot() wraps a slot as a
//             Buffer (zero-copy up to Python's arrays); when its last reference is gone, the slot
//             id is queued and the consumer's next request to that worker releases it.
//
// Every slot reference a consumer receives is released once, whether it delivers or drops the
// element (the Buffer's destruction does it). Releasing an id twice, or an unknown one, is ignored,
// so a request that failed may carry its releases again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer.h"

namespace stoker::service {

// A ring allocator of byte ranges in [0, capacity): allocations are made in order after the
// previous one (wrapping to 0), and space is reused once every older allocation was released, so
// slots released out of order wait for the older ones. Bookkeeping is bounded by the live slots.
// Before going on into space it never used, the ring wraps to 0 once the space before its oldest
// slot holds the most it ever had in flight plus the allocation: the bytes it touches (touched())
// are about twice that peak, not the capacity (a 256 MiB segment with at most 16 MiB in flight
// touches ~34 MiB), and a lap from 0 fails only when more is in flight than ever before.
//
// Thread safety: none (ShmSegment guards it).
class ShmRing {
 public:
  static constexpr uint64_t kAlign = 64;  // offsets and sizes are multiples of this
  struct Slot {
    int64_t id = 0;
    uint64_t offset = 0;
  };
  explicit ShmRing(uint64_t capacity) : capacity_(capacity / kAlign * kAlign) {}

  // A free range of `size` bytes (> 0); nullopt when the ring has no room for it now.
  std::optional<Slot> Allocate(uint64_t size);
  // Frees slot `id`; false (and nothing changes) if it is not a live slot.
  bool Release(int64_t id);

  uint64_t capacity() const { return capacity_; }
  size_t live() const { return live_; }
  size_t tracked() const { return entries_.size(); }  // live ones and freed ones behind the oldest
  uint64_t used() const;  // bytes of the slots from the oldest live one to head
  uint64_t touched() const { return touched_; }  // the high-water mark of allocations

 private:
  struct Entry {
    uint64_t offset;
    uint64_t size;
    bool released;
  };
  const uint64_t capacity_;
  std::deque<Entry> entries_;  // allocation order; ids first_id_, first_id_ + 1, ...
  int64_t first_id_ = 1;
  uint64_t head_ = 0;     // where the next allocation goes, if it fits
  uint64_t touched_ = 0;  // the end of the furthest allocation so far
  uint64_t peak_ = 0;     // the most used() ever was
  uint64_t lap_end_ = 0;  // wrapped: the end of the newest slot before 0
  size_t live_ = 0;
};

// What a consumer needs to map a worker's segment (GetElementsResponse.shm).
struct ShmSegmentInfo {
  int64_t id = 0;  // unique within the worker process
  int64_t pid = 0;
  int64_t fd = 0;
  uint64_t size = 0;
  uint64_t inode = 0;  // the consumer checks it opened this very file
};

// The worker's side: a memfd of a fixed size (sealed against growing and shrinking), mapped
// read-write. Thread-safe.
class ShmSegment {
 public:
  // An error names the cause (memfd_create, ftruncate or mmap failed).
  static absl::StatusOr<std::shared_ptr<ShmSegment>> Create(uint64_t size);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Copies the concatenation of `pieces` (`size` bytes in all) into a free slot; nullopt when the
  // ring has no room (the caller sends the bytes inline).
  std::optional<ShmRing::Slot> Place(const std::vector<Buffer>& pieces, uint64_t size);
  void Release(int64_t id);
  const ShmSegmentInfo& info() const { return info_; }
  size_t live_slots() const;

 private:
  explicit ShmSegment(uint64_t size) : ring_(size) { info_.fd = -1; }
  ShmSegmentInfo info_;
  uint8_t* base_ = nullptr;
  mutable absl::Mutex mu_;
  ShmRing ring_ ABSL_GUARDED_BY(mu_);
};

// The consumer's side: a worker's segment mapped read-only. Thread-safe.
class ShmMapping : public std::enable_shared_from_this<ShmMapping> {
 public:
  // Opens /proc/<pid>/fd/<fd> and checks it is the segment described (inode, size, seals). An
  // error names the path and the cause (another user's worker, another PID namespace, ...).
  static absl::StatusOr<std::shared_ptr<ShmMapping>> Open(const ShmSegmentInfo& info);
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  int64_t id() const { return info_.id; }
  // The slot's bytes, sharing the mapping; once the last copy is gone, `id` is queued for
  // release. An error if [offset, offset + length) is not inside the segment.
  absl::StatusOr<Buffer> Slot(int64_t id, uint64_t offset, uint64_t length);
  // The slot ids released since the last call (for the next request to the worker).
  std::vector<int64_t> TakeReleased();
  // Queues ids again (a request that carried them failed).
  void Requeue(const std::vector<int64_t>& ids);

 private:
  explicit ShmMapping(const ShmSegmentInfo& info) : info_(info) {}
  const ShmSegmentInfo info_;
  const uint8_t* base_ = nullptr;
  absl::Mutex mu_;
  std::vector<int64_t> released_ ABSL_GUARDED_BY(mu_);
};

// This process's host as the hand-off needs it: the boot id and the network and PID namespaces.
// Equal strings mean the other process's /proc/<pid> is visible here. Empty if unknown.
const std::string& ShmHostIdentity();

}  // namespace stoker::service
