// The read planner's pure parts (docs/reads.md): how byte ranges become store requests.
// Everything here is deterministic and free of I/O; RangedReader and CachedStore execute the plans.
// See docs/reads.md for the numbers and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

// Splits `range` (finite, i.e. length != kToEnd) into consecutive parts of `part_size` bytes (the
// last may be shorter). An empty range yields one empty part. part_size must be > 0.
std::vector<ByteRange> SplitRange(ByteRange range, uint64_t part_size);

// The result of coalescing: the requests to issue and, for each requested range, where its bytes
// lie in them.
struct CoalescedPlan {
  struct Source {
    size_t fetch = 0;              // index into `fetches`
    uint64_t offset_in_fetch = 0;  // ranges[i] starts this many bytes into fetches[fetch]
    bool operator==(const Source&) const = default;
  };
  std::vector<ByteRange> fetches;  // sorted by offset, disjoint
  std::vector<Source> sources;     // sources[i] serves ranges[i]
};

// Groups `ranges` (any order, may overlap or be empty) into fetches: ranges sorted by offset are
// merged while the gap to the previous one is at most `max_hole` bytes and the merged fetch stays
// within `max_coalesced` bytes. A range longer than max_coalesced gets a fetch of its own (split
// it into parts afterwards); so does a kToEnd range, which is never merged.
CoalescedPlan CoalesceRanges(const std::vector<ByteRange>& ranges, uint64_t max_hole,
                             uint64_t max_coalesced);

// Coalescing limits derived from a store's time to first byte (ttfb) and per-connection bandwidth.
//   max_hole = ttfb × bandwidth: reading through a gap costs gap / bandwidth; a separate request
//     costs a ttfb; so a gap is worth reading when it is at most the bytes one ttfb could carry.
//   max_coalesced = 3 × ttfb × bandwidth: a request of that size spends at most a quarter of its
//     time waiting for the first byte; larger requests should rather run as concurrent parts.
// S3 (~30 ms, ~90 MB/s per connection): hole 2.7 MB, coalesced 8.1 MB (≈ the 8 MiB part size).
// Local NVMe (~0.1 ms, ~2 GB/s): hole 200 KB, coalesced 600 KB.
struct CoalesceLimits {
  uint64_t max_hole = 0;
  uint64_t max_coalesced = 0;
  bool operator==(const CoalesceLimits&) const = default;
};
CoalesceLimits CoalesceLimitsFor(absl::Duration time_to_first_byte, double bytes_per_second);

// Limits for a local device read by a batched engine (docs/reads.md, "Local devices"), from
// LocalStore::Probe's figures: `per_request` is the device time one more small read costs when 32
// are in flight (not the time to first byte: a batch keeps the queue full, so a separate request
// costs only its share of the device's request rate), `bytes_per_second` the bandwidth of large
// reads.
//   max_hole = per_request × bandwidth: a gap is read through only when that is cheaper than the
//     extra request, so a batch is never slower than one read per range.
//   max_coalesced = max(3 × max_hole, 1 MiB): larger merged reads gain nothing and would put more
//     of a batch on one ring (one core copying from the page cache).
CoalesceLimits LocalCoalesceLimits(absl::Duration per_request, double bytes_per_second);

// A sequential reader's prefetch window: starts at `initial` bytes, doubles on each read that
// continues where the previous one ended, up to `max`, and falls back to `initial` on a seek.
//
// With `tolerate_reorder`, a read also counts as sequential when it starts within one window of
// the furthest end read so far: behind it, or ahead of it inside the range already handed out for
// prefetch. That is for callers that see one stream's reads out of order, such as a FUSE file
// system: the kernel's read-ahead sends it several reads at once, which its threads handle in any
// order, and without this every reordering would reset the window.
// Not thread-safe: one per open file.
class ReadAheadWindow {
 public:
  static constexpr uint64_t kDefaultInitial = 1 << 20;
  static constexpr uint64_t kDefaultMax = 64 << 20;
  explicit ReadAheadWindow(uint64_t initial = kDefaultInitial, uint64_t max = kDefaultMax,
                           bool tolerate_reorder = false);

  // Records a read of [offset, offset + length) and returns how many bytes to prefetch from
  // offset + length on (the current window).
  uint64_t OnRead(uint64_t offset, uint64_t length);
  uint64_t window() const { return window_; }
  // Whether the latest OnRead counted as sequential (false for the first read and on a seek).
  bool sequential() const { return sequential_; }

 private:
  const uint64_t initial_;
  const uint64_t max_;
  const bool tolerate_reorder_;
  uint64_t window_;
  bool sequential_ = false;
  // Where the next read must start to count as sequential (with tolerate_reorder: the furthest
  // end read so far); kNone before the first read.
  static constexpr uint64_t kNone = ~uint64_t{0};
  uint64_t next_offset_ = kNone;
};

// The hedging rule: a running estimate of request latency (median of the last kWindow samples)
// and the decision to re-issue a request that has run far past it.
// Thread-safe.
class LatencyTracker {
 public:
  static constexpr size_t kWindow = 64;
  struct Options {
    double multiple = 4.0;                           // hedge after multiple × median...
    absl::Duration floor = absl::Milliseconds(100);  // ...and after at least this long
    int min_samples = 16;                            // no hedging before this many samples
  };
  LatencyTracker() : LatencyTracker(Options{}) {}
  explicit LatencyTracker(Options options) : options_(options) {}

  void Record(absl::Duration latency);
  // The median of the recent samples; nullopt-like ZeroDuration when there are none.
  absl::Duration Median() const;
  // How long a request may run before it is hedged; InfiniteDuration while too few samples.
  absl::Duration HedgeDelay() const;
  // Whether a request that has run for `elapsed` should be hedged (now).
  bool ShouldHedge(absl::Duration elapsed) const { return elapsed >= HedgeDelay(); }

 private:
  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<absl::Duration> samples_ ABSL_GUARDED_BY(mu_);  // ring buffer of at most kWindow
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// How many parts of a streamed range to keep in flight (`stoker cat`; docs/io.md, "Parts in
// flight from the round trip"). It starts at `initial` and doubles, up to `max`, while a doubling
// raises the rate at which parts complete by at least a quarter; once a doubling did not, it goes
// back to the window before it and stays there. The rate at a window is measured over the `window`
// parts (at least 2) that complete after the completion that set it, so the first part's connection
// set-up and the parts asked for under the previous window weigh little. Started at `max`, it never
// changes. Thread safety: none (the caller's lock).
class PartWindow {
 public:
  PartWindow(int initial, int max);
  int window() const { return window_; }
  // A part of `bytes` completed at `now`.
  void PartDone(uint64_t bytes, absl::Time now);

 private:
  int window_;
  const int max_;
  bool settled_;
  absl::Time since_ = absl::InfinitePast();  // the completion the measurement counts from
  uint64_t bytes_ = 0;                       // completed since then
  int parts_ = 0;
  int previous_window_ = 0;   // the window before the last doubling; 0: none yet
  double previous_rate_ = 0;  // bytes/s measured at previous_window_
};

}  // namespace stoker::io
