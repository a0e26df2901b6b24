// MountFs: the logic of the read-only mount (`stoker mount`, docs/mount.md), kept apart from
// libfuse so that it can be tested without a kernel. Paths are mount-relative ("/", "/a/b.jpg").
//
//   directories  ObjectStore::List with delimiter "/", fetched lazily (on the first lookup or
//                readdir in a folder) and cached for dir_ttl; stat comes from the listing (size,
//                mtime), never a HEAD per file.
//   small files  (size <= small_file_bytes) fetched whole in one request on the first read and
//                held by the open file until a read reaches the end.
//   large files  read through the read planner (RangedReader) over a CachedStore whose BlockCache
//                is shared by every open file (one RAM budget, optional disk tier). A sequential
//                reader gets a read-ahead window (ReadAheadWindow: doubles while sequential,
//                resets on a seek; reads the kernel sends out of order still count as
//                sequential). Read-ahead fills the shared cache directly, block by block, without
//                assembling the bytes for anyone; prefetches in flight across all files are capped
//                at half the cache budget, so many open files cannot blow the budget. Random
//                reads fetch only the cache blocks they touch.
//   keep_cache   Open reports keep_cache when the file's version (ETag, else size and mtime) is
//                the one seen at its previous open, so the kernel's page cache survives.
//
// Thread safety: MountFs is thread-safe (FUSE calls it from many threads). A File is used by any
// thread; its mutable state is guarded by its own mutex, and no lock is held across I/O.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/core/buffer.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/cache/cached_store.h"
#include "stoker/io/object_store.h"
#include "stoker/io/read/range_plan.h"
#include "stoker/io/read/ranged_reader.h"

namespace stoker::fuse {

struct MountFsOptions {
  // How long a directory listing (and so a file's size and mtime) is trusted.
  absl::Duration dir_ttl = absl::Seconds(60);
  // Files up to this size are fetched whole, in one request, on their first read.
  uint64_t small_file_bytes = 1 << 20;
  // Largest read-ahead window of one sequential reader (bytes); also capped at cache budget / 8.
  uint64_t max_read_ahead = 64 << 20;
};

struct Attr {
  bool is_dir = false;
  uint64_t size = 0;
  absl::Time mtime = absl::UnixEpoch();
  std::string etag;
};

class MountFs {
 public:
  class File;

  // `root_key` is the folder inside `base` that becomes the mount's root ("" for a whole bucket;
  // a trailing '/' is optional). `cache` is shared by every file of the mount.
  MountFs(std::shared_ptr<io::ObjectStore> base, std::string root_key,
          std::shared_ptr<io::BlockCache> cache, MountFsOptions options = {});
  ~MountFs();

  // Lists the root folder once, so that a wrong bucket, endpoint or credentials fail the mount
  // before it is offered to anyone.
  absl::Status CheckRoot();

  absl::StatusOr<Attr> GetAttr(std::string_view path);
  // The entries of a folder, sorted by name.
  absl::StatusOr<std::vector<std::pair<std::string, Attr>>> ReadDir(std::string_view path);
  // Opens a file for reading; *keep_cache tells whether the kernel may keep its cached pages.
  absl::StatusOr<std::unique_ptr<File>> Open(std::string_view path, bool* keep_cache);
  // Reads up to `size` bytes at `offset` into `out`; returns the count (0 at or past the end).
  absl::StatusOr<size_t> Read(File& file, char* out, size_t size, uint64_t offset);

  // The errno for a failed operation: ENOENT, EACCES, EIO (...). Logs the cause of anything that
  // is not ENOENT, once per distinct message, naming `path`.
  int ErrnoFor(const absl::Status& status, std::string_view path);

  io::BlockCache& cache() { return *cache_; }
  // Bytes of read-ahead requests in flight now (for tests and stats).
  uint64_t prefetch_bytes_in_flight() const { return prefetch_in_flight_.load(); }
  // The read-ahead window of `file` now (bytes; for tests).
  uint64_t read_ahead_window(File& file);

 private:
  struct Dir {
    absl::Time expires;
    std::map<std::string, Attr, std::less<>> entries;
  };
  // The listing of the folder at `path` (mount-relative, "/" or "/a"), from the cache when fresh.
  absl::StatusOr<std::shared_ptr<const Dir>> GetDir(std::string_view path);
  std::string KeyOf(std::string_view path) const;  // object key of a mount-relative path
  absl::StatusOr<size_t> ReadSmall(File& file, char* out, size_t size, uint64_t offset);
  // Read-ahead of [range) of `file`, whose `reserved` bytes are already counted in
  // prefetch_in_flight_: fetches the blocks that are neither cached nor being fetched into the
  // shared cache through CachedStore::ClaimMissing/FetchRun (the same blocks and requests a read
  // would make), and gives back the reservation as they land. Unlike a CachedStore read, it
  // assembles no bytes for anyone (copying every prefetched byte twice more was most of the
  // mount's CPU on a sequential read).
  void Prefetch(const File& file, io::ByteRange range, uint64_t reserved);

  const std::shared_ptr<io::ObjectStore> base_;
  const std::string root_prefix_;  // "" or "folder/"
  const std::shared_ptr<io::BlockCache> cache_;
  const MountFsOptions options_;
  const uint64_t prefetch_budget_;  // bytes of read-ahead in flight at most, all files together
  std::atomic<uint64_t> prefetch_in_flight_{0};
  std::shared_ptr<io::CachedStore> cached_;
  // Declared last: destroyed first, waiting for its requests (whose callbacks touch the above).
  std::unique_ptr<io::RangedReader> reader_;

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const Dir>, std::less<>> dirs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> opened_versions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> logged_ ABSL_GUARDED_BY(mu_);
  int prefetch_requests_ ABSL_GUARDED_BY(mu_) = 0;  // issued by Prefetch, not yet answered
};

// One open file. Created by MountFs::Open; thread-safe.
class MountFs::File {
 public:
  File(std::string key, Attr attr, uint64_t max_read_ahead)
      : key_(std::move(key)),
        attr_(std::move(attr)),
        window_(io::ReadAheadWindow::kDefaultInitial, max_read_ahead, /*tolerate_reorder=*/true) {}
  const Attr& attr() const { return attr_; }

 private:
  friend class MountFs;
  const std::string key_;
  const Attr attr_;
  absl::Mutex mu_;
  io::ReadAheadWindow window_ ABSL_GUARDED_BY(mu_);
  uint64_t prefetched_end_ ABSL_GUARDED_BY(mu_) = 0;  // read-ahead requested up to here
  Buffer whole_ ABSL_GUARDED_BY(mu_);                 // a small file's bytes, once fetched
  bool have_whole_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stoker::fuse
