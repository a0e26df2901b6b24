#include "stoker/io/cache/block_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "stoker/core/strings.h"
#include "stoker/io/cache/disk_tier.h"

namespace stoker::io {
namespace {

BlockKey Key(uint64_t index, std::string etag = "e1") { return {"mem://b/obj", etag, index}; }

Buffer Block(char c, size_t n = 100) { return Buffer::FromString(std::string(n, c)); }

// A fresh folder under the test temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = StrCat(::testing::TempDir(), "/block_cache_test-", ::getpid(), "-", counter++);
    std::filesystem::remove_all(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  int Files() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path_)) n += e.is_regular_file();
    return n;
  }

 private:
  std::string path_;
};

TEST(BlockCacheTest, InsertLookupAndCounters) {
  BlockCache cache(1 << 20);
  EXPECT_FALSE(cache.Lookup(Key(0)));
  cache.Insert(Key(0), Block('a'));
  auto handle = cache.Lookup(Key(0));
  ASSERT_TRUE(handle);
  EXPECT_EQ(handle.data().view(), std::string(100, 'a'));
  EXPECT_FALSE(cache.Lookup(Key(0, "other-etag")));  // another version of the object
  EXPECT_FALSE(cache.Lookup(Key(1)));
  auto stats = cache.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_EQ(stats.memory_bytes, 100u);
  EXPECT_EQ(stats.memory_blocks, 1u);
}

TEST(BlockCacheTest, LruBudgetHolds) {
  BlockCache cache(1000);  // ten blocks of 100 bytes
  for (uint64_t i = 0; i < 10; ++i) cache.Insert(Key(i), Block('a' + i));
  EXPECT_TRUE(cache.Lookup(Key(0)));  // now the most recently used
  for (uint64_t i = 10; i < 15; ++i) cache.Insert(Key(i), Block('x'));
  auto stats = cache.stats();
  EXPECT_EQ(stats.memory_bytes, 1000u);
  EXPECT_EQ(stats.evictions, 5u);
  EXPECT_TRUE(cache.Lookup(Key(0)));
  for (uint64_t i = 1; i <= 5; ++i) EXPECT_FALSE(cache.Lookup(Key(i))) << i;
  for (uint64_t i = 6; i < 15; ++i) EXPECT_TRUE(cache.Lookup(Key(i))) << i;
  EXPECT_LE(cache.stats().memory_bytes, 1000u);
}

TEST(BlockCacheTest, PinnedBlocksAreNotEvicted) {
  BlockCache cache(300);
  BlockCache::Handle pinned = cache.Insert(Key(0), Block('p'));
  for (uint64_t i = 1; i < 10; ++i) cache.Insert(Key(i), Block('x'));
  EXPECT_LE(cache.stats().memory_bytes, 300u);
  EXPECT_EQ(pinned.data().view(), std::string(100, 'p'));
  EXPECT_TRUE(cache.Lookup(Key(0)));
  // Over budget only by what is pinned: hold three handles on a budget of two blocks.
  BlockCache small(200);
  std::vector<BlockCache::Handle> held;
  for (uint64_t i = 0; i < 3; ++i) held.push_back(small.Insert(Key(i), Block('h')));
  EXPECT_EQ(small.stats().memory_bytes, 300u);
  held.clear();
  EXPECT_EQ(small.stats().memory_bytes, 200u);
}

TEST(BlockCacheTest, BuffersOutliveEviction) {
  BlockCache cache(100);
  Buffer kept;
  {
    auto handle = cache.Insert(Key(0), Block('k'));
    kept = handle.data();
  }
  cache.Insert(Key(1), Block('z'));
  EXPECT_FALSE(cache.Lookup(Key(0)));
  EXPECT_EQ(kept.view(), std::string(100, 'k'));
}

TEST(BlockCacheTest, VerifiedRangesLiveWithTheCachedBytes) {
  BlockCache cache(1 << 20);
  const size_t n = 4 * kMinVerifiedRangeBytes;
  Buffer block = cache.Insert(Key(0), Block('v', n)).data();
  Buffer record = block.Slice(100, kMinVerifiedRangeBytes);
  EXPECT_FALSE(IsVerified(record));
  MarkVerified(record);
  EXPECT_TRUE(IsVerified(record));
  // The same range of the same bytes, however it was reached (a later hit's slice).
  EXPECT_TRUE(IsVerified(cache.Lookup(Key(0)).data().Slice(100, kMinVerifiedRangeBytes)));
  // Any other range is not: another offset, another length, the whole block.
  EXPECT_FALSE(IsVerified(block.Slice(101, kMinVerifiedRangeBytes)));
  EXPECT_FALSE(IsVerified(block.Slice(100, kMinVerifiedRangeBytes + 1)));
  EXPECT_FALSE(IsVerified(block));
  // Bytes that are not a cached block's: never marked, whatever their content.
  Buffer copy = Buffer::Copy(record.view());
  MarkVerified(copy);
  EXPECT_FALSE(IsVerified(copy));
  // Short ranges are not remembered.
  MarkVerified(block.Slice(0, kMinVerifiedRangeBytes - 1));
  EXPECT_FALSE(IsVerified(block.Slice(0, kMinVerifiedRangeBytes - 1)));
  // The block entering the cache again (another insert of the key: fetched again, or promoted
  // from disk) is new bytes: nothing of it is verified.
  Buffer again = cache.Insert(Key(0), Block('v', n)).data();
  EXPECT_FALSE(IsVerified(again.Slice(100, kMinVerifiedRangeBytes)));
  EXPECT_TRUE(IsVerified(record));  // (the old bytes, still held here, keep their marks)
}

TEST(BlockCacheTest, DiskPromotedBlockStartsUnverified) {
  TempDir dir;
  BlockCacheOptions options{.memory_bytes = 1 << 20, .disk_dir = dir.path()};
  const size_t n = 2 * kMinVerifiedRangeBytes;
  {
    auto cache = BlockCache::Create(options);
    ASSERT_TRUE(cache.ok()) << cache.status();
    Buffer block = (*cache)->Insert(Key(0), Block('d', n)).data();
    MarkVerified(block.Slice(0, kMinVerifiedRangeBytes));
    (*cache)->Flush();
  }
  auto cache = BlockCache::Create(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto handle = (*cache)->Lookup(Key(0));
  ASSERT_TRUE(handle);
  EXPECT_EQ((*cache)->stats().disk_hits, 1u);
  EXPECT_FALSE(IsVerified(handle.data().Slice(0, kMinVerifiedRangeBytes)));
}

TEST(BlockCacheTest, SingleFlightJoinsConcurrentMisses) {
  BlockCache cache(1 << 20);
  BlockCache::Handle hit;
  EXPECT_EQ(cache.LookupOrFetch(Key(7), &hit, nullptr), BlockCache::Outcome::kFetch);
  std::vector<std::string> got;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(cache.LookupOrFetch(Key(7), &hit,
                                  [&](absl::StatusOr<BlockCache::Handle> h) {
                                    ASSERT_TRUE(h.ok());
                                    got.push_back(h->data().ToString());
                                  }),
              BlockCache::Outcome::kJoined);
  }
  EXPECT_TRUE(got.empty());
  cache.Fulfill(Key(7), Buffer::Copy("seven"));
  EXPECT_THAT(got, ::testing::Each(std::string("seven")));
  EXPECT_EQ(got.size(), 5u);
  EXPECT_EQ(cache.LookupOrFetch(Key(7), &hit, nullptr), BlockCache::Outcome::kHit);
  EXPECT_EQ(hit.data().view(), "seven");
  auto stats = cache.stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.joined, 5u);
  EXPECT_EQ(stats.hits, 1u);
}

TEST(BlockCacheTest, AbandonedFetchFailsWaitersAndIsRetried) {
  BlockCache cache(1 << 20);
  BlockCache::Handle hit;
  ASSERT_EQ(cache.LookupOrFetch(Key(1), &hit, nullptr), BlockCache::Outcome::kFetch);
  absl::Status seen;
  ASSERT_EQ(cache.LookupOrFetch(Key(1), &hit,
                                [&](absl::StatusOr<BlockCache::Handle> h) { seen = h.status(); }),
            BlockCache::Outcome::kJoined);
  cache.Abandon(Key(1), absl::UnavailableError("reset"));
  EXPECT_EQ(seen.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cache.LookupOrFetch(Key(1), &hit, nullptr), BlockCache::Outcome::kFetch);
  cache.Abandon(Key(1), absl::UnavailableError("again"));
}

TEST(BlockCacheTest, EraseObjectDropsAllVersions) {
  BlockCache cache(1 << 20);
  cache.Insert(Key(0, "e1"), Block('a'));
  cache.Insert(Key(1, "e2"), Block('b'));
  cache.Insert({"mem://b/other", "e1", 0}, Block('c'));
  cache.EraseObject("mem://b/obj");
  EXPECT_FALSE(cache.Lookup(Key(0, "e1")));
  EXPECT_FALSE(cache.Lookup(Key(1, "e2")));
  EXPECT_TRUE(cache.Lookup({"mem://b/other", "e1", 0}));
  EXPECT_EQ(cache.stats().memory_bytes, 100u);
}

TEST(BlockCacheTest, DiskTierSurvivesANewInstance) {
  TempDir dir;
  {
    auto cache = BlockCache::Create({.memory_bytes = 1 << 20, .disk_dir = dir.path()});
    ASSERT_TRUE(cache.ok()) << cache.status();
    (*cache)->Insert(Key(0), Block('d', 5000));
    (*cache)->Insert(Key(1), Block('e', 10));
    (*cache)->Flush();
  }
  EXPECT_EQ(dir.Files(), 2);
  auto cache = BlockCache::Create({.memory_bytes = 1 << 20, .disk_dir = dir.path()});
  ASSERT_TRUE(cache.ok());
  auto handle = (*cache)->Lookup(Key(0));
  ASSERT_TRUE(handle);
  EXPECT_EQ(handle.data().view(), std::string(5000, 'd'));
  // A changed object (new ETag) never gets the old bytes.
  EXPECT_FALSE((*cache)->Lookup(Key(1, "e2")));
  BlockCache::Handle hit;
  EXPECT_EQ((*cache)->LookupOrFetch(Key(1), &hit, nullptr), BlockCache::Outcome::kHit);
  EXPECT_EQ(hit.data().view(), std::string(10, 'e'));
  auto stats = (*cache)->stats();
  EXPECT_EQ(stats.disk_hits, 2u);
  EXPECT_EQ(stats.memory_blocks, 2u);  // promoted to RAM
}

TEST(BlockCacheTest, DamagedDiskBlockIsDroppedNotServed) {
  TempDir dir;
  {
    auto cache = BlockCache::Create({.disk_dir = dir.path()});
    ASSERT_TRUE(cache.ok());
    (*cache)->Insert(Key(0), Block('d', 1000));
    (*cache)->Flush();
  }
  ASSERT_EQ(dir.Files(), 1);
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('X');  // flip a data byte
  }
  auto cache = BlockCache::Create({.disk_dir = dir.path()});
  ASSERT_TRUE(cache.ok());
  EXPECT_FALSE((*cache)->Lookup(Key(0)));
  EXPECT_EQ(dir.Files(), 0);
}

TEST(BlockCacheTest, DiskBudgetHoldsAndLeftoversAreCleaned) {
  TempDir dir;
  std::filesystem::create_directories(dir.path());
  std::ofstream(dir.path() + "/unrelated.txt") << "kept";
  auto cache =
      BlockCache::Create({.memory_bytes = 1 << 20, .disk_dir = dir.path(), .disk_bytes = 3 * 1100});
  ASSERT_TRUE(cache.ok());
  for (uint64_t i = 0; i < 10; ++i) (*cache)->Insert(Key(i), Block('x', 1000));
  (*cache)->Flush();
  auto stats = (*cache)->stats();
  EXPECT_LE(stats.disk_bytes, 3u * 1100);
  EXPECT_EQ(stats.disk_evictions, 7u);
  EXPECT_EQ(dir.Files(), 4);  // three blocks and the unrelated file
  // A smaller budget on reopen evicts down to it.
  cache->reset();
  auto smaller = BlockCache::Create({.disk_dir = dir.path(), .disk_bytes = 1100});
  ASSERT_TRUE(smaller.ok());
  EXPECT_EQ(dir.Files(), 2);
}

TEST(BlockCacheTest, DiskEraseObject) {
  TempDir dir;
  auto cache = BlockCache::Create({.disk_dir = dir.path()});
  ASSERT_TRUE(cache.ok());
  (*cache)->Insert(Key(0), Block('a'));
  (*cache)->Insert({"mem://b/other", "e1", 0}, Block('c'));
  (*cache)->EraseObject("mem://b/obj");
  EXPECT_EQ(dir.Files(), 1);
}

TEST(BlockCacheTest, UnwritableDiskFolderIsAnError) {
  auto cache = BlockCache::Create({.disk_dir = "/proc/no/such/folder"});
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(cache.status().message()), ::testing::HasSubstr("/proc/no/such/folder"));
}

TEST(StableHashTest, StableAndSpread) {
  EXPECT_EQ(StableHash64("hello"), StableHash64("hello"));
  EXPECT_NE(StableHash64("hello"), StableHash64("hellp"));
  EXPECT_NE(StableHash64(""), StableHash64(std::string(1, '\0')));
  EXPECT_NE(StableHash64("abcdefgh12345678"), StableHash64("abcdefgh12345679"));
}

TEST(DefaultBlockCacheTest, BudgetFromEnvironment) {
  // Any case, as every size flag takes it (core/byte_size.h).
  ::setenv("STOKER_CACHE_BYTES", "3m", 1);
  auto cache = DefaultBlockCache();
  EXPECT_EQ(cache->memory_budget(), 3u << 20);
  EXPECT_EQ(DefaultBlockCache(), cache);
  EXPECT_FALSE(cache->has_disk_tier());
}

}  // namespace
}  // namespace stoker::io
