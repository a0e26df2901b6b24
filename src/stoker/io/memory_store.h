// MemoryStore: an ObjectStore held in process memory (mem://bucket/key). Used by unit tests and as
// the embedded default. Thread-safe; reads complete on the caller's thread.
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

class MemoryStore : public ObjectStore {
 public:
  explicit MemoryStore(std::string bucket = "test") : bucket_(std::move(bucket)) {}

  std::string Url(std::string_view key) const override;
  void StatAsync(std::string key, StatCallback done) override;  // completes before returning
  absl::StatusOr<ListResult> List(const ListOptions& options) override;
  void ReadAsync(ReadRequest request, ReadCallback done) override;
  absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) override;
  absl::Status Delete(std::string_view key) override;

  // Stores `data` under `key` at once (used by writers and tests).
  void Set(std::string_view key, Buffer data);

 private:
  struct Object {
    Buffer data;
    std::string etag;
    absl::Time mtime;
  };
  const std::string bucket_;
  absl::Mutex mu_;
  std::map<std::string, Object, std::less<>> objects_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

// Applies ListOptions (prefix, delimiter roll-up, max_objects) to a sorted sequence of objects.
// Shared by stores that enumerate keys themselves (memory, local).
ListResult ListFromSorted(const std::vector<ObjectInfo>& sorted, const ListOptions& options);

}  // namespace stoker::io
