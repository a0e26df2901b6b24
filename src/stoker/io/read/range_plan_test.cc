#include "stoker/io/read/range_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "stoker/io/read/ranged_reader.h"

namespace stoker::io {
namespace {

using ::testing::ElementsAre;
using Source = CoalescedPlan::Source;

TEST(SplitRangeTest, SplitsIntoPartsWithShortLast) {
  EXPECT_THAT(SplitRange({100, 25}, 10),
              ElementsAre(ByteRange{100, 10}, ByteRange{110, 10}, ByteRange{120, 5}));
  EXPECT_THAT(SplitRange({0, 20}, 10), ElementsAre(ByteRange{0, 10}, ByteRange{10, 10}));
  EXPECT_THAT(SplitRange({5, 3}, 10), ElementsAre(ByteRange{5, 3}));
  EXPECT_THAT(SplitRange({7, 0}, 10), ElementsAre(ByteRange{7, 0}));
}

TEST(CoalesceRangesTest, MergesWithinHoleAndKeepsOrderOfRequests) {
  // Requested out of order; 0-10 and 15-20 are 5 apart (merged), 100-110 is 80 past (not merged).
  auto plan = CoalesceRanges({{100, 10}, {15, 5}, {0, 10}}, /*max_hole=*/5, /*max_coalesced=*/1000);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{0, 20}, ByteRange{100, 10}));
  EXPECT_THAT(plan.sources, ElementsAre(Source{1, 0}, Source{0, 15}, Source{0, 0}));
}

TEST(CoalesceRangesTest, HoleOneByteTooLargeIsNotMerged) {
  auto plan = CoalesceRanges({{0, 10}, {16, 4}}, 5, 1000);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{0, 10}, ByteRange{16, 4}));
}

TEST(CoalesceRangesTest, OverlappingAndContainedRanges) {
  auto plan = CoalesceRanges({{0, 100}, {10, 20}, {50, 100}, {10, 20}}, 0, 1000);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{0, 150}));
  EXPECT_THAT(plan.sources, ElementsAre(Source{0, 0}, Source{0, 10}, Source{0, 50}, Source{0, 10}));
}

TEST(CoalesceRangesTest, RespectsMaxCoalesced) {
  auto plan = CoalesceRanges({{0, 40}, {40, 40}, {80, 40}}, 10, 100);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{0, 80}, ByteRange{80, 40}));
  // A range longer than the limit stands alone.
  plan = CoalesceRanges({{0, 10}, {10, 500}, {510, 10}}, 10, 100);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{0, 10}, ByteRange{10, 500}, ByteRange{510, 10}));
}

TEST(CoalesceRangesTest, ToEndRangeIsNeverMerged) {
  auto plan = CoalesceRanges({{50, ByteRange::kToEnd}, {0, 10}, {60, 5}}, 100, 1000);
  EXPECT_THAT(plan.fetches,
              ElementsAre(ByteRange{0, 10}, ByteRange{50, ByteRange::kToEnd}, ByteRange{60, 5}));
  EXPECT_THAT(plan.sources, ElementsAre(Source{1, 0}, Source{0, 0}, Source{2, 0}));
}

TEST(CoalesceRangesTest, EmptyInputAndEmptyRanges) {
  EXPECT_TRUE(CoalesceRanges({}, 10, 100).fetches.empty());
  auto plan = CoalesceRanges({{5, 0}, {5, 10}}, 0, 100);
  EXPECT_THAT(plan.fetches, ElementsAre(ByteRange{5, 10}));
  EXPECT_THAT(plan.sources, ElementsAre(Source{0, 0}, Source{0, 0}));
}

TEST(CoalesceLimitsTest, TtfbTimesBandwidth) {
  EXPECT_EQ(CoalesceLimitsFor(absl::Milliseconds(30), 90e6),
            (CoalesceLimits{2'700'000, 8'100'000}));
  EXPECT_EQ(CoalesceLimitsFor(absl::Microseconds(100), 2e9), (CoalesceLimits{200'000, 600'000}));
  EXPECT_EQ(CoalesceLimitsFor(absl::ZeroDuration(), 1e9), (CoalesceLimits{0, 0}));
  // The reader's defaults are the S3 figures.
  ReaderOptions defaults;
  EXPECT_EQ((CoalesceLimits{defaults.max_hole, defaults.max_coalesced}),
            CoalesceLimitsFor(absl::Milliseconds(30), 90e6));
}

TEST(ReadAheadWindowTest, DoublesWhileSequentialAndResetsOnSeek) {
  ReadAheadWindow w(1 << 20, 8 << 20);
  EXPECT_EQ(w.OnRead(0, 100), 1u << 20);
  EXPECT_EQ(w.OnRead(100, 100), 2u << 20);
  EXPECT_EQ(w.OnRead(200, 50), 4u << 20);
  EXPECT_EQ(w.OnRead(250, 50), 8u << 20);
  EXPECT_EQ(w.OnRead(300, 50), 8u << 20);  // capped
  EXPECT_EQ(w.OnRead(10, 50), 1u << 20);   // seek back
  EXPECT_EQ(w.OnRead(60, 50), 2u << 20);
  EXPECT_EQ(w.OnRead(5000, 50), 1u << 20);  // seek forward
  EXPECT_EQ(w.window(), 1u << 20);
}

TEST(ReadAheadWindowTest, Defaults) {
  ReadAheadWindow w;
  uint64_t offset = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    last = w.OnRead(offset, 4096);
    offset += 4096;
  }
  EXPECT_EQ(last, 64u << 20);
}

TEST(ReadAheadWindowTest, ToleratesReorderedReadsInsideTheWindow) {
  // Reads of 128 KiB issued together by the kernel and handled out of order.
  constexpr uint64_t kRead = 128 << 10;
  ReadAheadWindow w(1 << 20, 64 << 20, /*tolerate_reorder=*/true);
  EXPECT_EQ(w.OnRead(0, kRead), 1u << 20);
  EXPECT_FALSE(w.sequential());
  EXPECT_EQ(w.OnRead(2 * kRead, kRead), 2u << 20);  // one read ahead of its turn
  EXPECT_TRUE(w.sequential());
  EXPECT_EQ(w.OnRead(kRead, kRead), 4u << 20);  // the late one, behind the furthest end
  EXPECT_TRUE(w.sequential());
  EXPECT_EQ(w.OnRead(3 * kRead, kRead), 8u << 20);
  // Inside the window past the furthest end (already prefetched): still sequential.
  EXPECT_EQ(w.OnRead(4 * kRead + (6 << 20), kRead), 16u << 20);
  EXPECT_TRUE(w.sequential());
  // More than a window behind, or beyond the window ahead: a seek.
  EXPECT_EQ(w.OnRead(100 << 20, kRead), 1u << 20);
  EXPECT_FALSE(w.sequential());
  EXPECT_EQ(w.OnRead((99 << 20) + kRead, kRead), 2u << 20);  // one window behind the end
  EXPECT_TRUE(w.sequential());
  EXPECT_EQ(w.OnRead((100 << 20) - (5 << 20), kRead), 1u << 20);  // more than a window
  EXPECT_FALSE(w.sequential());
  EXPECT_EQ(w.OnRead((95 << 20) + kRead, kRead), 2u << 20);
  EXPECT_EQ(w.OnRead((95 << 20) + 2 * kRead + (3 << 20), kRead), 1u << 20);
  EXPECT_FALSE(w.sequential());

  // Without tolerate_reorder the same out-of-order pair is a seek.
  ReadAheadWindow strict(1 << 20, 64 << 20);
  strict.OnRead(0, kRead);
  EXPECT_EQ(strict.OnRead(2 * kRead, kRead), 1u << 20);
  EXPECT_FALSE(strict.sequential());
}

TEST(LatencyTrackerTest, NoHedgingBeforeEnoughSamples) {
  LatencyTracker tracker({.multiple = 3, .floor = absl::Milliseconds(1), .min_samples = 4});
  EXPECT_EQ(tracker.HedgeDelay(), absl::InfiniteDuration());
  for (int i = 0; i < 3; ++i) tracker.Record(absl::Milliseconds(10));
  EXPECT_FALSE(tracker.ShouldHedge(absl::Hours(1)));
  tracker.Record(absl::Milliseconds(10));
  EXPECT_EQ(tracker.Median(), absl::Milliseconds(10));
  EXPECT_EQ(tracker.HedgeDelay(), absl::Milliseconds(30));
  EXPECT_FALSE(tracker.ShouldHedge(absl::Milliseconds(29)));
  EXPECT_TRUE(tracker.ShouldHedge(absl::Milliseconds(31)));
}

TEST(LatencyTrackerTest, FloorAndMedianIgnoreOutliers) {
  LatencyTracker tracker({.multiple = 2, .floor = absl::Milliseconds(50), .min_samples = 1});
  for (int i = 0; i < 10; ++i) tracker.Record(absl::Milliseconds(5));
  tracker.Record(absl::Seconds(10));
  EXPECT_EQ(tracker.Median(), absl::Milliseconds(5));
  EXPECT_EQ(tracker.HedgeDelay(), absl::Milliseconds(50));  // floor beats 2 × 5 ms
}

TEST(LatencyTrackerTest, WindowForgetsOldSamples) {
  LatencyTracker tracker({.multiple = 1, .floor = absl::ZeroDuration(), .min_samples = 1});
  for (size_t i = 0; i < LatencyTracker::kWindow; ++i) tracker.Record(absl::Milliseconds(1));
  for (size_t i = 0; i < LatencyTracker::kWindow; ++i) tracker.Record(absl::Milliseconds(7));
  EXPECT_EQ(tracker.Median(), absl::Milliseconds(7));
}

// Completes parts of 4 MiB one after another, each at the rate (bytes/s) that `rate` gives for
// the window in force, and returns the window after `parts` more of them.
struct PartClock {
  int After(PartWindow& w, int parts, const std::function<double(int)>& rate) {
    constexpr uint64_t kPart = 4 << 20;
    for (int i = 0; i < parts; ++i) {
      now += absl::Seconds(static_cast<double>(kPart) / rate(w.window()));
      w.PartDone(kPart, now);
    }
    return w.window();
  }
  absl::Time now = absl::UnixEpoch();
};

TEST(PartWindowTest, StartedAtTheMaximumItStays) {
  PartWindow w(16, 16);
  EXPECT_EQ(PartClock().After(w, 100, [](int) { return 1e9; }), 16);
}

TEST(PartWindowTest, GoesBackWhenDoublingDoesNotRaiseTheRate) {
  // One receiving thread at 3 GB/s: more parts in flight do not help (the loopback).
  PartWindow w(2, 16);
  PartClock clock;
  EXPECT_EQ(clock.After(w, 3, [](int) { return 3e9; }), 4);  // the first completion + 2 measured
  EXPECT_EQ(clock.After(w, 100, [](int) { return 3e9; }), 2);
  // 10% more from 4 parts is not worth them either.
  PartWindow v(2, 16);
  EXPECT_EQ(PartClock().After(v, 100, [](int n) { return n == 2 ? 3e9 : 3.3e9; }), 2);
}

TEST(PartWindowTest, GrowsWhileEachConnectionIsSlow) {
  // A server whose connections move 200 MB/s each: the rate follows the parts in flight.
  PartWindow w(2, 16);
  EXPECT_EQ(PartClock().After(w, 100, [](int n) { return n * 200e6; }), 16);
  // ...up to where the receiving thread is the limit (3 GB/s): 8 parts give 1.6 GB/s, 16 give
  // 3 GB/s (1.9x), 32 no more. A maximum that is not a power of two: back to the window before.
  PartWindow v(2, 32);
  EXPECT_EQ(PartClock().After(v, 200, [](int n) { return std::min(n * 200e6, 3e9); }), 16);
  PartWindow u(2, 12);
  EXPECT_EQ(PartClock().After(u, 200, [](int n) { return std::min(n * 200e6, 1.7e9); }), 8);
}

}  // namespace
}  // namespace stoker::io
