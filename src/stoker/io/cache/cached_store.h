// CachedStore: an ObjectStore decorator that reads through a shared BlockCache.
//
//   Stat     cached for stat_ttl, to learn an object's size and ETag without a request per read.
//   ReadAsync  reads whole blocks through the cache: hits are served from RAM (or disk); runs of
//            missing blocks are fetched as one request each (at most max_request_bytes, so a large
//            read still runs as concurrent requests), with if_match = the ETag, and concurrent
//            misses of one block share one request (single flight). A range within one block comes
//            back as a slice of the cached block (no copy); a range across blocks is assembled.
//   List     passes through.
//   Put/OpenWriter/Delete  pass through and then drop the object's cached size, ETag and blocks.
//
// Staleness: a change made by another process is seen within stat_ttl (until then the old
// version's blocks may be served; never a mix of versions in one read: a read that finds the
// object changed under it starts over once with a fresh Stat).
//
// Thread safety: thread-safe. ReadAsync blocks the caller for a Stat when the object's size and
// ETag are not cached, and for disk-tier reads of cached blocks; callbacks run on the base store's
// threads (or the caller's, on a full hit).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

struct CachedStoreOptions {
  // 1 MiB: below S3's max_hole (2.7 MB), so reading a whole block for a small range costs little
  // more time than the request it needs anyway; small enough that random small reads do not
  // multiply the bytes read by much (see docs/reads.md).
  uint64_t block_size = 1 << 20;
  absl::Duration stat_ttl = absl::Seconds(10);
  // Runs of missing blocks are fetched in requests of at most this many bytes (the part size).
  uint64_t max_request_bytes = 8 << 20;
  // A read that finds the object changed under it starts over once with a fresh Stat (which
  // blocks its thread). False: it fails with FailedPrecondition instead, and no read ever blocks
  // once its object's Stat is cached (with an infinite stat_ttl, reads may then be issued from
  // I/O completion threads, as the read planner does).
  bool restart_on_change = true;
};

// What one CachedStore's reads found (blocks), and what it fetched from its base store.
struct CachedStoreStats {
  uint64_t hits = 0;           // blocks served from the cache (RAM or disk)
  uint64_t misses = 0;         // blocks this store fetched
  uint64_t joined = 0;         // blocks that arrived through another reader's fetch
  uint64_t fetched_bytes = 0;  // bytes read from the base store by block fetches
};

class CachedStore : public ObjectStore {
 public:
  CachedStore(std::shared_ptr<ObjectStore> base, std::shared_ptr<BlockCache> cache,
              CachedStoreOptions options = {});

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;  // blocks on a miss, as ReadAsync
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

  // Forgets what is cached about `key` (size, ETag, blocks).
  void Invalidate(std::string_view key);

  // Read-ahead into the cache (the mount uses it), in two steps so that a caller can account for
  // the bytes it will request before they are requested. A BlockRun is a run of consecutive blocks
  // of one object that the caller has claimed in the cache (it is their single-flight fetcher) and
  // that one request reads; every run must be passed to FetchRun.
  struct BlockRun {
    std::string key;       // the object's key in the base store
    std::string url;       // its URL (BlockKey::url)
    std::string version;   // BlockKey::etag of its blocks
    std::string if_match;  // the ETag the request must match ("" when the store has none)
    uint64_t first_block = 0;
    uint64_t last_block = 0;
    ByteRange bytes;  // the part of the object the request reads
  };
  // Claims the blocks of `range` (clamped to the object) that are neither cached nor being
  // fetched, as runs of at most max_request_bytes, exactly as a read would fetch them. Errors are
  // the Stat's.
  absl::StatusOr<std::vector<BlockRun>> ClaimMissing(std::string_view key, ByteRange range);
  // Reads `run` from the base store in one request and fulfills each of its blocks in the cache (or
  // abandons them all with the error); `each_block`, when set, then gets each block (or the error).
  // `done` runs once at the end. Callbacks run on the base store's threads (or the caller's).
  using BlockCallback = absl::AnyInvocable<void(uint64_t block, absl::StatusOr<Buffer> data)>;
  void FetchRun(BlockRun run, BlockCallback each_block, absl::AnyInvocable<void() &&> done);

  CachedStoreStats stats() const;
  BlockCache& cache() { return *cache_; }
  ObjectStore& base() { return *base_; }
  const CachedStoreOptions& options() const { return options_; }

 private:
  absl::StatusOr<ObjectInfo> StatCached(std::string_view key, bool fresh);
  void ReadWithRetry(ReadRequest request, ReadCallback done, bool may_retry);
  // `blocks` (claimed, ascending) as runs of consecutive blocks of at most max_request_bytes.
  std::vector<BlockRun> GroupRuns(std::string_view key, const ObjectInfo& info,
                                  const std::vector<uint64_t>& blocks) const;

  const std::shared_ptr<ObjectStore> base_;
  const std::shared_ptr<BlockCache> cache_;
  const CachedStoreOptions options_;

  struct CachedStat {
    ObjectInfo info;
    absl::Time expires;
  };
  absl::Mutex mu_;
  std::map<std::string, CachedStat, std::less<>> stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> hits_{0}, misses_{0}, joined_{0}, fetched_bytes_{0};
};

}  // namespace stoker::io
