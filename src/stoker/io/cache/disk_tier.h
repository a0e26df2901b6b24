// DiskTier: the block cache's second level, a folder of block files with a byte budget. It
// survives restarts: on open it indexes the files already there (oldest modification first for
// eviction). Each file names its block (URL, ETag, index) in a header and carries a checksum of its
// bytes, so a block is only ever served for the exact object version it was read from, and a
// damaged file is deleted instead of served. Files are written to a temporary name and renamed,
// so a reader never sees half a block.
//
// Several processes may share a folder; each enforces the budget on the files it knows of (those
// present when it opened and those it wrote), so the folder can exceed the budget by what the
// others wrote since.
//
// Thread safety: thread-safe. The file I/O runs on the caller's thread, outside the lock.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer.h"

namespace stoker::io {

struct BlockKey;

// A hash that is the same in every process and run (absl::Hash is not), for file names and checks.
uint64_t StableHash64(std::string_view bytes);

class DiskTier {
 public:
  // Creates `dir` if needed and indexes the block files in it, deleting leftovers of interrupted
  // writes; then evicts down to `budget_bytes`.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(std::string dir, uint64_t budget_bytes);

  // The block's bytes, or nullopt when it is absent (or was damaged: then the file is deleted).
  std::optional<Buffer> Read(const BlockKey& key);
  // Stores the block, replacing any file of the same key, and evicts the least recently used
  // files beyond the budget. Errors (disk full, permissions) are returned; the cache goes on
  // without the block.
  absl::Status Write(const BlockKey& key, const Buffer& data);
  // Deletes every block of `url` (any ETag).
  void EraseObject(std::string_view url);

  uint64_t bytes() const;
  uint64_t files() const;
  uint64_t evictions() const;
  const std::string& dir() const { return dir_; }

 private:
  DiskTier(std::string dir, uint64_t budget) : dir_(std::move(dir)), budget_(budget) {}
  std::string FileName(const BlockKey& key) const;
  void EvictLocked(std::vector<std::string>* to_delete) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `name` from the index and the byte count (not the file); false if it was not there.
  bool ForgetLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct File {
    uint64_t size = 0;
    std::list<std::string>::iterator lru;
  };
  const std::string dir_;
  const uint64_t budget_;
  mutable absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);  // by file name
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);         // front: most recently used
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_temp_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::io
