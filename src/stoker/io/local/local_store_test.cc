#include "stoker/io/local/local_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "stoker/core/strings.h"
#include "stoker/io/local/local_map.h"

namespace stoker::io {
namespace {

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("stoker-local-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    prefix_ = root_.string().substr(1) + "/";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
  std::string prefix_;  // key of the test folder, ending in '/'
  LocalStore store_{2};
};

TEST_F(LocalStoreTest, WriteIsInvisibleUntilClose) {
  auto writer = store_.OpenWriter(prefix_ + "sub/file");
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(Buffer::Copy("hello ")).ok());
  ASSERT_TRUE((*writer)->Append(Buffer::Copy("world")).ok());
  EXPECT_EQ(store_.Stat(prefix_ + "sub/file").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*writer)->Close().ok());
  EXPECT_EQ(store_.Read(prefix_ + "sub/file")->view(), "hello world");
  EXPECT_EQ(store_.Read(prefix_ + "sub/file", {6, 5})->view(), "world");
  EXPECT_EQ(store_.Stat(prefix_ + "sub/file")->size, 11u);
}

// A batch read warm (the page cache answers on the caller's thread while the engine takes the
// later half) and cold (pages dropped: the page-cache read says EAGAIN and the engine reads
// them): the same bytes either way, each request answered once.
TEST_F(LocalStoreTest, BatchesReadTheSameBytesWarmAndCold) {
  std::string data(4 << 20, '\0');
  std::mt19937 gen(11);
  for (char& c : data) c = static_cast<char>(gen());
  ASSERT_TRUE(store_.Put(prefix_ + "big", Buffer::Copy(data)).ok());
  std::vector<ByteRange> ranges;
  for (int i = 0; i < 32; ++i) {
    uint64_t offset = gen() % data.size();
    ranges.push_back({offset, 1 + gen() % (200'000)});
  }
  for (bool cold : {false, true}) {
    if (cold) {
      int fd = ::open(store_.Url(prefix_ + "big").c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    std::vector<ReadRequest> requests;
    for (const ByteRange& r : ranges) requests.push_back({prefix_ + "big", r, ""});
    absl::Mutex mu;
    std::vector<std::optional<absl::StatusOr<Buffer>>> got(ranges.size());
    int calls = 0;
    std::vector<ReadCallback> done;
    for (size_t i = 0; i < ranges.size(); ++i) {
      done.push_back([&, i](absl::StatusOr<Buffer> result) {
        absl::MutexLock lock(&mu);
        got[i] = std::move(result);
        ++calls;
      });
    }
    store_.ReadBatchAsync(std::move(requests), std::move(done));
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 32; }, &calls));
    for (size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_TRUE(got[i]->ok()) << (cold ? "cold " : "warm ") << i << ": " << got[i]->status();
      EXPECT_TRUE((*got[i])->view() ==
                  std::string_view(data).substr(ranges[i].offset, ranges[i].length))
          << (cold ? "cold " : "warm ") << "read " << i;
    }
  }
}

TEST_F(LocalStoreTest, AbandonedWriterLeavesNothing) {
  {
    auto writer = store_.OpenWriter(prefix_ + "gone");
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(Buffer::Copy("partial")).ok());
  }
  auto listing = store_.List({prefix_, ""});
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->objects.empty());
}

TEST_F(LocalStoreTest, ListAndErrors) {
  for (const char* name : {"a", "b/1", "b/2", "c"}) {
    ASSERT_TRUE(store_.Put(prefix_ + name, Buffer::Copy(name)).ok());
  }
  auto shallow = store_.List({prefix_, "/"});
  ASSERT_TRUE(shallow.ok());
  ASSERT_EQ(shallow->objects.size(), 2u);
  EXPECT_EQ(shallow->objects[0].key, prefix_ + "a");
  EXPECT_THAT(shallow->common_prefixes, ::testing::ElementsAre(prefix_ + "b/"));
  EXPECT_EQ(store_.List({prefix_, ""})->objects.size(), 4u);
  EXPECT_EQ(store_.List({prefix_ + "b", ""})->objects.size(), 2u);

  auto missing = store_.Read(prefix_ + "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr(root_.string() + "/nope"));
  EXPECT_EQ(store_.Read(prefix_ + "a", {5, 1}).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(store_.Delete(prefix_ + "a").ok());
  ASSERT_TRUE(store_.Delete(prefix_ + "a").ok());
  EXPECT_EQ(store_.Stat(prefix_ + "a").status().code(), absl::StatusCode::kNotFound);
}

std::string RandomBytes(size_t size, uint64_t seed) {
  std::string s(size, '\0');
  std::mt19937_64 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Reads `requests` as one ReadBatchAsync and waits for every answer.
std::vector<absl::StatusOr<Buffer>> ReadBatch(LocalStore& store,
                                              std::vector<ReadRequest> requests) {
  std::vector<absl::StatusOr<Buffer>> results(requests.size());
  absl::Mutex mu;
  size_t left = requests.size();
  std::vector<ReadCallback> callbacks;
  for (size_t i = 0; i < requests.size(); ++i) {
    callbacks.push_back([&, i](absl::StatusOr<Buffer> result) {
      absl::MutexLock lock(&mu);
      results[i] = std::move(result);
      --left;
    });
  }
  store.ReadBatchAsync(std::move(requests), std::move(callbacks));
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](size_t* n) { return *n == 0; }, &left));
  return results;
}

LocalStoreOptions Engine(LocalStoreOptions::Engine engine, bool direct) {
  LocalStoreOptions options;
  options.engine = engine;
  options.direct = direct;
  options.io_threads = 2;
  return options;
}

void DropCachedPages(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Reads [offset, offset + length) of `path` with pread into the page cache (no read-ahead).
void Touch(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  std::string scratch(length, '\0');
  ASSERT_EQ(::pread(fd, scratch.data(), length, static_cast<off_t>(offset)),
            static_cast<ssize_t>(length));
  ::close(fd);
}

// Ranges the page cache holds (asked with cachestat, and with mincore as on kernels before 6.5)
// are answered as slices of a mapping of the file: the same range
// read twice comes back at the same address (nothing was copied). Cold ranges, a range only
// partly in the page cache, small reads, small files and a store with map_resident off are
// copied. Every answer holds the file's bytes.
class ResidencyTest : public LocalStoreTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    LocalStoreTest::SetUp();
    local_internal::UseMincoreForTesting(GetParam());
  }
  void TearDown() override {
    local_internal::UseMincoreForTesting(false);
    LocalStoreTest::TearDown();
  }
};
INSTANTIATE_TEST_SUITE_P(CachestatOrMincore, ResidencyTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "mincore" : "cachestat"; });

TEST_P(ResidencyTest, ResidentRangesAreSlicesOfAMappingWithTheSameBytes) {
  const std::string data = RandomBytes(6 << 20, 5);
  const std::string small_data = RandomBytes(512 << 10, 6);
  ASSERT_TRUE(store_.Put(prefix_ + "big", Buffer::Copy(data)).ok());
  ASSERT_TRUE(store_.Put(prefix_ + "small", Buffer::Copy(small_data)).ok());
  const std::string path = store_.Url(prefix_ + "big");
  std::vector<ByteRange> ranges = {{0, 100 << 10},           {4097, 200'000}, {3 << 20, 64 << 10},
                                   {(6 << 20) - 5000, 5000}, {1 << 20, 1000}, {5 << 20, 1 << 20}};
  auto requests = [&] {
    std::vector<ReadRequest> out;
    for (const ByteRange& r : ranges) out.push_back({prefix_ + "big", r, ""});
    out.push_back({prefix_ + "small", {1000, 100'000}, ""});
    return out;
  };
  auto check = [&](const std::vector<absl::StatusOr<Buffer>>& got, std::string_view what) {
    ASSERT_EQ(got.size(), ranges.size() + 1);
    for (size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << what << " " << i << ": " << got[i].status();
      EXPECT_TRUE(got[i]->view() ==
                  std::string_view(data).substr(ranges[i].offset, ranges[i].length))
          << what << " read " << i;
    }
    ASSERT_TRUE(got.back().ok()) << what << ": " << got.back().status();
    EXPECT_TRUE(got.back()->view() == std::string_view(small_data).substr(1000, 100'000)) << what;
  };
  for (auto engine : {LocalStoreOptions::Engine::kUring, LocalStoreOptions::Engine::kPread}) {
    SCOPED_TRACE(engine == LocalStoreOptions::Engine::kUring ? "io_uring" : "pread");
    {
      LocalStore store(Engine(engine, /*direct=*/false));
      // Warm: every large range of the big file is mapped; the 1,000-byte read and the small
      // file's read are copies.
      Touch(path, 0, data.size());
      Touch(store_.Url(prefix_ + "small"), 0, small_data.size());
      auto first = ReadBatch(store, requests());
      auto second = ReadBatch(store, requests());
      check(first, "warm");
      check(second, "warm again");
      for (size_t i = 0; i < ranges.size(); ++i) {
        bool mapped = ranges[i].length >= (16 << 10);
        EXPECT_EQ(first[i]->data() == second[i]->data(), mapped) << "read " << i;
      }
      EXPECT_NE(first.back()->data(), second.back()->data()) << "a file under 1 MiB is copied";
    }
    // Pages mapped into a process are not dropped by posix_fadvise(DONTNEED): the store and the
    // slices (which hold the mapping) are gone before the cache is dropped, and the cold and
    // mixed reads run on a fresh store.
    DropCachedPages(path);
    {
      LocalStore store(Engine(engine, /*direct=*/false));
      auto cold = ReadBatch(store, requests());
      check(cold, "cold");
    }
    // Mixed: the first 128 KiB back in the page cache, the rest not; the range at 4097 is then
    // partly resident and read as a whole by the engine, the one at 0 is a slice.
    DropCachedPages(path);
    Touch(path, 0, 128 << 10);
    {
      LocalStore store(Engine(engine, /*direct=*/false));
      auto mixed = ReadBatch(store, requests());
      check(mixed, "mixed");
      auto again = ReadBatch(store, {{prefix_ + "big", ranges[0], ""}});
      ASSERT_TRUE(again[0].ok());
      EXPECT_EQ(mixed[0]->data(), again[0]->data()) << "resident: a slice of the mapping";
      auto second = ReadBatch(store, {{prefix_ + "big", ranges[1], ""}});
      ASSERT_TRUE(second[0].ok());
      EXPECT_NE(mixed[1]->data(), second[0]->data()) << "partly resident: copied";
    }
  }
  // map_resident off: always copied.
  LocalStoreOptions off = Engine(LocalStoreOptions::Engine::kAuto, false);
  off.map_resident = false;
  LocalStore copying(off);
  Touch(path, 0, data.size());
  auto a = ReadBatch(copying, requests());
  auto b = ReadBatch(copying, requests());
  check(a, "map_resident off");
  EXPECT_NE(a[0]->data(), b[0]->data());
}

// A file replaced by rename while slices of its mapping are alive: the slices keep the old
// bytes (the old file stays mapped until they are dropped), the next read sees the new file.
// A file cut short in place is read to its new end, never past it.
TEST_F(LocalStoreTest, MappedSlicesOutliveAReplacedFile) {
  const std::string old_data = RandomBytes(2 << 20, 7), new_data = RandomBytes(2 << 20, 8);
  ASSERT_TRUE(store_.Put(prefix_ + "f", Buffer::Copy(old_data)).ok());
  const std::string path = store_.Url(prefix_ + "f");
  LocalStore store(Engine(LocalStoreOptions::Engine::kAuto, false));
  Touch(path, 0, old_data.size());
  auto before = ReadBatch(store, {{prefix_ + "f", {1000, 1 << 20}, ""}});
  auto again = ReadBatch(store, {{prefix_ + "f", {1000, 1 << 20}, ""}});
  ASSERT_TRUE(before[0].ok() && again[0].ok());
  ASSERT_EQ(before[0]->data(), again[0]->data()) << "expected a slice of the mapping";
  ASSERT_TRUE(store_.Put(prefix_ + "f", Buffer::Copy(new_data)).ok());  // write + rename
  Touch(path, 0, new_data.size());
  auto after = ReadBatch(store, {{prefix_ + "f", {1000, 1 << 20}, ""}});
  ASSERT_TRUE(after[0].ok()) << after[0].status();
  EXPECT_TRUE(after[0]->view() == std::string_view(new_data).substr(1000, 1 << 20));
  EXPECT_TRUE(before[0]->view() == std::string_view(old_data).substr(1000, 1 << 20));

  // Cut short in place (against the contract, but not past the end): a short answer.
  ASSERT_EQ(::truncate(path.c_str(), (1 << 20) + 5000), 0);
  auto cut = ReadBatch(store, {{prefix_ + "f", {1 << 20, 1 << 20}, ""}});
  ASSERT_TRUE(cut[0].ok()) << cut[0].status();
  EXPECT_TRUE(cut[0]->view() == std::string_view(new_data).substr(1 << 20, 5000));
}

// Every engine (io_uring and pread, through the page cache and O_DIRECT) returns the same bytes as
// the file holds, for random batches of unaligned ranges over files whose sizes are not multiples
// of the block size, including ranges that run past a file's end and empty ones at the end.
TEST_F(LocalStoreTest, EnginesReturnIdenticalBytesForRandomBatches) {
  std::vector<std::string> contents;
  for (size_t size : {size_t{1}, size_t{4095}, size_t{4097}, size_t{100'003}, size_t{1'048'579}}) {
    contents.push_back(RandomBytes(size, size));
    ASSERT_TRUE(store_.Put(prefix_ + StrCat("f", size), Buffer::Copy(contents.back())).ok());
  }
  std::vector<std::unique_ptr<LocalStore>> stores;
  for (auto engine : {LocalStoreOptions::Engine::kUring, LocalStoreOptions::Engine::kPread}) {
    for (bool direct : {false, true}) {
      stores.push_back(std::make_unique<LocalStore>(Engine(engine, direct)));
    }
  }
  EXPECT_EQ(stores[0]->engine(), "io_uring") << "io_uring is unavailable on this machine";
  EXPECT_EQ(stores[2]->engine(), "pread");
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    std::vector<ReadRequest> requests;
    std::vector<std::string> expected;
    int count = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < count; ++i) {
      size_t f = rng() % contents.size();
      const std::string& c = contents[f];
      uint64_t offset = rng() % c.size();
      uint64_t length = rng() % 3 == 0 ? (c.size() - offset) + rng() % 9000  // past the end
                                       : rng() % (c.size() - offset + 1);
      if (rng() % 10 == 0) length = ByteRange::kToEnd;
      if (rng() % 20 == 0) offset = c.size(), length = 0;  // empty, exactly at the end
      requests.push_back({prefix_ + StrCat("f", c.size()), {offset, length}, ""});
      expected.push_back(
          c.substr(offset, length == ByteRange::kToEnd ? std::string::npos : length));
    }
    for (auto& store : stores) {
      auto results = ReadBatch(*store, requests);
      for (size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].ok()) << results[i].status();
        ASSERT_EQ(results[i]->view(), expected[i])
            << store->engine() << (store->direct() ? " direct" : "") << " request " << i << ": "
            << requests[i].key << " at " << requests[i].range.offset;
      }
    }
  }
  // Errors are per request: a missing file and a range past the end fail only themselves.
  for (auto& store : stores) {
    auto results = ReadBatch(*store, {{prefix_ + "f4095", {10, 5}, ""},
                                      {prefix_ + "missing", {0, 5}, ""},
                                      {prefix_ + "f4095", {5000, 5}, ""}});
    ASSERT_TRUE(results[0].ok());
    EXPECT_EQ(results[0]->view(), contents[1].substr(10, 5));
    EXPECT_EQ(results[1].status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(results[2].status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST_F(LocalStoreTest, FallsBackToPreadWhenIoUringSetupFails) {
  // More entries than io_uring_setup accepts (32768): the ring cannot be created.
  LocalStoreOptions options;
  options.ring_entries = 1u << 20;
  LocalStore store(options);
  EXPECT_EQ(store.engine(), "pread");
  std::string bytes = RandomBytes(10'000, 3);
  ASSERT_TRUE(store.Put(prefix_ + "x", Buffer::Copy(bytes)).ok());
  auto results =
      ReadBatch(store, {{prefix_ + "x", {1, 9000}, ""}, {prefix_ + "x", {9999, 50}, ""}});
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  EXPECT_EQ(results[0]->view(), bytes.substr(1, 9000));
  EXPECT_EQ(results[1]->view(), bytes.substr(9999));
}

TEST_F(LocalStoreTest, ReadErrorNamesFileAndOffset) {
  std::string bytes = RandomBytes(50'000, 4);
  ASSERT_TRUE(store_.Put(prefix_ + "y", Buffer::Copy(bytes)).ok());
  for (auto engine : {LocalStoreOptions::Engine::kUring, LocalStoreOptions::Engine::kPread}) {
    for (bool direct : {false, true}) {
      LocalStoreOptions options = Engine(engine, direct);
      options.inject_error = [](std::string_view, uint64_t offset) {
        return offset >= 20'000 && offset < 30'000 ? EIO : 0;
      };
      LocalStore store(options);
      auto results =
          ReadBatch(store, {{prefix_ + "y", {0, 1000}, ""}, {prefix_ + "y", {25'000, 100}, ""}});
      ASSERT_TRUE(results[0].ok()) << results[0].status();
      EXPECT_EQ(results[0]->view(), bytes.substr(0, 1000));
      ASSERT_FALSE(results[1].ok());
      std::string message(results[1].status().message());
      EXPECT_THAT(message, ::testing::HasSubstr(root_.string() + "/y at offset "));
      EXPECT_THAT(message, ::testing::HasSubstr(direct ? "at offset 24576" : "at offset 25000"));
      EXPECT_THAT(message, ::testing::HasSubstr("Input/output error"));
    }
  }
}

TEST_F(LocalStoreTest, ConcurrentBatchesFromManyThreads) {
  std::string bytes = RandomBytes(1 << 20, 5);
  ASSERT_TRUE(store_.Put(prefix_ + "z", Buffer::Copy(bytes)).ok());
  LocalStore store(Engine(LocalStoreOptions::Engine::kUring, false));
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int round = 0; round < 20; ++round) {
        std::vector<ReadRequest> requests;
        for (int i = 0; i < 50; ++i) {
          uint64_t offset = rng() % bytes.size(), length = rng() % 20000;
          requests.push_back({prefix_ + "z", {offset, length}, ""});
        }
        auto results = ReadBatch(store, requests);
        for (size_t i = 0; i < results.size(); ++i) {
          if (!results[i].ok() || results[i]->view() != bytes.substr(requests[i].range.offset,
                                                                     requests[i].range.length)) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(LocalStoreTest, ProbeMeasuresTheDeviceOnce) {
  ASSERT_TRUE(store_.Put(prefix_ + "big", Buffer::Copy(RandomBytes(8 << 20, 6))).ok());
  LocalStore store(Engine(LocalStoreOptions::Engine::kUring, false));
  DeviceProfile first = store.Probe(prefix_ + "big");
  EXPECT_TRUE(first.measured);
  EXPECT_GT(first.bytes_per_second, 0);
  EXPECT_GT(first.per_request, absl::ZeroDuration());
  DeviceProfile again = store.Probe(prefix_ + "big");
  EXPECT_EQ(again.per_request, first.per_request);
  // Too small to measure: the documented defaults.
  ASSERT_TRUE(store_.Put(prefix_ + "small", Buffer::Copy("tiny")).ok());
  LocalStore other(Engine(LocalStoreOptions::Engine::kPread, true));
  DeviceProfile small = other.Probe(prefix_ + "small");
  EXPECT_FALSE(small.measured);
  EXPECT_EQ(small.per_request, absl::Microseconds(100));
}

}  // namespace
}  // namespace stoker::io
