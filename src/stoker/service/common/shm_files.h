// Payload bytes handed to a consumer on this host as ranges of files the worker has mapped
// (core/mapped_files.h: the warm local reads of a dataset), which the consumer maps itself: the
// bytes are the page cache's, copied by neither side (docs/protocol.md, "Shared memory"). The
// rest of the payload (the element's header, bytes the pipeline made) goes through the worker's
// segment as before (shm_ring.h).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer.h"
#include "stoker/service.pb.h"

namespace stoker::service {

// Pieces smaller than this are copied into the segment: a span and a page-table entry of the
// consumer's mapping cost more than copying them.
inline constexpr uint64_t kMinSharedFileBytes = 64 << 10;

// The worker's side, for one response: which pieces of each payload are ranges of mapped files,
// and the response's table of those files. Used by one thread.
class SharedFileTable {
 public:
  struct Split {
    std::vector<Buffer> copied;  // the pieces that go into the slot, in order
    uint64_t copied_size = 0;
    std::vector<PayloadSpan> spans;  // the whole payload; empty: no piece is a file range
  };
  // `pieces` (whose Buffers the caller holds until the response is answered, which keeps their
  // files' descriptors open) split into the bytes to copy and the spans.
  Split SplitPayload(const std::vector<Buffer>& pieces);
  // Adds the files the splits named to `fields` (GetElementsResponse.shm_files).
  void AddTo(GetElementsResponse* fields) const;

 private:
  std::map<std::pair<uint64_t, uint64_t>, int64_t> index_;  // (device, inode) -> span file
  std::vector<SharedFile> files_;
};

// The consumer's side: the files workers named, mapped read-only once each (the most recent
// kMaxFiles kept; ranges handed out keep theirs mapped). Thread-safe.
class SharedFileMappings {
 public:
  static constexpr size_t kMaxFiles = 256;
  // [offset, offset + length) of `file`, sharing its mapping. An error names the path and the
  // cause (another user's worker, a file replaced or cut, a range outside the file).
  absl::StatusOr<Buffer> Range(const SharedFile& file, uint64_t offset, uint64_t length);

 private:
  struct Mapping;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // pid, fd, device, inode
  absl::Mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<const Mapping>>> files_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::service
