// One suite of cases run against every ObjectStore driver: memory, local files, the block cache
// over memory, S3 (the real Swift + s3api test server) and HTTP (a real nginx). What object_store.h
// promises (listing, ranges at every edge, missing objects, errors, writes, concurrency) is checked
// here once; each driver's own test file keeps only what is particular to it (signing, retries,
// io_uring, block fetches). A new driver adds one entry to Drivers() below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "stoker/core/status.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/cache/cached_store.h"
#include "stoker/io/http/http_store.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/s3/s3_store.h"
#include "stoker/testing/http_server.h"
#include "stoker/testing/s3_server.h"

namespace stoker::io {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A store under test and how the suite puts objects into it.
struct Driver {
  std::shared_ptr<ObjectStore> store;
  // Writes `data` under `key` through the store (writable drivers) or beside it (HTTP: into the
  // folder nginx serves).
  std::function<absl::Status(const std::string& key, const std::string& data)> put;
  bool writable = true;       // OpenWriter/Delete work (false: Unimplemented)
  std::string root_for_keys;  // prefix of every key the suite uses (a fresh folder for local)
};

using DriverFactory = std::function<absl::StatusOr<Driver>()>;

absl::Status PutThroughStore(ObjectStore& store, const std::string& key, const std::string& data) {
  return store.Put(key, Buffer::Copy(data));
}

Driver WritableDriver(std::shared_ptr<ObjectStore> store, std::string root = "") {
  Driver d;
  d.store = store;
  d.put = [store](const std::string& key, const std::string& data) {
    return PutThroughStore(*store, key, data);
  };
  d.root_for_keys = std::move(root);
  return d;
}

const std::map<std::string, DriverFactory>& Drivers() {
  static const auto* drivers = new std::map<std::string, DriverFactory>{
      {"memory", [] { return WritableDriver(std::make_shared<MemoryStore>()); }},
      {"local",
       []() -> absl::StatusOr<Driver> {
         std::filesystem::path root = std::filesystem::temp_directory_path() /
                                      ("stoker-conformance-" + std::to_string(::getpid()));
         std::filesystem::remove_all(root);
         std::filesystem::create_directories(root);
         static struct RemovedAtExit {
           std::filesystem::path path;
           ~RemovedAtExit() { std::filesystem::remove_all(path); }
         } folder{root};
         return WritableDriver(std::make_shared<LocalStore>(2), root.string().substr(1) + "/");
       }},
      {"cached",
       [] {
         // Small blocks so that the suite's objects span many; no Stat caching, so that an
         // overwritten object is seen at once (the default TTL is docs/io.md's trade-off).
         auto memory = std::make_shared<MemoryStore>();
         auto cache = std::make_shared<BlockCache>(64 << 20);
         CachedStoreOptions options{.block_size = 4096, .stat_ttl = absl::ZeroDuration()};
         return WritableDriver(std::make_shared<CachedStore>(memory, cache, options));
       }},
      {"s3",
       []() -> absl::StatusOr<Driver> {
         ASSIGN_OR_RETURN(testing::S3TestServer * server, testing::S3TestServer::Shared());
         RETURN_IF_ERROR(server->CreateBucket("conformance"));
         s3::S3Config config;
         config.endpoint = server->endpoint();
         config.region = server->region();
         config.path_style = true;
         config.credentials.access_key_id = server->access_key_id();
         config.credentials.secret_access_key = server->secret_access_key();
         return WritableDriver(std::make_shared<S3Store>(config, "conformance"));
       }},
      {"http",
       []() -> absl::StatusOr<Driver> {
         ASSIGN_OR_RETURN(testing::HttpTestServer * server, testing::HttpTestServer::Shared());
         std::string base = server->url();
         if (base.ends_with("/")) base.pop_back();
         Driver d;
         d.store = std::make_shared<HttpStore>(base);
         d.put = [server](const std::string& key, const std::string& data) {
           return server->WriteFile(key, data);
         };
         d.writable = false;
         return d;
       }},
  };
  return *drivers;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

class StoreConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    static std::map<std::string, absl::StatusOr<Driver>>* made =
        new std::map<std::string, absl::StatusOr<Driver>>();
    auto it = made->find(GetParam());
    if (it == made->end()) it = made->emplace(GetParam(), Drivers().at(GetParam())()).first;
    ASSERT_TRUE(it->second.ok()) << GetParam() << ": " << it->second.status();
    driver_ = &*it->second;
    // Every test case writes under its own folder.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    prefix_ = absl::StrCat(driver_->root_for_keys, "cases/", name, "/");
  }

  ObjectStore& store() { return *driver_->store; }
  std::string Key(std::string_view name) const { return prefix_ + std::string(name); }
  void Put(std::string_view name, const std::string& data) {
    absl::Status status = driver_->put(Key(name), data);
    ASSERT_TRUE(status.ok()) << status;
  }

  const Driver* driver_ = nullptr;
  std::string prefix_;
};

TEST_P(StoreConformanceTest, StatGivesTheSizeAndAMissingObjectIsNotFoundNamingTheUrl) {
  std::string data = RandomBytes(100'003, 1);
  Put("obj", data);
  auto info = store().Stat(Key("obj"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->key, Key("obj"));

  auto missing = store().Stat(Key("missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(Key("missing")));
  EXPECT_EQ(store().Url(Key("x")).find(Key("x")) != std::string::npos, true) << store().Url("x");
}

// Ranges at every edge of an object of data.size() bytes, and what a read of each gives.
struct EdgeCase {
  ByteRange range;
  std::string want;
};
std::vector<EdgeCase> EdgeCases(const std::string& data) {
  const size_t n = data.size();
  return {
      {{}, data},                                      // the whole object
      {{0, 0}, ""},                                    // empty, at the start
      {{0, 1}, data.substr(0, 1)},                     // the first byte
      {{1, n - 2}, data.substr(1, n - 2)},             // all but the first and last
      {{4095, 2}, data.substr(4095, 2)},               // across a block edge
      {{4096, 4096}, data.substr(4096, 4096)},         // exactly one block
      {{n - 1, 1}, data.substr(n - 1)},                // the last byte
      {{n - 1, 10}, data.substr(n - 1)},               // past the end: up to the end
      {{1000, ByteRange::kToEnd}, data.substr(1000)},  // to the end
      {{n, 0}, ""},                                    // empty, exactly at the end
      {{0, n + 12345}, data},                          // longer than the object
  };
}
// Ranges that start past the end of an object of n bytes (OutOfRange).
std::vector<ByteRange> PastTheEnd(size_t n) {
  return {ByteRange{n + 1, 0}, ByteRange{n + 1, 10}, ByteRange{n + 4096, 1}};
}

TEST_P(StoreConformanceTest, RangesAtEveryEdge) {
  const size_t n = 100'003;  // not a multiple of the cached driver's 4096-byte blocks
  std::string data = RandomBytes(n, 2);
  Put("obj", data);
  for (const EdgeCase& c : EdgeCases(data)) {
    auto got = store().Read(Key("obj"), c.range);
    ASSERT_TRUE(got.ok()) << "[" << c.range.offset << ", +" << c.range.length
                          << "): " << got.status();
    EXPECT_EQ(got->size(), c.want.size())
        << "[" << c.range.offset << ", +" << c.range.length << ")";
    EXPECT_TRUE(got->view() == c.want) << "[" << c.range.offset << ", +" << c.range.length << ")";
  }
  for (ByteRange past : PastTheEnd(n)) {
    auto got = store().Read(Key("obj"), past);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange)
        << "[" << past.offset << ", +" << past.length << "): " << got.status();
  }
}

// ReadToAsync into a string: every write must land inside the range; returns the bytes written.
absl::StatusOr<std::string> ReadTo(ObjectStore& store, const std::string& key, ByteRange range) {
  std::mutex mu;
  std::string out;
  std::promise<absl::StatusOr<uint64_t>> written;
  store.ReadToAsync(
      {key, range, ""},
      [&](uint64_t offset, std::string_view data) -> absl::Status {
        std::lock_guard<std::mutex> lock(mu);
        if (range.length != ByteRange::kToEnd && offset + data.size() > range.length) {
          return absl::InternalError(absl::StrCat("a write at ", offset, " of ", data.size(),
                                                  " bytes reaches past the range"));
        }
        if (out.size() < offset + data.size()) out.resize(offset + data.size());
        out.replace(offset, data.size(), data);
        return absl::OkStatus();
      },
      [&](absl::StatusOr<uint64_t> n) { written.set_value(std::move(n)); });
  ASSIGN_OR_RETURN(uint64_t n, written.get_future().get());
  std::lock_guard<std::mutex> lock(mu);
  if (n != out.size()) {
    return absl::InternalError(absl::StrCat("reported ", n, " bytes, wrote ", out.size()));
  }
  return out;
}

TEST_P(StoreConformanceTest, ReadToWritesTheBytesOfReadAtEveryEdge) {
  const size_t n = 100'003;
  std::string data = RandomBytes(n, 2);
  Put("obj", data);
  for (const EdgeCase& c : EdgeCases(data)) {
    auto got = ReadTo(store(), Key("obj"), c.range);
    ASSERT_TRUE(got.ok()) << "[" << c.range.offset << ", +" << c.range.length
                          << "): " << got.status();
    EXPECT_TRUE(*got == c.want) << "[" << c.range.offset << ", +" << c.range.length << ")";
  }
  for (ByteRange past : PastTheEnd(n)) {
    EXPECT_EQ(ReadTo(store(), Key("obj"), past).status().code(), absl::StatusCode::kOutOfRange)
        << "[" << past.offset << ", +" << past.length << ")";
  }
  EXPECT_EQ(ReadTo(store(), Key("missing"), {0, 10}).status().code(), absl::StatusCode::kNotFound);
  Put("empty", "");
  auto empty = ReadTo(store(), Key("empty"), {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST_P(StoreConformanceTest, AWriteErrorEndsAReadToWithThatErrorAndNoRetry) {
  Put("obj", RandomBytes(1 << 20, 7));
  std::atomic<int> calls{0};
  std::promise<absl::StatusOr<uint64_t>> written;
  // Unavailable, which a store would retry were it its own failure.
  store().ReadToAsync(
      {Key("obj"), {}, ""},
      [&](uint64_t, std::string_view) {
        ++calls;
        return absl::UnavailableError("the disk went away");
      },
      [&](absl::StatusOr<uint64_t> n) { written.set_value(std::move(n)); });
  auto got = written.get_future().get();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("the disk went away"));
  EXPECT_EQ(calls.load(), 1);
}

TEST_P(StoreConformanceTest, EmptyObject) {
  Put("empty", "");
  auto info = store().Stat(Key("empty"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 0u);
  auto whole = store().Read(Key("empty"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->empty());
  auto at_end = store().Read(Key("empty"), {0, 0});
  ASSERT_TRUE(at_end.ok()) << at_end.status();
  EXPECT_TRUE(at_end->empty());
  EXPECT_EQ(store().Read(Key("empty"), {1, 1}).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_P(StoreConformanceTest, ReadingAMissingObjectIsNotFoundNamingTheUrl) {
  for (ByteRange range : {ByteRange{}, ByteRange{0, 0}, ByteRange{10, 10}}) {
    auto got = store().Read(Key("missing"), range);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(Key("missing")));
  }
}

TEST_P(StoreConformanceTest, ListingByPrefixAndDelimiterIsSortedWithSizes) {
  // Written out of order; "a/" must not match "ab/".
  for (std::string name : {"a/b/c/4", "ab/5", "a/2", "a/b/3", "a/1"}) Put(name, name + "!");

  auto deep = store().List({Key("a/"), ""});
  ASSERT_TRUE(deep.ok()) << deep.status();
  std::vector<std::string> keys;
  for (const ObjectInfo& o : deep->objects) {
    keys.push_back(o.key.substr(prefix_.size()));
    EXPECT_EQ(o.size, keys.back().size() + 1) << o.key;
  }
  EXPECT_THAT(keys, ElementsAre("a/1", "a/2", "a/b/3", "a/b/c/4"));
  EXPECT_TRUE(deep->common_prefixes.empty());

  auto shallow = store().List({Key("a/"), "/"});
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  keys.clear();
  for (const ObjectInfo& o : shallow->objects) keys.push_back(o.key.substr(prefix_.size()));
  EXPECT_THAT(keys, ElementsAre("a/1", "a/2"));
  EXPECT_THAT(shallow->common_prefixes, ElementsAre(Key("a/b/")));

  auto top = store().List({prefix_, "/"});
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE(top->objects.empty());
  EXPECT_THAT(top->common_prefixes, ElementsAre(Key("a/"), Key("ab/")));

  auto limited = store().List({Key("a/"), "", 2});
  ASSERT_TRUE(limited.ok()) << limited.status();
  ASSERT_EQ(limited->objects.size(), 2u);
  EXPECT_EQ(limited->objects[0].key, Key("a/1"));
  EXPECT_EQ(limited->objects[1].key, Key("a/2"));
}

TEST_P(StoreConformanceTest, ListingAPrefixWithNothingUnderItIsEmpty) {
  Put("present", "x");
  auto none = store().List({Key("nothing/"), "/"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->objects.empty());
  EXPECT_TRUE(none->common_prefixes.empty());
}

TEST_P(StoreConformanceTest, ConcurrentReadsEachGetTheirOwnBytesOnce) {
  const size_t n = 1 << 20;
  std::string data = RandomBytes(n, 3);
  Put("big", data);
  constexpr int kReads = 200;
  std::mt19937 gen(4);
  std::vector<ByteRange> ranges;
  for (int i = 0; i < kReads; ++i) {
    uint64_t offset = gen() % n;
    ranges.push_back({offset, 1 + gen() % (n - offset)});
  }
  std::vector<std::promise<absl::StatusOr<Buffer>>> results(kReads);
  std::vector<std::atomic<int>> calls(kReads);
  for (int i = 0; i < kReads; ++i) {
    store().ReadAsync({Key("big"), ranges[i], ""}, [&, i](absl::StatusOr<Buffer> got) {
      if (calls[i].fetch_add(1) == 0) results[i].set_value(std::move(got));
    });
  }
  for (int i = 0; i < kReads; ++i) {
    auto got = results[i].get_future().get();
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_TRUE(got->view() == std::string_view(data).substr(ranges[i].offset, ranges[i].length))
        << "read " << i << " [" << ranges[i].offset << ", +" << ranges[i].length << ")";
  }
  for (int i = 0; i < kReads; ++i) EXPECT_EQ(calls[i].load(), 1) << "read " << i;
}

TEST_P(StoreConformanceTest, BatchReadsAnswerEachRequestWithItsOwnResult) {
  std::string data = RandomBytes(50'000, 5);
  Put("obj", data);
  std::vector<ReadRequest> requests = {{Key("obj"), {0, 10}, ""},
                                       {Key("missing"), {0, 10}, ""},
                                       {Key("obj"), {49'990, 100}, ""},
                                       {Key("obj"), {60'000, 1}, ""}};
  std::vector<std::promise<absl::StatusOr<Buffer>>> results(requests.size());
  std::vector<ReadCallback> done;
  for (auto& p : results) {
    done.push_back([&p](absl::StatusOr<Buffer> got) { p.set_value(std::move(got)); });
  }
  store().ReadBatchAsync(requests, std::move(done));
  auto first = results[0].get_future().get();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->view() == std::string_view(data).substr(0, 10));
  EXPECT_EQ(results[1].get_future().get().status().code(), absl::StatusCode::kNotFound);
  auto tail = results[2].get_future().get();
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_TRUE(tail->view() == std::string_view(data).substr(49'990));
  EXPECT_EQ(results[3].get_future().get().status().code(), absl::StatusCode::kOutOfRange);
}

TEST_P(StoreConformanceTest, AReadWithAStaleEtagFailsWithFailedPrecondition) {
  Put("obj", "version one");
  auto info = store().Stat(Key("obj"));
  ASSERT_TRUE(info.ok()) << info.status();
  if (info->etag.empty()) GTEST_SKIP() << GetParam() << " reports no ETags";
  std::promise<absl::StatusOr<Buffer>> matching;
  store().ReadAsync({Key("obj"), {0, 7}, info->etag},
                    [&](absl::StatusOr<Buffer> got) { matching.set_value(std::move(got)); });
  auto got = matching.get_future().get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->view(), "version");

  std::promise<absl::StatusOr<Buffer>> stale;
  store().ReadAsync({Key("obj"), {0, 7}, "\"not-the-etag\""},
                    [&](absl::StatusOr<Buffer> got) { stale.set_value(std::move(got)); });
  EXPECT_EQ(stale.get_future().get().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreConformanceTest, AnOverwrittenObjectReadsAsItsNewContent) {
  Put("obj", RandomBytes(10'000, 6));
  auto before = store().Stat(Key("obj"));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(store().Read(Key("obj")).ok());  // the cached driver now holds its blocks
  std::string second = RandomBytes(12'345, 7);
  if (GetParam() == "http") ::sleep(1);  // nginx's ETag is mtime + size: a new second
  Put("obj", second);
  auto after = store().Stat(Key("obj"));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->size, second.size());
  if (!before->etag.empty()) {
    EXPECT_NE(after->etag, before->etag);
  }
  auto got = store().Read(Key("obj"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->view() == second);
}

TEST_P(StoreConformanceTest, WrittenObjectsAppearOnlyOnCloseAndDeleteIsIdempotent) {
  if (!driver_->writable) {
    EXPECT_EQ(store().OpenWriter(Key("new")).status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(store().Delete(Key("new")).code(), absl::StatusCode::kUnimplemented);
    return;
  }
  std::string part1 = RandomBytes(70'000, 8), part2 = RandomBytes(30'001, 9);
  {
    auto writer = store().OpenWriter(Key("dir/new"));
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append(Buffer::Copy(part1)).ok());
    ASSERT_TRUE((*writer)->Append(Buffer::Copy(part2)).ok());
    EXPECT_EQ(store().Stat(Key("dir/new")).status().code(), absl::StatusCode::kNotFound);
    absl::Status closed = (*writer)->Close();
    ASSERT_TRUE(closed.ok()) << closed;
  }
  auto got = store().Read(Key("dir/new"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->view() == part1 + part2);
  {
    auto abandoned = store().OpenWriter(Key("dir/abandoned"));
    ASSERT_TRUE(abandoned.ok()) << abandoned.status();
    ASSERT_TRUE((*abandoned)->Append(Buffer::Copy(part1)).ok());
  }
  EXPECT_EQ(store().Stat(Key("dir/abandoned")).status().code(), absl::StatusCode::kNotFound);
  auto listed = store().List({Key("dir/"), ""});
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->objects.size(), 1u);
  EXPECT_EQ(listed->objects[0].key, Key("dir/new"));

  ASSERT_TRUE(store().Delete(Key("dir/new")).ok());
  EXPECT_EQ(store().Stat(Key("dir/new")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store().Read(Key("dir/new")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store().Delete(Key("dir/new")).ok());
  EXPECT_TRUE(store().Delete(Key("never-there")).ok());
}

INSTANTIATE_TEST_SUITE_P(EveryDriver, StoreConformanceTest,
                         ::testing::Values("memory", "local", "cached", "s3", "http"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace stoker::io
