// RangedReader: the read planner's executor (docs/reads.md). It turns a batch of byte
// ranges of one object into few, large, concurrent ObjectStore::ReadAsync requests:
//   - nearby small ranges are coalesced into one request (max_hole, max_coalesced),
//   - large ranges are split into parts of part_size fetched concurrently,
//   - at most max_parts_in_flight requests of one call are in flight at a time (the network stores
//     enforce the process-wide admission limit themselves),
//   - a part that runs far past the observed median latency is re-issued once (hedging); the first
//     successful response wins.
// Every response is checked for its length: a part that comes back shorter than asked, when the
// object is known to be longer, is DataLoss, never a silently short buffer.
//
// Thread safety: RangedReader is thread-safe. The destructor waits for the store requests it
// issued to complete; it must not run inside a `done` callback of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "stoker/core/buffer.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

struct ReaderOptions {
  // Large reads are split into parts of this size, fetched concurrently.
  uint64_t part_size = 8 << 20;
  // Coalesce two ranges when the gap between them is at most this many bytes. The default is
  // CoalesceLimitsFor(30 ms, 90 MB/s), an S3 connection (see range_plan.h and docs/reads.md).
  uint64_t max_hole = 2'700'000;
  // Never build a coalesced request larger than this (bytes); again the S3 figure.
  uint64_t max_coalesced = 8'100'000;
  // Requests of one call in flight at a time (hedges not counted).
  int max_parts_in_flight = 16;
  // Re-issue a part that runs far past the observed median (once per part).
  bool hedge = true;
  // A part is hedged when it has run longer than hedge_multiple × the median part latency and
  // longer than hedge_floor, once at least hedge_min_samples latencies have been observed.
  double hedge_multiple = 4.0;
  absl::Duration hedge_floor = absl::Milliseconds(100);
  int hedge_min_samples = 16;
};

class RangedReader {
 public:
  explicit RangedReader(std::shared_ptr<ObjectStore> store, ReaderOptions options = {});
  ~RangedReader();
  RangedReader(const RangedReader&) = delete;
  RangedReader& operator=(const RangedReader&) = delete;

  // result[i] holds the bytes of ranges[i] (ranges in any order, may overlap; ranges that were
  // coalesced come back as slices of one fetched buffer, without copying). A range that reaches
  // past the end of the object yields the bytes up to the end; one that starts past the end fails
  // the call with OutOfRange (as ObjectStore::ReadAsync). A kToEnd range is fetched as one
  // request (use Read() to fetch a whole object in parallel parts). With a non-empty `if_match`
  // every request carries it, so all ranges come from the same version of the object.
  // `done` runs exactly once, on any thread (possibly before ReadRangesAsync returns).
  void ReadRangesAsync(std::string key, std::vector<ByteRange> ranges, std::string if_match,
                       absl::AnyInvocable<void(absl::StatusOr<std::vector<Buffer>>) &&> done);
  // Blocking form of ReadRangesAsync.
  absl::StatusOr<std::vector<Buffer>> ReadRanges(std::string_view key,
                                                 std::vector<ByteRange> ranges,
                                                 std::string_view if_match = "");
  // One range (kToEnd allowed: Stat first), split into parts fetched concurrently, returned as one
  // Buffer. A read of more than one part Stats the object first and pins its ETag, so the parts
  // are of one version of the object.
  absl::StatusOr<Buffer> Read(std::string_view key, ByteRange range = {});

  ObjectStore& store();
  const ReaderOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::io
