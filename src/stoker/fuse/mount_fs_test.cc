#include "stoker/fuse/mount_fs.h"

#include <cerrno>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "stoker/core/strings.h"
#include "stoker/io/memory_store.h"
#include "stoker/testing/latency_store.h"

namespace stoker::fuse {
namespace {

std::string Pattern(size_t size, int seed) {
  std::string s(size, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

class MountFsTest : public ::testing::Test {
 protected:
  MountFsTest()
      : store_(std::make_shared<io::MemoryStore>("mnt")),
        cache_(std::make_shared<io::BlockCache>(64 << 20)) {
    store_->Set("data/small.txt", Buffer::FromString("hello"));
    store_->Set("data/big.bin", Buffer::FromString(Pattern(5 << 20, 1)));
    store_->Set("data/sub/a", Buffer::FromString("a"));
    store_->Set("data/sub/b", Buffer::FromString("bb"));
    store_->Set("other/x", Buffer::FromString("x"));
    fs_ = std::make_unique<MountFs>(store_, "data", cache_);
  }
  std::string ReadAll(std::string_view path, size_t chunk) {
    bool keep = false;
    auto file = fs_->Open(path, &keep);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return "";
    std::string out;
    std::vector<char> buf(chunk);
    for (uint64_t off = 0;;) {
      auto n = fs_->Read(**file, buf.data(), chunk, off);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok() || *n == 0) break;
      out.append(buf.data(), *n);
      off += *n;
    }
    return out;
  }
  std::shared_ptr<io::MemoryStore> store_;
  std::shared_ptr<io::BlockCache> cache_;
  std::unique_ptr<MountFs> fs_;
};

TEST_F(MountFsTest, ListsTheRootLazilyWithSizesFromTheListing) {
  ASSERT_TRUE(fs_->CheckRoot().ok());
  auto entries = fs_->ReadDir("/");
  ASSERT_TRUE(entries.ok()) << entries.status();
  std::vector<std::string> names;
  for (const auto& [name, attr] : *entries) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"big.bin", "small.txt", "sub"}));
  auto big = fs_->GetAttr("/big.bin");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->is_dir);
  EXPECT_EQ(big->size, 5u << 20);
  auto sub = fs_->GetAttr("/sub");
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE(sub->is_dir);
  auto sub_entries = fs_->ReadDir("/sub");
  ASSERT_TRUE(sub_entries.ok());
  EXPECT_EQ(sub_entries->size(), 2u);
  EXPECT_EQ(fs_->GetAttr("/sub/b")->size, 2u);
}

TEST_F(MountFsTest, MissingPathsAreEnoent) {
  auto missing = fs_->GetAttr("/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(fs_->ErrnoFor(missing.status(), "/nope"), ENOENT);
  auto deep = fs_->GetAttr("/nope/deeper/x");
  EXPECT_EQ(fs_->ErrnoFor(deep.status(), "/nope/deeper/x"), ENOENT);
  EXPECT_EQ(fs_->ErrnoFor(absl::PermissionDeniedError("no"), "/p"), EACCES);
  EXPECT_EQ(fs_->ErrnoFor(absl::UnavailableError("down"), "/p"), EIO);
  bool keep;
  EXPECT_EQ(fs_->ErrnoFor(fs_->Open("/sub", &keep).status(), "/sub"), EISDIR);
}

TEST_F(MountFsTest, ReadsSmallAndLargeFilesByteExact) {
  EXPECT_EQ(ReadAll("/small.txt", 4096), "hello");
  EXPECT_EQ(ReadAll("/big.bin", 128 << 10), Pattern(5 << 20, 1));
  EXPECT_EQ(ReadAll("/big.bin", 100'000), Pattern(5 << 20, 1));
}

TEST_F(MountFsTest, RandomReadsMatch) {
  const std::string expected = Pattern(5 << 20, 1);
  bool keep;
  auto file = fs_->Open("/big.bin", &keep);
  ASSERT_TRUE(file.ok());
  uint32_t x = 7;
  std::vector<char> buf(70'000);
  for (int i = 0; i < 200; ++i) {
    x = x * 1103515245 + 12345;
    uint64_t off = x % expected.size();
    auto n = fs_->Read(**file, buf.data(), buf.size(), off);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, std::min<size_t>(buf.size(), expected.size() - off));
    ASSERT_EQ(std::string(buf.data(), *n), expected.substr(off, *n)) << off;
  }
  EXPECT_EQ(*fs_->Read(**file, buf.data(), buf.size(), expected.size()), 0u);
}

TEST_F(MountFsTest, KeepCacheOnlyWhenTheVersionIsUnchanged) {
  bool keep = true;
  ASSERT_TRUE(fs_->Open("/small.txt", &keep).ok());
  EXPECT_FALSE(keep);  // first open
  ASSERT_TRUE(fs_->Open("/small.txt", &keep).ok());
  EXPECT_TRUE(keep);
  // A changed object is seen once the listing expires (here: a mount with a zero TTL).
  MountFsOptions options;
  options.dir_ttl = absl::ZeroDuration();
  MountFs fresh(store_, "data/", cache_, options);
  ASSERT_TRUE(fresh.Open("/small.txt", &keep).ok());
  store_->Set("data/small.txt", Buffer::FromString("changed!"));
  ASSERT_TRUE(fresh.Open("/small.txt", &keep).ok());
  EXPECT_FALSE(keep);
  EXPECT_EQ(fresh.GetAttr("/small.txt")->size, 8u);
}

TEST_F(MountFsTest, ReadAheadStaysWithinTheGlobalBudget) {
  // 4 MiB of cache: read-ahead in flight is capped at 2 MiB for all files together.
  auto small_cache = std::make_shared<io::BlockCache>(4 << 20);
  MountFs fs(store_, "data", small_cache);
  bool keep;
  std::vector<std::unique_ptr<MountFs::File>> files;
  files.reserve(20);
  for (int i = 0; i < 20; ++i) files.push_back(*fs.Open("/big.bin", &keep));
  std::vector<char> buf(128 << 10);
  const std::string expected = Pattern(5 << 20, 1);
  for (uint64_t off = 0; off < (1 << 20); off += buf.size()) {
    for (auto& file : files) {
      auto n = fs.Read(*file, buf.data(), buf.size(), off);
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(std::string(buf.data(), *n), expected.substr(off, *n));
      EXPECT_LE(fs.prefetch_bytes_in_flight(), 2u << 20);
    }
  }
}

// Waits (up to 10 s) until no read-ahead is in flight.
bool WaitForReadAhead(MountFs& fs) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fs.prefetch_bytes_in_flight() > 0) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST_F(MountFsTest, ReadAheadFetchesEachBlockOnceInFewRequests) {
  // A store with a time to first byte, so read-ahead is still in flight when reads arrive.
  constexpr uint64_t kSize = 40 << 20;
  const std::string expected = Pattern(kSize, 3);
  store_->Set("data/seq.bin", Buffer::FromString(expected));
  auto slow = std::make_shared<testing::LatencyStore>(
      store_, testing::LatencyStore::Options{.latency = absl::Milliseconds(2)});
  auto cache = std::make_shared<io::BlockCache>(256 << 20);
  MountFs fs(slow, "data", cache);
  bool keep;
  auto file = fs.Open("/seq.bin", &keep);
  ASSERT_TRUE(file.ok());
  std::vector<char> buf(128 << 10);
  for (uint64_t off = 0; off < kSize; off += buf.size()) {
    auto n = fs.Read(**file, buf.data(), buf.size(), off);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(std::string_view(buf.data(), *n), std::string_view(expected).substr(off, *n)) << off;
  }
  ASSERT_TRUE(WaitForReadAhead(fs));
  // Every 1 MiB block was fetched exactly once: the reads found what read-ahead put in the
  // cache under the same keys (a mismatch would fetch every block twice).
  EXPECT_EQ(cache->stats().misses, kSize >> 20);
  // ...and read-ahead fetched runs of blocks, not one request per block.
  EXPECT_LE(slow->reads(), 16);
}

TEST_F(MountFsTest, ReadsHandledOutOfOrderKeepTheWindowGrowing) {
  // The kernel sends several 128 KiB reads at once; FUSE threads handle them in any order.
  constexpr uint64_t kRead = 128 << 10;
  const std::string expected = Pattern(5 << 20, 1);
  bool keep;
  auto file = fs_->Open("/big.bin", &keep);
  ASSERT_TRUE(file.ok());
  std::vector<char> buf(kRead);
  uint64_t window = 0;
  for (uint64_t pair = 0; pair < 8; ++pair) {
    for (uint64_t off : {(2 * pair + 1) * kRead, 2 * pair * kRead}) {
      auto n = fs_->Read(**file, buf.data(), kRead, off);
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(std::string_view(buf.data(), *n), std::string_view(expected).substr(off, *n));
      if (pair > 0 || off == 0) {
        EXPECT_GE(fs_->read_ahead_window(**file), window) << "reset at " << off;
      }
      window = fs_->read_ahead_window(**file);
    }
  }
  EXPECT_EQ(window, 8u << 20);  // 64 MiB cache: the window is capped at an eighth of it
}

}  // namespace
}  // namespace stoker::fuse
