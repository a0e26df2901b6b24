#include "stoker/io/read/range_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace stoker::io {

std::vector<ByteRange> SplitRange(ByteRange range, uint64_t part_size) {
  std::vector<ByteRange> parts;
  if (range.length == 0) return {range};
  uint64_t end = range.offset + range.length;
  for (uint64_t offset = range.offset; offset < end; offset += part_size) {
    parts.push_back({offset, std::min(part_size, end - offset)});
  }
  return parts;
}

CoalescedPlan CoalesceRanges(const std::vector<ByteRange>& ranges, uint64_t max_hole,
                             uint64_t max_coalesced) {
  CoalescedPlan plan;
  plan.sources.resize(ranges.size());
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].offset < ranges[b].offset; });
  // The fetch being built: [start, end); open == false before the first range.
  bool open = false;
  bool open_to_end = false;
  uint64_t start = 0, end = 0;
  auto close = [&] {
    if (open) plan.fetches.push_back({start, open_to_end ? ByteRange::kToEnd : end - start});
    open = false;
  };
  for (size_t i : order) {
    const ByteRange& r = ranges[i];
    bool to_end = r.length == ByteRange::kToEnd;
    uint64_t r_end = to_end ? ByteRange::kToEnd : r.offset + r.length;
    bool merge = open && !open_to_end && !to_end && r.offset <= end + max_hole &&
                 std::max(end, r_end) - start <= max_coalesced;
    if (!merge) {
      close();
      open = true;
      open_to_end = to_end;
      start = r.offset;
      end = r_end;
    } else {
      end = std::max(end, r_end);
    }
    plan.sources[i] = {plan.fetches.size(), r.offset - start};
  }
  close();
  return plan;
}

CoalesceLimits CoalesceLimitsFor(absl::Duration time_to_first_byte, double bytes_per_second) {
  double hole = absl::ToDoubleSeconds(time_to_first_byte) * bytes_per_second;
  if (!(hole > 0)) hole = 0;
  auto hole_bytes = static_cast<uint64_t>(std::llround(hole));
  return {hole_bytes, 3 * hole_bytes};
}

CoalesceLimits LocalCoalesceLimits(absl::Duration per_request, double bytes_per_second) {
  CoalesceLimits limits = CoalesceLimitsFor(per_request, bytes_per_second);
  limits.max_coalesced = std::max<uint64_t>(3 * limits.max_hole, 1 << 20);
  return limits;
}

ReadAheadWindow::ReadAheadWindow(uint64_t initial, uint64_t max, bool tolerate_reorder)
    : initial_(initial),
      max_(std::max(initial, max)),
      tolerate_reorder_(tolerate_reorder),
      window_(initial) {}

uint64_t ReadAheadWindow::OnRead(uint64_t offset, uint64_t length) {
  const uint64_t end = offset + length;
  if (next_offset_ == kNone) {
    sequential_ = false;
  } else if (tolerate_reorder_) {
    // Behind the furthest end by at most a window (a read issued earlier, handled later), or
    // inside the window already prefetched past it.
    const uint64_t behind = next_offset_ - std::min(next_offset_, window_);
    sequential_ = offset >= behind && offset <= next_offset_ + window_;
  } else {
    sequential_ = offset == next_offset_;
  }
  if (sequential_) {
    window_ = std::min(max_, window_ * 2);
    next_offset_ = tolerate_reorder_ ? std::max(next_offset_, end) : end;
  } else {
    window_ = initial_;
    next_offset_ = end;
  }
  return window_;
}

void LatencyTracker::Record(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  if (samples_.size() < kWindow) {
    samples_.push_back(latency);
  } else {
    samples_[next_] = latency;
  }
  next_ = (next_ + 1) % kWindow;
  ++count_;
}

absl::Duration LatencyTracker::Median() const {
  std::vector<absl::Duration> copy;
  {
    absl::MutexLock lock(&mu_);
    copy = samples_;
  }
  if (copy.empty()) return absl::ZeroDuration();
  auto mid = copy.begin() + copy.size() / 2;
  std::nth_element(copy.begin(), mid, copy.end());
  return *mid;
}

absl::Duration LatencyTracker::HedgeDelay() const {
  {
    absl::MutexLock lock(&mu_);
    if (count_ < options_.min_samples) return absl::InfiniteDuration();
  }
  return std::max(options_.floor, Median() * options_.multiple);
}

PartWindow::PartWindow(int initial, int max)
    : window_(std::clamp(initial, 1, std::max(1, max))),
      max_(std::max(1, max)),
      settled_(window_ >= max_) {}

void PartWindow::PartDone(uint64_t bytes, absl::Time now) {
  if (settled_) return;
  if (since_ == absl::InfinitePast()) {  // the first completion starts the first measurement
    since_ = now;
    return;
  }
  bytes_ += bytes;
  if (++parts_ < std::max(2, window_)) return;
  const double seconds = absl::ToDoubleSeconds(now - since_);
  const double rate = seconds > 0 ? static_cast<double>(bytes_) / seconds : 0;
  if (previous_window_ > 0 && rate < 1.25 * previous_rate_) {
    window_ = previous_window_;  // the doubling did not pay: back, for good
    settled_ = true;
    return;
  }
  if (window_ >= max_) {  // it paid, and there is no more room
    settled_ = true;
    return;
  }
  previous_window_ = window_;
  previous_rate_ = rate;
  window_ = std::min(2 * window_, max_);
  since_ = now;
  bytes_ = 0;
  parts_ = 0;
}

}  // namespace stoker::io
