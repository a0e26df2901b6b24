// The object-store layer's one interface (docs/io.md; the layers: docs/architecture.md). Every
// byte stoker reads or writes goes through an ObjectStore: S3 (s3://), HTTP(S) (read-only), local
// files and memory.
//
// Keys are relative to the store's root: an S3 store is one bucket, a local store is "/", an HTTP
// store is one scheme://host:port. Url(key) turns a key back into the URL users wrote, for
// messages.
//
// Error model (absl::Status codes):
//   NotFound            the object does not exist (message names the URL)
//   PermissionDenied    credentials rejected (names the access key id, never the secret)
//   OutOfRange          a read that starts past the end of the object
//   FailedPrecondition  a read with if_match whose ETag no longer matches (the object changed)
//   Unavailable         the endpoint could not be reached after bounded retries (last error named)
//   DataLoss            the server sent a body of the wrong length after all retries
//   Unimplemented       the store cannot do this (writes to HTTP)
//
// Thread safety: every ObjectStore method is thread-safe. An ObjectWriter is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "stoker/core/buffer.h"

namespace stoker::io {

// A half-open byte range [offset, offset + length). length == kToEnd reads to the end of the
// object.
struct ByteRange {
  static constexpr uint64_t kToEnd = std::numeric_limits<uint64_t>::max();
  uint64_t offset = 0;
  uint64_t length = kToEnd;

  uint64_t end() const { return length == kToEnd ? kToEnd : offset + length; }
  bool operator==(const ByteRange&) const = default;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  // Opaque; changes whenever the content changes. Empty when the store cannot tell.
  std::string etag;
  absl::Time mtime = absl::UnixEpoch();
};

struct ListOptions {
  // Only keys starting with `prefix`.
  std::string prefix;
  // When non-empty (normally "/"), keys containing `delimiter` after the prefix are rolled up into
  // common_prefixes (the "directories"); when empty, every key under prefix is listed.
  std::string delimiter;
  // Stop after this many objects (0: no limit). Pagination is handled inside the store.
  size_t max_objects = 0;
};

struct ListResult {
  std::vector<ObjectInfo> objects;           // sorted by key
  std::vector<std::string> common_prefixes;  // sorted; each ends with the delimiter
};

struct ReadRequest {
  std::string key;
  ByteRange range;
  // When non-empty, the read fails with FailedPrecondition unless the object's ETag equals this.
  std::string if_match;
};

// Called exactly once with the bytes of the range. A range that starts inside the object but
// extends past its end yields the bytes up to the end (like pread); one that starts past the end
// is OutOfRange (except an empty range at exactly the end, which yields no bytes).
using ReadCallback = absl::AnyInvocable<void(absl::StatusOr<Buffer>) &&>;
using StatCallback = absl::AnyInvocable<void(absl::StatusOr<ObjectInfo>) &&>;

// Where ReadToAsync puts the bytes of a range: `data` belongs at `offset` from the range's start.
// Called one call at a time for one read, on any thread, in any order of offsets; a retried read
// may write the same offsets again (with the same bytes when the read is pinned by if_match). An
// error stops the read, which fails with it.
using WriteAtFn = std::function<absl::Status(uint64_t offset, std::string_view data)>;
// Called exactly once with the number of bytes written (the range, cut at the object's end).
using WrittenCallback = absl::AnyInvocable<void(absl::StatusOr<uint64_t>) &&>;

// Streams one object. Nothing is visible under the key until Close() succeeds; a writer destroyed
// without Close() abandons the object (partial uploads are cleaned up). Not thread-safe.
class ObjectWriter {
 public:
  virtual ~ObjectWriter() = default;
  virtual absl::Status Append(Buffer data) = 0;
  virtual absl::Status Close() = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The user-facing URL of `key`, e.g. "s3://bucket/key" or "/data/key".
  virtual std::string Url(std::string_view key) const = 0;

  // Size, ETag and modification time of one object, asynchronously. `done` runs exactly once, on
  // any thread (possibly the caller's, before StatAsync returns); it must not block for long.
  virtual void StatAsync(std::string key, StatCallback done) = 0;
  virtual absl::StatusOr<ListResult> List(const ListOptions& options) = 0;

  // Reads one byte range asynchronously. `done` runs exactly once, on any thread (possibly the
  // caller's, before ReadAsync returns); it must not block for long.
  virtual void ReadAsync(ReadRequest request, ReadCallback done) = 0;

  // Reads several ranges at once: done[i] answers requests[i], each exactly once, on any thread
  // (as ReadAsync). A store that can submit many reads in one system call (the local store's
  // io_uring engine) overrides this; the default calls ReadAsync for each request in order.
  // requests.size() must equal done.size().
  virtual void ReadBatchAsync(std::vector<ReadRequest> requests, std::vector<ReadCallback> done);

  // Reads one byte range (as ReadAsync) into `write` instead of a Buffer. The default reads a
  // Buffer and writes it once; the network stores write each piece of the response as it arrives,
  // with no buffer of the range and no copy (`stoker cat > file`).
  virtual void ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done);

  virtual absl::StatusOr<std::unique_ptr<ObjectWriter>> OpenWriter(std::string_view key) = 0;

  // Deletes `key`; deleting a missing key is OK (as in S3).
  virtual absl::Status Delete(std::string_view key) = 0;

  // Blocking conveniences built on the methods above.
  absl::StatusOr<ObjectInfo> Stat(std::string_view key);
  absl::StatusOr<Buffer> Read(std::string_view key, ByteRange range = {});
  absl::Status Put(std::string_view key, Buffer data);
};

}  // namespace stoker::io
