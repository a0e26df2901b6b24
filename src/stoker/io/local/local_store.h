// LocalStore: local files as an ObjectStore. Keys are absolute paths without the leading '/'
// (Url(key) == "/" + key). Writes go to a temporary file in the same folder that is renamed into
// place by Close(), so a reader never sees a half-written file.
//
// Reads of data in the page cache are done on the calling thread (page_cache_first below), large
// ones as slices of a mapping of the file (map_resident); the rest run on one of two engines,
// chosen when the store is created (docs/reads.md):
//   io_uring  `io_threads` threads, each owning one ring. A ReadBatchAsync call goes to the rings
//             as a few batches and each ring submits everything it has in one system call;
//             completions drive the callbacks (they run on the ring's thread).
//   pread     threads calling pread, one request at a time each. The fallback where
//             io_uring cannot be set up (an old kernel, a seccomp filter, io_uring_disabled):
//             detected when the store is created and logged once per process.
// With `direct`, files are opened with O_DIRECT (no page cache): every read is widened to 4 KiB
// boundaries into an aligned pooled block and the caller gets the slice it asked for (no copy).
// A file system that refuses O_DIRECT (tmpfs) is read through the page cache instead (logged
// once). Read buffers come from BufferPool::Default().
//
// A ReadBatchAsync opens each file once for all its requests; a read never uses a descriptor
// opened before the call, so a file replaced by rename is seen by the next call.
//
// Thread-safe. The destructor waits for the reads in flight.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "stoker/io/object_store.h"

namespace stoker::io {
namespace local_internal {
class ReadEngine;    // local_read.h
class FileMappings;  // local_map.h
}  // namespace local_internal

struct LocalStoreOptions {
  enum class Engine { kAuto, kUring, kPread };
  // kAuto: io_uring when it can be set up, else pread. kUring behaves like kAuto but reports the
  // failure at warn level; STOKER_LOCAL_IO=pread|uring|auto overrides kAuto.
  Engine engine = Engine::kAuto;
  // Engine threads (rings or pread workers). 0: for io_uring min(4, hardware threads), at least
  // 2; for pread 8 (one read in flight per thread).
  int io_threads = 0;
  // Submission queue entries per ring (reads in flight per ring); more wait in the ring's queue.
  unsigned ring_entries = 128;
  // Read what the page cache holds on the calling thread first (preadv2 with RWF_NOWAIT, which
  // never waits for the device), and give the engine only what is left: warm data is answered
  // without a hand-off to an engine thread and back, cold data still gets the engine's queue
  // depth. Not with `direct` (no page cache) or inject_error (tests of the engines).
  bool page_cache_first = true;
  // With page_cache_first: a read of a file of at least 1 MiB whose pages are all in the page
  // cache (mincore) is answered as a slice of a long-lived read-only mapping of the file, without
  // a copy (docs/reads.md, "Warm local reads without a copy"). The file must not be truncated or
  // rewritten in place while slices of it are alive (a truncated mapping raises SIGBUS);
  // STOKER_LOCAL_MMAP=off turns this off for the process.
  bool map_resident = true;
  // Open files with O_DIRECT.
  bool direct = false;
  // Tests only: called before each read is issued; a non-zero errno fails that read as if the
  // kernel had returned it.
  std::function<int(std::string_view path, uint64_t offset)> inject_error;
};

// How fast a device answers, as measured by LocalStore::Probe.
struct DeviceProfile {
  absl::Duration per_request;   // device time per small (4 KiB) read at queue depth 32
  absl::Duration first_byte;    // one 4 KiB read alone (queue depth 1)
  double bytes_per_second = 0;  // large (1 MiB) reads, 8 in flight
  bool measured = false;        // false: the file was too small; defaults below were used
  std::string engine;           // "io_uring" or "pread"
  bool direct = false;
};

class LocalStore : public ObjectStore {
 public:
  explicit LocalStore(LocalStoreOptions options = {});
  // Compatibility: `io_threads` engine threads, default engine.
  explicit LocalStore(int io_threads);
  ~LocalStore() override;

  // The process-wide store for file:// URLs read through the page cache, and one for O_DIRECT.
  static std::shared_ptr<LocalStore> Shared(bool direct);

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;  // completes before returning
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  void ReadBatchAsync(std::vector<ReadRequest> requests, std::vector<ReadCallback> done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

  // The blocking read behind ReadAsync.
  absl::StatusOr<Buffer> ReadNow(const ReadRequest& request);

  // "io_uring" or "pread": the engine this store runs.
  std::string_view engine() const;
  bool direct() const;

  // Measures the device holding `key` through this store's engine (a short probe: 64 small
  // random reads and 16 MiB of large ones), once per device and engine per process; later calls
  // return the first result. Reads through the page cache measure what the cache holds: a cached
  // file probes as memory.
  DeviceProfile Probe(std::string_view key);

 private:
  // ReadBatchAsync; `map`: resident ranges may be answered as slices of mappings.
  void ReadBatch(std::vector<ReadRequest> requests, std::vector<ReadCallback> done, bool map);

  LocalStoreOptions options_;
  std::unique_ptr<local_internal::ReadEngine> engine_;
  std::unique_ptr<local_internal::FileMappings> mappings_;  // null: map_resident is off
};

}  // namespace stoker::io
