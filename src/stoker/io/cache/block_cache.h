// BlockCache: the process's cache of object bytes (docs/reads.md, "The block cache"), in fixed-size
// blocks keyed by (object URL, ETag, block index). Because the ETag is part of the key, a changed
// object (new ETag) never hits the old version's blocks.
//
//   RAM   byte-budgeted LRU. Blocks are handed out as Handles; a block held by a Handle is pinned:
//         it stays in the cache (and counts against the budget) until released, so the budget
//         is exceeded only by what readers are holding.
//   disk  optional: a folder with its own byte budget (DiskTier) that survives restarts. Blocks
//         are written to it in the background when inserted into RAM, and a RAM miss that hits
//         disk is promoted to RAM.
//
// Single flight: LookupOrFetch makes exactly one caller the fetcher of a missing block; concurrent
// callers for the same block wait for it (one request for N concurrent misses).
//
// Thread safety: thread-safe. Handles may be released on any thread; they must not outlive the
// cache. Waiters run on the thread that calls Fulfill or Abandon, outside the cache's lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer.h"
#include "stoker/core/thread_pool.h"

namespace stoker::io {

class DiskTier;

struct BlockKey {
  std::string url;     // the object's URL (ObjectStore::Url)
  std::string etag;    // the version of the object the block was read from
  uint64_t index = 0;  // block number: bytes [index × block_size, (index + 1) × block_size)
  bool operator==(const BlockKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockKey& k) {
    return H::combine(std::move(h), k.url, k.etag, k.index);
  }
};

struct BlockCacheOptions {
  uint64_t memory_bytes = uint64_t{1} << 30;
  // Empty: no disk tier.
  std::string disk_dir;
  uint64_t disk_bytes = uint64_t{10} << 30;
};

struct BlockCacheStats {
  uint64_t hits = 0;           // lookups served from RAM or disk
  uint64_t disk_hits = 0;      // ...of which from disk
  uint64_t misses = 0;         // lookups that had to fetch (in LookupOrFetch: the fetchers)
  uint64_t joined = 0;         // LookupOrFetch misses that waited for another caller's fetch
  uint64_t evictions = 0;      // blocks dropped from RAM for the budget
  uint64_t memory_bytes = 0;   // bytes of the blocks in RAM now
  uint64_t memory_blocks = 0;  // blocks in RAM now
  uint64_t disk_bytes = 0;     // bytes of the files in the disk tier now
  uint64_t disk_evictions = 0;
  uint64_t disk_write_errors = 0;
};

class BlockCache {
 public:
  struct Entry;

  // A pinned block. Move-only; empty when default-constructed or moved from.
  class Handle {
   public:
    Handle() = default;
    ~Handle() { Release(); }
    Handle(Handle&& other) noexcept { *this = std::move(other); }
    Handle& operator=(Handle&& other) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;

    explicit operator bool() const { return entry_ != nullptr; }
    // The block's bytes; the Buffer stays valid after the handle is released.
    const Buffer& data() const;
    void Release();

   private:
    friend class BlockCache;
    Handle(BlockCache* cache, std::shared_ptr<Entry> entry)
        : cache_(cache), entry_(std::move(entry)) {}
    BlockCache* cache_ = nullptr;
    std::shared_ptr<Entry> entry_;
  };

  // A cache with the given options; fails when the disk folder cannot be created or listed.
  static absl::StatusOr<std::shared_ptr<BlockCache>> Create(BlockCacheOptions options);
  // A RAM-only cache of `memory_bytes`.
  explicit BlockCache(uint64_t memory_bytes);
  // Finishes the disk writes already queued.
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // The block from RAM, else from disk (then kept in RAM too); an empty handle on a miss.
  Handle Lookup(const BlockKey& key);
  // Puts `block` in RAM (replacing an older one) and queues it for the disk tier.
  Handle Insert(const BlockKey& key, Buffer block);

  // Single-flight lookup. Returns:
  //   kHit     *hit holds the block (RAM or disk).
  //   kJoined  another caller is fetching the block; `waiter` will be called with it (or with
  //            that fetch's error) when it arrives.
  //   kFetch   the caller is now the block's fetcher and must call exactly one of Fulfill or
  //            Abandon for `key`; `waiter` is not used.
  enum class Outcome { kHit, kJoined, kFetch };
  using Waiter = absl::AnyInvocable<void(absl::StatusOr<Handle>) &&>;
  Outcome LookupOrFetch(const BlockKey& key, Handle* hit, Waiter waiter);
  // The fetcher's block arrived: insert it and hand it to every waiter.
  Handle Fulfill(const BlockKey& key, Buffer block);
  // The fetcher failed: every waiter gets `status`; the next lookup fetches again.
  void Abandon(const BlockKey& key, const absl::Status& status);

  // Drops every block of `url` (all ETags), in RAM and on disk; pinned blocks stay valid for
  // their holders but are no longer found.
  void EraseObject(std::string_view url);

  // Waits until the disk writes queued so far are done (for tests and orderly shutdown).
  void Flush();

  BlockCacheStats stats() const;
  uint64_t memory_budget() const { return memory_budget_; }
  bool has_disk_tier() const { return disk_ != nullptr; }
  // The disk tier's byte budget (0 without one).
  uint64_t disk_budget() const { return disk_budget_; }

 private:
  BlockCache(uint64_t memory_bytes, std::unique_ptr<DiskTier> disk);
  // A RAM hit: the block pinned and made most recently used, counted as a hit; empty otherwise
  // (nothing counted).
  Handle PinIfCachedLocked(const BlockKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts under the lock; returns a pinned handle.
  Handle InsertLocked(const BlockKey& key, Buffer block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(Entry* entry);
  void QueueDiskWrite(const BlockKey& key, Buffer block);

  const uint64_t memory_budget_;
  const std::unique_ptr<DiskTier> disk_;
  uint64_t disk_budget_ = 0;                 // set once by Create
  std::unique_ptr<ThreadPool> disk_writer_;  // one thread; null without a disk tier

  mutable absl::Mutex mu_;
  absl::CondVar disk_idle_;
  // lru_ front is the most recently used; every entry in map_ is in lru_ and vice versa.
  std::list<std::shared_ptr<Entry>> lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BlockKey, std::list<std::shared_ptr<Entry>>::iterator> map_
      ABSL_GUARDED_BY(mu_);
  // Blocks being fetched, with the callers waiting for them.
  absl::flat_hash_map<BlockKey, std::vector<Waiter>> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t usage_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t disk_writes_queued_ ABSL_GUARDED_BY(mu_) = 0;
  BlockCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

// Checks done once per cached block. The bytes a BlockCache hands out (Handle::data(), and every
// slice of it) carry a small set of "verified" ranges that lives and dies with the block's bytes
// in RAM. A reader that checks a range of them (the shard reader's record CRC) marks it, and a
// later read of the same range from the same cached bytes may skip the check: the bytes are
// immutable, and a block that enters RAM again (fetched again, or promoted from disk) is new
// bytes with no marks, so every block is checked where it enters the cache. Ranges outside cached
// blocks (a range assembled across blocks, bytes from any other source) are never marked.
// Ranges shorter than kMinVerifiedRangeBytes are not remembered: checking them costs less than
// the bookkeeping, and the marks then stay below 0.5% of the cached bytes. Thread-safe.
inline constexpr size_t kMinVerifiedRangeBytes = 4096;
// True when `bytes` is exactly a range of a cached block that MarkVerified marked.
bool IsVerified(const Buffer& bytes);
// Marks `bytes` as checked; a no-op unless it lies within a cached block's bytes.
void MarkVerified(const Buffer& bytes);

// The process-wide cache shared by the CLI, the mount and every CachedStore that does not bring
// its own. Created on first use: RAM budget from STOKER_CACHE_BYTES (a byte size as
// core/byte_size.h reads it, e.g. 4g; default 1 GiB); a disk tier when STOKER_CACHE_DIR is set,
// with STOKER_CACHE_DISK_BYTES (default 10 GiB). A bad setting is logged and the default used.
// Thread-safe.
std::shared_ptr<BlockCache> DefaultBlockCache();

}  // namespace stoker::io
