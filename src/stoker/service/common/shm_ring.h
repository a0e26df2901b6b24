// The shared-memory hand-off between a worker and a consumer on the same host (docs/protocol.md,
// "Shared memory"). GetElements stays the control path (requests, acknowledgements, flow control,
// exactly-once bookkeeping); only the payload bytes move through memory both processes map:
//
//   worker:   ShmSegment (a sealed memfd of fixed size: one per consumer and job, or one for every
//             trainer of a cross-trainer job) with a ShmRing of slots; Place copies an element's
//             encoding into a free slot, and the response carries (reference id, offset, length)
//             instead of the bytes. Share hands another consumer a reference to bytes already
//             placed (ShmSharedCopy: one copy of a cross-trainer job's element for all its
//             trainers on this host); the bytes are reused once every reference is released.
//   consumer: ShmMapping maps the segment read-only through /proc/<worker pid>/fd/<fd> (nothing
//             is left in /dev/shm, and the pages live while either side maps them: a worker killed
//             with SIGKILL takes nothing the consumer received with it). Slot() wraps a slot as a
//             Buffer (zero-copy up to Python's arrays); when its last reference is gone, the slot
//             id is queued and the consumer's next request to that worker releases it.
//
// Every slot reference a consumer receives is released once, whether it delivers or drops the
// element (the Buffer's destruction does it). Releasing an id twice, an unknown one, or another
// consumer's, is ignored, so a request that failed may carry its releases again.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
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
// slot holds the most it ever had in flight (at least 4 MiB, or a quarter of a smaller ring) plus
// the allocation: the bytes it touches (touched()) are about twice that, not the capacity (a 256
// MiB segment with at most 16 MiB in flight touches ~34 MiB), and a lap from 0 fails only when
// more is in flight than ever before (and than the minimum).
//
// Thread safety: none (ShmSegment guards it).
class ShmRing {
 public:
  static constexpr uint64_t kAlign = 64;  // offsets and sizes are multiples of this
  struct Slot {
    int64_t id = 0;
    uint64_t offset = 0;
  };
  explicit ShmRing(uint64_t capacity)
      : capacity_(capacity / kAlign * kAlign),
        min_lap_(std::min<uint64_t>(capacity_ / 4 / kAlign * kAlign, uint64_t{4} << 20)) {}

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
  const uint64_t min_lap_;     // a lap from 0 has room for at least this much (see Allocate)
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
// read-write. Bytes placed in it are held by references, each of one holder (a consumer's client
// id); a consumer releases each reference it received once. Thread-safe.
class ShmSegment {
 public:
  // One reference to bytes in the segment.
  struct Ref {
    int64_t id = 0;       // what the holder releases (the reply's shm_slot)
    uint64_t offset = 0;  // where the bytes start
    int64_t stored = 0;   // the copy itself, for Share
  };
  // An error names the cause (memfd_create, ftruncate or mmap failed).
  static absl::StatusOr<std::shared_ptr<ShmSegment>> Create(uint64_t size);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Copies the concatenation of `pieces` (`size` bytes in all) into a free slot, referenced once
  // by `holder`; nullopt when the ring has no room (the caller sends the bytes inline).
  std::optional<Ref> Place(const std::vector<Buffer>& pieces, uint64_t size, int64_t holder);
  // Another reference, for `holder`, to the copy `stored` (a Ref::stored of a Place that has
  // returned); nullopt once every reference to it was released (its space may be reused).
  std::optional<Ref> Share(int64_t stored, int64_t holder);
  // Drops reference `id` of `holder`; a copy's slot is reused once no reference to it is left.
  // An unknown id, one released already, or another holder's, is ignored.
  void Release(int64_t id, int64_t holder);
  const ShmSegmentInfo& info() const { return info_; }
  size_t live_slots() const;  // copies with a reference left

 private:
  explicit ShmSegment(uint64_t size) : ring_(size) { info_.fd = -1; }
  struct Held {
    int64_t stored;  // the ring's slot id
    int64_t holder;
  };
  struct Stored {
    uint64_t offset;
    int64_t references;
  };
  ShmSegmentInfo info_;
  uint8_t* base_ = nullptr;
  mutable absl::Mutex mu_;
  ShmRing ring_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Held> references_ ABSL_GUARDED_BY(mu_);  // by reference id
  std::map<int64_t, Stored> stored_ ABSL_GUARDED_BY(mu_);    // by slot id
  int64_t next_reference_ ABSL_GUARDED_BY(mu_) = 1;
  // [0, populated_) was populated before the ring first used it, in chunks of this size.
  static constexpr uint64_t kPopulateChunk = uint64_t{2} << 20;
  uint64_t populated_ ABSL_GUARDED_BY(mu_) = 0;
};

// One element's bytes placed once and referenced by every consumer that gets them (a
// cross-trainer job's window element: all its trainers on the worker's host read one copy). The
// first Get copies them into the segment and keeps a reference of its own, so that consumers that
// ask later share the copy even after the earlier ones released theirs; Drop gives that reference
// up (every trainer has the element), after which a Get copies again only if no consumer holds
// the copy any more. Thread-safe; a Get that copies holds this object's lock for the copy, so a
// second consumer waits for it rather than copying too.
class ShmSharedCopy {
 public:
  // A reference for `holder` in `segment` (copying `pieces`, `size` bytes, if the copy there is
  // gone or in another segment); nullopt when the segment has no room. `*shared` (if not null)
  // says whether it refers to a copy made before.
  std::optional<ShmSegment::Ref> Get(const std::shared_ptr<ShmSegment>& segment,
                                     const std::vector<Buffer>& pieces, uint64_t size,
                                     int64_t holder, bool* shared = nullptr);
  void Drop();
  ~ShmSharedCopy() { Drop(); }
  // The holder of this object's own reference (no consumer's client id).
  static constexpr int64_t kKeeper = std::numeric_limits<int64_t>::min();

 private:
  absl::Mutex mu_;
  std::shared_ptr<ShmSegment> segment_ ABSL_GUARDED_BY(mu_);
  int64_t stored_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t keeper_ ABSL_GUARDED_BY(mu_) = 0;  // this object's reference id (0: none)
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
