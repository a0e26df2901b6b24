#include "stoker/io/object_store.h"

#include <future>

#include "stoker/core/status.h"

namespace stoker::io {

absl::StatusOr<Buffer> ObjectStore::Read(std::string_view key, ByteRange range) {
  std::promise<absl::StatusOr<Buffer>> promise;
  auto future = promise.get_future();
  ReadAsync(ReadRequest{std::string(key), range, ""},
            [&promise](absl::StatusOr<Buffer> result) { promise.set_value(std::move(result)); });
  return future.get();
}

absl::Status ObjectStore::Put(std::string_view key, Buffer data) {
  ASSIGN_OR_RETURN(auto writer, OpenWriter(key));
  RETURN_IF_ERROR(writer->Append(std::move(data)));
  return writer->Close();
}

}  // namespace stoker::io
