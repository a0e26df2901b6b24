#include "stoker/io/cache/cached_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "stoker/core/strings.h"
#include "stoker/io/memory_store.h"
#include "stoker/testing/latency_store.h"

namespace stoker::io {
namespace {

using ::stoker::testing::LatencyStore;
using ::testing::HasSubstr;

std::string Pattern(size_t n, int seed = 0) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 97 + seed) % 26);
  return s;
}

// 10,500 bytes in blocks of 1,000 over a LatencyStore over memory.
struct Fixture {
  explicit Fixture(CachedStoreOptions options = {.block_size = 1000},
                   std::shared_ptr<BlockCache> shared_cache = nullptr)
      : data(Pattern(10500)),
        memory(std::make_shared<MemoryStore>()),
        base(std::make_shared<LatencyStore>(memory)),
        cache(shared_cache ? shared_cache : std::make_shared<BlockCache>(1 << 20)),
        store(std::make_shared<CachedStore>(base, cache, options)) {
    memory->Set("obj", Buffer::Copy(data));
  }
  std::string data;
  std::shared_ptr<MemoryStore> memory;
  std::shared_ptr<LatencyStore> base;
  std::shared_ptr<BlockCache> cache;
  std::shared_ptr<CachedStore> store;
};

TEST(CachedStoreTest, ReadsThroughTheCache) {
  Fixture f;
  auto first = f.store->Read("obj", {1500, 2000});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->view(), f.data.substr(1500, 2000));
  // Blocks 1..3 in one request, carrying the ETag.
  auto requests = f.base->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].range, (ByteRange{1000, 3000}));
  EXPECT_EQ(requests[0].if_match, f.memory->Stat("obj")->etag);
  // Within those blocks: no request at all.
  EXPECT_EQ(f.store->Read("obj", {1000, 3000})->view(), f.data.substr(1000, 3000));
  EXPECT_EQ(f.store->Read("obj", {2100, 10})->view(), f.data.substr(2100, 10));
  EXPECT_EQ(f.base->reads(), 1);
  EXPECT_EQ(f.base->stats(), 1);  // the Stat is cached too
  // The whole object: only the missing runs are fetched ([0,1000) and [4000,10500)).
  EXPECT_EQ(f.store->Read("obj")->view(), f.data);
  EXPECT_EQ(f.base->reads(), 3);
  EXPECT_EQ(f.store->Read("obj", {10400, ByteRange::kToEnd})->view(), f.data.substr(10400));
  EXPECT_EQ(f.base->reads(), 3);
}

TEST(CachedStoreTest, RangeWithinABlockIsASliceOfIt) {
  Fixture f;
  auto a = f.store->Read("obj", {3100, 10});
  auto b = f.store->Read("obj", {3500, 10});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->owner(), b->owner());
  EXPECT_EQ(a->data() + 400, b->data());
}

TEST(CachedStoreTest, EdgesAndErrors) {
  Fixture f;
  EXPECT_EQ(f.store->Read("obj", {10500, 0})->size(), 0u);
  EXPECT_EQ(f.store->Read("obj", {10000, 5000})->view(), f.data.substr(10000));
  EXPECT_EQ(f.store->Read("obj", {20000, 1}).status().code(), absl::StatusCode::kOutOfRange);
  auto missing = f.store->Read("missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("mem://test/missing"));
  f.memory->Set("empty", Buffer());
  EXPECT_EQ(f.store->Read("empty")->size(), 0u);
}

TEST(CachedStoreTest, LargeReadsAreFetchedInBoundedRequests) {
  Fixture f({.block_size = 1000, .max_request_bytes = 3000});
  f.base->SetLatency(absl::Milliseconds(20));  // long enough that the four requests overlap
  EXPECT_EQ(f.store->Read("obj")->view(), f.data);
  auto requests = f.base->requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].range, (ByteRange{0, 3000}));
  EXPECT_EQ(requests[3].range, (ByteRange{9000, 1500}));
  EXPECT_GE(f.base->max_reads_in_flight(), 2);  // issued together
}

TEST(CachedStoreTest, ConcurrentMissesOfABlockIssueOneRequest) {
  Fixture f;
  ASSERT_TRUE(f.store->Stat("obj").ok());
  f.base->StallNext(1);
  constexpr int kReaders = 8;
  std::atomic<int> done{0};
  std::atomic<int> correct{0};
  absl::Notification all_done;
  for (int i = 0; i < kReaders; ++i) {
    f.store->ReadAsync({"obj", {5000 + i * 10u, 100}, ""}, [&, i](absl::StatusOr<Buffer> r) {
      if (r.ok() && r->view() == f.data.substr(5000 + i * 10, 100)) ++correct;
      if (++done == kReaders) all_done.Notify();
    });
  }
  ASSERT_TRUE(f.base->AwaitStalled(1, absl::Seconds(30)));
  EXPECT_EQ(done.load(), 0);
  f.base->ReleaseStalled();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(correct.load(), kReaders);
  EXPECT_EQ(f.base->reads(), 1);
  auto stats = f.cache->stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.joined, kReaders - 1u);
}

TEST(CachedStoreTest, FailedFetchReachesEveryWaiterAndIsRetriedLater) {
  Fixture f;
  ASSERT_TRUE(f.store->Stat("obj").ok());
  f.base->StallNext(1);
  f.base->FailNext(1, absl::UnavailableError("connection reset"));
  std::atomic<int> unavailable{0};
  std::atomic<int> done{0};
  absl::Notification all_done;
  for (int i = 0; i < 3; ++i) {
    f.store->ReadAsync({"obj", {0, 10}, ""}, [&](absl::StatusOr<Buffer> r) {
      if (r.status().code() == absl::StatusCode::kUnavailable &&
          absl::StrContains(r.status().message(), "bytes [0, 1000) of mem://test/obj")) {
        ++unavailable;
      }
      if (++done == 3) all_done.Notify();
    });
  }
  ASSERT_TRUE(f.base->AwaitStalled(1, absl::Seconds(30)));
  f.base->ReleaseStalled();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(unavailable.load(), 3);
  EXPECT_EQ(f.store->Read("obj", {0, 10})->view(), f.data.substr(0, 10));
}

TEST(CachedStoreTest, ShortResponseIsDataLoss) {
  Fixture f;
  f.base->ShortenNext(1, 5);
  auto got = f.store->Read("obj", {0, 2000});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("mem://test/obj"));
  EXPECT_EQ(f.store->Read("obj", {0, 2000})->view(), f.data.substr(0, 2000));  // not cached
}

TEST(CachedStoreTest, PutAndDeleteInvalidate) {
  Fixture f;
  EXPECT_EQ(f.store->Read("obj", {0, 5})->view(), f.data.substr(0, 5));
  ASSERT_TRUE(f.store->Put("obj", Buffer::Copy("new content")).ok());
  EXPECT_EQ(f.store->Read("obj")->view(), "new content");
  EXPECT_EQ(f.store->Stat("obj")->size, 11u);
  ASSERT_TRUE(f.store->Delete("obj").ok());
  EXPECT_EQ(f.store->Read("obj").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.cache->stats().memory_blocks, 0u);
}

TEST(CachedStoreTest, ObjectChangedElsewhereNeverMixesVersions) {
  Fixture f({.block_size = 1000, .stat_ttl = absl::Hours(1)});
  EXPECT_EQ(f.store->Read("obj", {0, 10})->view(), f.data.substr(0, 10));
  std::string old_etag = f.memory->Stat("obj")->etag;
  std::string changed = Pattern(10500, 5);
  f.memory->Set("obj", Buffer::Copy(changed));  // behind the cache's back
  // Block 0 is cached and block 1 is not: the fetch of block 1 finds the ETag changed, and the
  // read starts over on the new version instead of joining old block 0 with new block 1.
  auto got = f.store->Read("obj", {900, 200});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->view(), changed.substr(900, 200));
  // A reader pinning the old version is told.
  absl::StatusOr<Buffer> pinned;
  absl::Notification done;
  f.store->ReadAsync({"obj", {0, 10}, old_etag}, [&](absl::StatusOr<Buffer> r) {
    pinned = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CachedStoreTest, DiskTierServesANewProcess) {
  std::string dir = StrCat(::testing::TempDir(), "/cached_store_test-", ::getpid());
  std::filesystem::remove_all(dir);
  auto memory = std::make_shared<MemoryStore>();
  std::string data = Pattern(5000);
  memory->Set("obj", Buffer::Copy(data));
  {
    auto cache = BlockCache::Create({.memory_bytes = 1 << 20, .disk_dir = dir});
    ASSERT_TRUE(cache.ok());
    CachedStore store(memory, *cache, {.block_size = 1000});
    EXPECT_EQ(store.Read("obj")->view(), data);
  }
  auto base = std::make_shared<LatencyStore>(memory);
  auto cache = BlockCache::Create({.memory_bytes = 1 << 20, .disk_dir = dir});
  ASSERT_TRUE(cache.ok());
  CachedStore store(base, *cache, {.block_size = 1000});
  EXPECT_EQ(store.Read("obj")->view(), data);
  EXPECT_EQ(base->reads(), 0);
  EXPECT_EQ((*cache)->stats().disk_hits, 5u);
  std::filesystem::remove_all(dir);
}

TEST(CachedStoreTest, ListPassesThrough) {
  Fixture f;
  auto listed = f.store->List({});
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->objects.size(), 1u);
  EXPECT_EQ(listed->objects[0].key, "obj");
  EXPECT_EQ(f.store->Url("obj"), "mem://test/obj");
}

}  // namespace
}  // namespace stoker::io
