// Internal to LocalStore: long-lived read-only mappings of local files, so that a range the page
// cache holds is answered as a slice of the mapping (no copy; docs/reads.md, "Warm local reads
// without a copy"). Not part of the public API.
//
// A mapping is made once per file version (path and EtagOf: size, modification time, inode) and
// lives while the store's table or any Buffer sliced from it holds it; munmap runs when the last
// of them is dropped. Every batch opens and fstats the file afresh (OpenForRead): a file replaced
// by rename gets a new mapping, the old one stays valid for the slices already handed out.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "stoker/io/local/local_read.h"

namespace stoker::io::local_internal {

// Files below this size are read with a copy: a mapping, a table entry and page faults cost more
// than copying them.
inline constexpr uint64_t kMinMappedFileBytes = 1 << 20;
// Reads below this size are copied: a copy of a few pages costs less than mincore and the page
// faults of first touching them through the mapping.
inline constexpr uint64_t kMinMappedReadBytes = 16 << 10;

struct FileMapping {
  FileMapping() = default;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();
  const uint8_t* data = nullptr;  // nullptr: this file version is not mapped (see Get)
  uint64_t size = 0;
  std::string etag;
  // A descriptor of the file kept open while the mapping lives: the mapping is registered with
  // it (core/mapped_files.h), so that a worker can name the file to a consumer on this host.
  int fd = -1;
};

class FileMappings {
 public:
  // Keeps at most `max_files` mappings (least recently used dropped first).
  explicit FileMappings(size_t max_files = 64) : max_files_(max_files) {}

  // The mapping of `file` (opened for the current batch), made on first use; nullptr where it is
  // not to be mapped: a small file, a failed mmap, or one whose page-cache residency mincore
  // cannot report (the kernel tells page-cache residency only to a caller that owns the file or
  // may write it, and otherwise reports every page as resident; such files are copied).
  std::shared_ptr<const FileMapping> Get(const OpenFile& file);

 private:
  const size_t max_files_;
  absl::Mutex mu_;
  // Most recently used first: path and its mapping.
  std::list<std::pair<std::string, std::shared_ptr<const FileMapping>>> files_ ABSL_GUARDED_BY(mu_);
};

// True when every page of [offset, offset + length) of `file` (mapped as `mapping`) is in the
// page cache: cachestat(2) on the file (Linux 6.5+: one walk of the file's cache over the range),
// else mincore(2) on the mapping (a lookup per page not yet in this process's page tables, a
// third of a warm run's CPU in `perf`). The answer can be stale by the time the bytes are read: a
// page evicted in between is read back from the device by the page fault of whoever touches it
// (the bytes are the same).
bool Resident(const OpenFile& file, const FileMapping& mapping, uint64_t offset, uint64_t length);

// Tests: check residency with mincore (as on kernels without cachestat) while `on`.
void UseMincoreForTesting(bool on);

}  // namespace stoker::io::local_internal
