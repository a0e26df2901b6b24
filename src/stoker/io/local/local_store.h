// LocalStore: local files as an ObjectStore. Keys are absolute paths without the leading '/'
// (Url(key) == "/" + key). Reads are pread calls on a small I/O thread pool; writes go to a
// temporary file in the same folder that is renamed into place by Close(), so a reader never sees
// a half-written file.
//
// Thread-safe.
#pragma once

#include <memory>

#include "stoker/core/thread_pool.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

class LocalStore : public ObjectStore {
 public:
  // `io_threads`: concurrent preads in flight (reads of cold files block in the kernel).
  explicit LocalStore(int io_threads = 8);

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;  // completes before returning
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

  // The blocking read behind ReadAsync.
  absl::StatusOr<Buffer> ReadNow(const ReadRequest& request);

 private:
  ThreadPool pool_;
};

}  // namespace stoker::io
