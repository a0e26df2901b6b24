#include "stoker/io/read/ranged_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "stoker/core/thread.h"
#include "stoker/io/memory_store.h"
#include "stoker/testing/latency_store.h"

namespace stoker::io {
namespace {

using ::stoker::testing::LatencyStore;
using ::testing::HasSubstr;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

struct Fixture {
  explicit Fixture(size_t size, LatencyStore::Options latency = {})
      : data(Pattern(size)), memory(std::make_shared<MemoryStore>()) {
    memory->Set("obj", Buffer::Copy(data));
    store = std::make_shared<LatencyStore>(memory, latency);
  }
  std::string data;
  std::shared_ptr<MemoryStore> memory;
  std::shared_ptr<LatencyStore> store;
};

TEST(RangedReaderTest, ReadsRangesInAnyOrder) {
  auto store = std::make_shared<MemoryStore>();
  std::string data = Pattern(10000);
  store->Set("obj", Buffer::Copy(data));
  RangedReader reader(store);
  auto got = reader.ReadRanges("obj", {{500, 10}, {0, 4}, {9990, 100}, {503, 20}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].view(), data.substr(500, 10));
  EXPECT_EQ((*got)[1].view(), data.substr(0, 4));
  EXPECT_EQ((*got)[2].view(), data.substr(9990));
  EXPECT_EQ((*got)[3].view(), data.substr(503, 20));
  auto whole = reader.Read("obj");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->view(), data);
  EXPECT_TRUE(reader.ReadRanges("obj", {})->empty());
}

TEST(RangedReaderTest, CoalescedRangesShareOneFetchWithoutCopying) {
  Fixture f(100000);
  RangedReader reader(f.store, {.max_hole = 1000, .max_coalesced = 50000});
  // Two groups: [100, 2600) and [60000, 60100).
  auto got = reader.ReadRanges("obj", {{2000, 600}, {100, 50}, {60000, 100}, {1000, 10}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(f.store->reads(), 2);
  EXPECT_EQ((*got)[0].view(), f.data.substr(2000, 600));
  EXPECT_EQ((*got)[1].view(), f.data.substr(100, 50));
  EXPECT_EQ((*got)[2].view(), f.data.substr(60000, 100));
  EXPECT_EQ((*got)[3].view(), f.data.substr(1000, 10));
  EXPECT_EQ((*got)[0].owner(), (*got)[1].owner());
  EXPECT_EQ((*got)[1].data() + 900, (*got)[3].data());
  auto requests = f.store->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].range, (ByteRange{100, 2500}));
  EXPECT_EQ(requests[1].range, (ByteRange{60000, 100}));
}

TEST(RangedReaderTest, LargeReadIsSplitIntoBoundedConcurrentParts) {
  Fixture f(10 * 1000 + 7, {.latency = absl::Milliseconds(2)});
  RangedReader reader(f.store, {.part_size = 1000, .max_parts_in_flight = 3});
  auto whole = reader.Read("obj");
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->view(), f.data);
  EXPECT_EQ(f.store->stats(), 1);
  EXPECT_EQ(f.store->reads(), 11);
  EXPECT_LE(f.store->max_reads_in_flight(), 3);
  EXPECT_GE(f.store->max_reads_in_flight(), 2);
  // Every part carries the ETag learned by Stat.
  std::string etag = f.memory->Stat("obj")->etag;
  for (const ReadRequest& r : f.store->requests()) EXPECT_EQ(r.if_match, etag);

  auto middle = reader.Read("obj", {1500, 3000});
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->view(), f.data.substr(1500, 3000));
  auto tail = reader.Read("obj", {9000, ByteRange::kToEnd});
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->view(), f.data.substr(9000));
}

TEST(RangedReaderTest, RangesPastTheEnd) {
  Fixture f(2500);
  RangedReader reader(f.store, {.part_size = 1000, .max_hole = 0});
  // Reaching past the end yields the bytes up to the end, also when split into parts.
  auto got = reader.ReadRanges("obj", {{2400, 500}, {0, 5000}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].view(), f.data.substr(2400));
  EXPECT_EQ((*got)[1].view(), f.data);
  EXPECT_EQ(reader.Read("obj", {1000, 100000})->view(), f.data.substr(1000));
  // Starting past the end is OutOfRange, coalesced or not.
  EXPECT_EQ(reader.ReadRanges("obj", {{3000, 10}}).status().code(), absl::StatusCode::kOutOfRange);
  RangedReader coalescing(f.store, {.max_hole = 10000});
  auto past = coalescing.ReadRanges("obj", {{0, 10}, {3000, 10}});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("mem://test/obj"));
  EXPECT_EQ(reader.Read("obj", {3000, 1}).status().code(), absl::StatusCode::kOutOfRange);
  auto empty_at_end = coalescing.ReadRanges("obj", {{2500, 0}, {2400, ByteRange::kToEnd}});
  ASSERT_TRUE(empty_at_end.ok()) << empty_at_end.status();
  EXPECT_EQ((*empty_at_end)[0].size(), 0u);
  EXPECT_EQ((*empty_at_end)[1].view(), f.data.substr(2400));
}

TEST(RangedReaderTest, ShortPartIsDataLossNeverAShortBuffer) {
  Fixture f(5000);
  RangedReader reader(f.store, {.part_size = 1000, .max_parts_in_flight = 1});
  f.store->ShortenNext(1, 10);
  auto got = reader.Read("obj", {0, 3000});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("mem://test/obj"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("bytes [0, 1000)"));

  // Without a Stat: a short part followed by a full one is caught too.
  f.store->ShortenNext(1, 10);
  auto ranges = reader.ReadRanges("obj", {{0, 3000}});
  EXPECT_EQ(ranges.status().code(), absl::StatusCode::kDataLoss) << ranges.status();
}

TEST(RangedReaderTest, ErrorsNameTheUrl) {
  Fixture f(5000);
  RangedReader reader(f.store, {.part_size = 1000});
  f.store->FailNext(1, absl::UnavailableError("connection reset"));
  auto got = reader.Read("obj");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("mem://test/obj"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("bytes [0, 1000)"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("connection reset"));
  EXPECT_EQ(reader.Read("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader.ReadRanges("missing", {{0, 1}}).status().code(), absl::StatusCode::kNotFound);
}

TEST(RangedReaderTest, IfMatchDetectsAChangedObject) {
  Fixture f(100);
  RangedReader reader(f.store);
  std::string etag = f.memory->Stat("obj")->etag;
  EXPECT_TRUE(reader.ReadRanges("obj", {{0, 10}}, etag).ok());
  f.memory->Set("obj", Buffer::Copy("changed"));
  EXPECT_EQ(reader.ReadRanges("obj", {{0, 3}}, etag).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RangedReaderTest, ManyRangesOnASynchronousStoreDoNotRecurse) {
  auto store = std::make_shared<MemoryStore>();
  std::string data = Pattern(200000);
  store->Set("obj", Buffer::Copy(data));
  RangedReader reader(store, {.max_hole = 0, .max_parts_in_flight = 4});
  std::vector<ByteRange> ranges;
  for (uint64_t i = 0; i < 100000; ++i) ranges.push_back({i * 2, 1});
  auto got = reader.ReadRanges("obj", ranges);
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < ranges.size(); i += 997)
    EXPECT_EQ((*got)[i].view(), data.substr(i * 2, 1));
}

TEST(RangedReaderTest, HedgingReissuesAStalledPart) {
  Fixture f(8000, {.latency = absl::Milliseconds(1)});
  RangedReader reader(f.store, {.part_size = 1000,
                                .hedge_multiple = 2,
                                .hedge_floor = absl::Milliseconds(5),
                                .hedge_min_samples = 8});
  // Learn the latency (16 parts).
  ASSERT_TRUE(reader.Read("obj", {0, 8000}).ok());
  ASSERT_TRUE(reader.Read("obj", {0, 8000}).ok());
  int64_t before = f.store->reads();
  f.store->StallNext(1);
  auto got = reader.ReadRanges("obj", {{3000, 1000}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].view(), f.data.substr(3000, 1000));
  EXPECT_EQ(f.store->reads() - before, 2);  // the stalled request and its hedge
  EXPECT_EQ(f.store->stalled(), 1);
  f.store->ReleaseStalled();  // the loser answers late and is dropped
}

// A store that answers inside ReadAsync (as a block cache does on a hit), after `delay`.
class SynchronousStore : public MemoryStore {
 public:
  void ReadAsync(ReadRequest request, ReadCallback done) override {
    reads.fetch_add(1);
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    MemoryStore::ReadAsync(std::move(request), std::move(done));
  }
  std::atomic<int> reads{0};
  absl::Duration delay;
};

TEST(RangedReaderTest, AnswersInsideTheCallAreNeitherHedgedNorLatencySamples) {
  auto store = std::make_shared<SynchronousStore>();
  std::string data = Pattern(8000);
  store->Set("obj", Buffer::Copy(data));
  RangedReader reader(store, {.part_size = 1000,
                              .hedge_multiple = 2,
                              .hedge_floor = absl::Milliseconds(1),
                              .hedge_min_samples = 1});
  // Quick answers: were they latency samples, the hedge delay would drop to the 1 ms floor.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(reader.Read("obj", {0, 8000}).ok());
  EXPECT_EQ(store->reads.load(), 160);
  // A slow answer, still inside the call: nothing to hedge (no timer is armed for it).
  store->delay = absl::Milliseconds(50);
  auto got = reader.ReadRanges("obj", {{3000, 1000}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].view(), data.substr(3000, 1000));
  EXPECT_EQ(store->reads.load(), 161);
}

TEST(RangedReaderTest, HedgeLosesToAFailedOriginalOnlyIfBothFail) {
  Fixture f(8000, {.latency = absl::Milliseconds(1)});
  RangedReader reader(f.store, {.part_size = 1000,
                                .hedge_multiple = 2,
                                .hedge_floor = absl::Milliseconds(5),
                                .hedge_min_samples = 8});
  ASSERT_TRUE(reader.Read("obj", {0, 8000}).ok());
  ASSERT_TRUE(reader.Read("obj", {0, 8000}).ok());
  // The original stalls and will fail when released; the hedge succeeds first.
  f.store->FailNext(1, absl::UnavailableError("reset"));
  f.store->StallNext(1);
  absl::Notification done;
  absl::StatusOr<std::vector<Buffer>> result;
  reader.ReadRangesAsync("obj", {{0, 500}}, "", [&](absl::StatusOr<std::vector<Buffer>> r) {
    result = std::move(r);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)[0].view(), f.data.substr(0, 500));
  f.store->ReleaseStalled();
}

TEST(RangedReaderTest, ConcurrentCallersGetTheirOwnBytes) {
  Fixture f(1 << 20, {.latency = absl::Microseconds(200), .jitter = absl::Milliseconds(1)});
  RangedReader reader(f.store, {.part_size = 64 << 10, .max_hole = 4096});
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.push_back(StartThread("reader", [&, t] {
      for (int i = 0; i < 20; ++i) {
        uint64_t base = ((t * 7919 + i * 104729) % 900) * 1000;
        std::vector<ByteRange> ranges = {{base, 100}, {base + 5000, 200000}, {base + 1000, 1}};
        auto got = reader.ReadRanges("obj", ranges);
        if (!got.ok()) {
          ADD_FAILURE() << got.status();
          ++failures;
          continue;
        }
        for (size_t k = 0; k < ranges.size(); ++k) {
          if ((*got)[k].view() !=
              std::string_view(f.data).substr(ranges[k].offset, ranges[k].length)) {
            ++failures;
          }
        }
      }
    }));
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace stoker::io
