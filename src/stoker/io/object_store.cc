#include "stoker/io/object_store.h"

#include "stoker/core/blocking.h"
#include "stoker/core/status.h"

namespace stoker::io {

absl::StatusOr<ObjectInfo> ObjectStore::Stat(std::string_view key) {
  return Await<absl::StatusOr<ObjectInfo>>(
      [&](StatCallback done) { StatAsync(std::string(key), std::move(done)); });
}

absl::StatusOr<Buffer> ObjectStore::Read(std::string_view key, ByteRange range) {
  return Await<absl::StatusOr<Buffer>>([&](ReadCallback done) {
    ReadAsync(ReadRequest{std::string(key), range, ""}, std::move(done));
  });
}

void ObjectStore::ReadBatchAsync(std::vector<ReadRequest> requests,
                                 std::vector<ReadCallback> done) {
  for (size_t i = 0; i < requests.size(); ++i)
    ReadAsync(std::move(requests[i]), std::move(done[i]));
}

void ObjectStore::ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done) {
  ReadAsync(std::move(request), [write = std::move(write),
                                 done = std::move(done)](absl::StatusOr<Buffer> bytes) mutable {
    if (!bytes.ok()) return std::move(done)(bytes.status());
    if (!bytes->empty()) {
      if (absl::Status written = write(0, bytes->view()); !written.ok()) {
        return std::move(done)(written);
      }
    }
    std::move(done)(bytes->size());
  });
}

absl::Status ObjectStore::Put(std::string_view key, Buffer data) {
  ASSIGN_OR_RETURN(auto writer, OpenWriter(key));
  RETURN_IF_ERROR(writer->Append(std::move(data)));
  return writer->Close();
}

}  // namespace stoker::io
