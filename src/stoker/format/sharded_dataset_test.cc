#include "stoker/format/sharded_dataset.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "stoker/core/strings.h"
#include "stoker/format/shard_writer.h"
#include "stoker/io/cache/cached_store.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/read/range_plan.h"
#include "stoker/io/url.h"
#include "stoker/testing/latency_store.h"

namespace stoker::format {
namespace {

using ::testing::HasSubstr;

std::string Payload(uint64_t i, size_t size) {
  std::string s(size, '\0');
  std::mt19937_64 rng(i);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

Sample MakeSample(uint64_t i) {
  Sample s;
  char key[32];
  std::snprintf(key, sizeof(key), "class%llu/img%06llu", static_cast<unsigned long long>(i % 7),
                static_cast<unsigned long long>(i));
  s.key = key;
  s.fields.push_back({"cls", Buffer::Copy(std::to_string(i % 7))});
  s.fields.push_back({"jpg", Buffer::FromString(Payload(i, 100 + (i * 7919) % 3000))});
  return s;
}

absl::StatusOr<Manifest> WriteDataset(std::string_view url, uint64_t samples, uint64_t shard_bytes,
                                      int zstd_level = 0) {
  DatasetWriterOptions options;
  options.shard_bytes = shard_bytes;
  options.shard.zstd_level = zstd_level;
  auto writer = DatasetWriter::Open(url, options);
  if (!writer.ok()) return writer.status();
  for (uint64_t i = 0; i < samples; ++i) {
    absl::Status status = (*writer)->Add(MakeSample(i));
    if (!status.ok()) return status;
  }
  return (*writer)->Close();
}

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "stoker-format-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(DatasetTest, RandomAccessAndBatchesAreByteExact) {
  auto manifest = WriteDataset("mem://ds1/train", 500, 64 << 10);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->shards.size(), 5u);
  EXPECT_EQ(manifest->total_samples, 500u);
  EXPECT_EQ(manifest->fields, (std::vector<std::string>{"cls", "jpg"}));

  auto ds = ShardedDataset::Open("mem://ds1/train/");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 500u);
  EXPECT_EQ((*ds)->directory().shard_count(), manifest->shards.size());
  for (uint64_t i = 0; i < 500; ++i) {
    ASSERT_EQ((*ds)->key(i), MakeSample(i).key);
  }
  for (uint64_t i : {0, 1, 77, 499}) {
    auto sample = (*ds)->ReadSample(i);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->key, MakeSample(i).key);
    EXPECT_EQ(sample->fields, MakeSample(i).fields);
    EXPECT_EQ(sample->index, i);
  }
  // Random minibatches, with repeats, across shards.
  std::mt19937 rng(5);
  for (int round = 0; round < 10; ++round) {
    std::vector<uint64_t> indices(64);
    for (auto& i : indices) i = rng() % 500;
    auto batch = (*ds)->ReadSamples(indices);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), indices.size());
    for (size_t j = 0; j < indices.size(); ++j) {
      Sample expected = MakeSample(indices[j]);
      ASSERT_EQ((*batch)[j].key, expected.key);
      ASSERT_EQ((*batch)[j].fields, expected.fields);
      ASSERT_EQ((*batch)[j].index, indices[j]);
    }
  }
  EXPECT_EQ((*ds)->ReadSamples({500}).status().code(), absl::StatusCode::kOutOfRange);
  auto empty = (*ds)->ReadSamples(std::span<const uint64_t>());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DatasetTest, CompressedDatasetReadsBack) {
  auto manifest = WriteDataset("mem://ds2/z", 100, 32 << 10, /*zstd_level=*/3);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto ds = ShardedDataset::Open("mem://ds2/z/manifest.json");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint64_t> all(100);
  for (uint64_t i = 0; i < 100; ++i) all[i] = 99 - i;
  auto batch = (*ds)->ReadSamples(all);
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (uint64_t j = 0; j < 100; ++j) EXPECT_EQ((*batch)[j].fields, MakeSample(99 - j).fields);
}

TEST(DatasetTest, OpensASingleShardAndStreamsIt) {
  ASSERT_TRUE(WriteDataset("mem://ds3/d", 40, 1 << 30).ok());
  auto ds = ShardedDataset::Open("mem://ds3/d/shard-00000.stk");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 40u);
  EXPECT_EQ((*ds)->ReadSample(39)->fields, MakeSample(39).fields);
  auto count = VerifyShard("mem://ds3/d/shard-00000.stk");
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 40u);
}

TEST(DatasetTest, FlippedByteIsDataLossWithUrlOffsetAndKeyOrSkipped) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 30, 1 << 30).ok());
  auto ds = ShardedDataset::Open(dir.path());
  ASSERT_TRUE(ds.ok()) << ds.status();
  SampleLocation loc = (*ds)->directory().location(12);
  std::string shard = dir.path() + "/shard-00000.stk";
  FlipByte(shard, loc.offset + loc.length - 5);

  auto batch = (*ds)->ReadSamples({11, 12, 13});
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(batch.status().message(), HasSubstr(shard));
  EXPECT_THAT(batch.status().message(), HasSubstr(StrCat("offset ", loc.offset)));
  EXPECT_THAT(batch.status().message(), HasSubstr(MakeSample(12).key));

  auto verify = VerifyShard(shard);
  ASSERT_FALSE(verify.ok());
  EXPECT_THAT(verify.status().message(), HasSubstr(StrCat("offset ", loc.offset)));

  auto skipping = ShardedDataset::Open(dir.path(), {.on_corrupt = OnCorrupt::kSkip});
  ASSERT_TRUE(skipping.ok());
  batch = (*skipping)->ReadSamples({11, 12, 13});
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].index, 11u);
  EXPECT_EQ((*batch)[1].index, 13u);
  EXPECT_EQ((*skipping)->corruption_report().count(), 1u);
  EXPECT_THAT((*skipping)->corruption_report().descriptions()[0], HasSubstr(MakeSample(12).key));

  StreamOptions stream_options;
  stream_options.on_corrupt = OnCorrupt::kSkip;
  stream_options.report = std::make_shared<CorruptionReport>();
  auto stream = OpenSampleStream(shard, stream_options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  int n = 0;
  while (true) {
    auto s = (*stream)->Next();
    ASSERT_TRUE(s.ok()) << s.status();
    if (!s->has_value()) break;
    ++n;
  }
  EXPECT_EQ(n, 29);
  EXPECT_EQ(stream_options.report->count(), 1u);
}

// Through the block cache (as a pipeline reads an S3 dataset that fits): a record's CRC is checked
// when its bytes enter the cache, and not again on later hits of those same bytes; a corrupt
// record is DataLoss on every read (it is never marked); every sample's bytes are the same in each
// epoch.
TEST(DatasetTest, CachedDatasetChecksEachRecordWhereItEntersTheCache) {
  constexpr uint64_t kSamples = 60;
  auto make = [](uint64_t i) {
    Sample s;
    s.key = StrCat("k", i);
    s.fields.push_back({"bin", Buffer::FromString(Payload(i, 5000 + i * 100))});
    return s;
  };
  {
    auto writer = DatasetWriter::Open("mem://dscache/d", {});
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (uint64_t i = 0; i < kSamples; ++i) ASSERT_TRUE((*writer)->Add(make(i)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto target = io::OpenUrl("mem://dscache/d/");
  ASSERT_TRUE(target.ok()) << target.status();
  auto memory = std::dynamic_pointer_cast<io::MemoryStore>(target->store);
  ASSERT_NE(memory, nullptr);
  // Flip a byte of sample 7's payload in the store.
  const std::string shard_key = target->key + "shard-00000.stk";
  auto uncached = ShardedDataset::Open(target->store, target->key);
  ASSERT_TRUE(uncached.ok()) << uncached.status();
  SampleLocation bad = (*uncached)->directory().location(7);
  std::string bytes = memory->Read(shard_key)->ToString();
  bytes[bad.offset + bad.length - 10] ^= 0x10;
  memory->Set(shard_key, Buffer::FromString(std::move(bytes)));

  auto cache = std::make_shared<io::BlockCache>(64 << 20);
  auto cached =
      std::make_shared<io::CachedStore>(target->store, cache,
                                        io::CachedStoreOptions{.block_size = 64 << 10,
                                                               .stat_ttl = absl::InfiniteDuration(),
                                                               .restart_on_change = false});
  auto ds = ShardedDataset::Open(
      cached, target->key, {.reader = io::ReaderOptions{.max_hole = 0, .max_coalesced = 64 << 10}});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint64_t> good;
  for (uint64_t i = 0; i < kSamples; ++i) {
    if (i != 7) good.push_back(i);
  }
  const uint64_t shard_size = memory->Stat(shard_key)->size;
  uint64_t fetched_after_first = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::mt19937 rng(epoch);
    std::shuffle(good.begin(), good.end(), rng);
    // In batches (neighbours in the shard are read as one range) and one by one (each record a
    // slice of its cached block, unless it straddles two).
    auto batch = (*ds)->ReadSamples(good);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), good.size());
    for (size_t j = 0; j < good.size(); ++j) {
      ASSERT_EQ((*batch)[j].key, make(good[j]).key);
      ASSERT_TRUE((*batch)[j].fields == make(good[j]).fields) << "epoch " << epoch << " " << j;
    }
    for (uint64_t i : good) {
      auto one = (*ds)->ReadSample(i);
      ASSERT_TRUE(one.ok()) << one.status();
      ASSERT_TRUE(one->fields == make(i).fields) << "epoch " << epoch << " sample " << i;
    }
    auto corrupt = (*ds)->ReadSample(7);
    ASSERT_FALSE(corrupt.ok()) << "epoch " << epoch;
    EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(corrupt.status().message(), HasSubstr("CRC32C mismatch"));
    EXPECT_THAT(corrupt.status().message(), HasSubstr(StrCat("offset ", bad.offset)));
    EXPECT_THAT(corrupt.status().message(), HasSubstr("k7"));
    if (epoch == 0) fetched_after_first = cached->stats().fetched_bytes;
  }
  EXPECT_GE(fetched_after_first, shard_size);
  EXPECT_EQ(cached->stats().fetched_bytes, fetched_after_first);  // later epochs: all hits

  // Where the check is: a hit of bytes already checked is not checked again. (Changing the cached
  // bytes in place is what no reader can do; here it shows that the hit skipped the CRC.)
  uint64_t inside = kSamples;
  for (uint64_t i : good) {
    SampleLocation loc = (*ds)->directory().location(i);
    if (loc.offset / (64 << 10) == (loc.offset + loc.length - 1) / (64 << 10)) inside = i;
  }
  ASSERT_NE(inside, kSamples);
  auto kept = (*ds)->ReadSample(inside);
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto* in_cache = const_cast<uint8_t*>(kept->fields[0].value.data());
  in_cache[0] ^= 0x01;
  auto again = (*ds)->ReadSample(inside);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->fields == make(inside).fields);
  in_cache[0] ^= 0x01;
  // Bytes that enter the cache again (the object's blocks dropped and fetched anew) are checked.
  cached->Invalidate(shard_key);
  auto refetched = (*ds)->ReadSamples(good);
  ASSERT_TRUE(refetched.ok()) << refetched.status();
  EXPECT_GT(cached->stats().fetched_bytes, fetched_after_first);
  EXPECT_FALSE((*ds)->ReadSample(7).ok());
}

TEST(DatasetTest, BadShardsAndManifestsFailAtOpen) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 50, 16 << 10).ok());
  std::string shard = dir.path() + "/shard-00001.stk";
  std::string manifest = dir.path() + "/manifest.json";
  uint64_t size = std::filesystem::file_size(shard);

  // Manifest disagreeing with a shard's record count.
  std::string original;
  {
    std::ifstream in(manifest);
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto m = ParseManifest(original, manifest);
  ASSERT_TRUE(m.ok());
  Manifest wrong = *m;
  wrong.shards[1].samples += 1;
  wrong.total_samples += 1;
  std::ofstream(manifest, std::ios::trunc) << SerializeManifest(wrong);
  auto ds = ShardedDataset::Open(dir.path());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ds.status().message(), HasSubstr(shard));
  std::ofstream(manifest, std::ios::trunc) << original;
  ASSERT_TRUE(ShardedDataset::Open(dir.path()).ok());

  // A truncated shard.
  std::filesystem::resize_file(shard, size - 10);
  ds = ShardedDataset::Open(dir.path());
  EXPECT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr(shard));
  EXPECT_THAT(ds.status().message(), HasSubstr("truncated"));

  // Not a dataset at all.
  ds = ShardedDataset::Open(dir.path() + "/nothing-here");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ds.status().message(), HasSubstr("stoker convert"));
}

// The local engines (io_uring and pread, page cache and O_DIRECT) read the same samples: random
// batches plus the last sample of every shard (unaligned records that end where the shard's
// index begins).
TEST(DatasetTest, LocalEnginesReadIdenticalSamples) {
  TempDir dir;
  auto manifest = WriteDataset(dir.path(), 400, 100 << 10);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_GT(manifest->shards.size(), 3u);
  std::vector<uint64_t> last_of_shard;
  uint64_t end = 0;
  for (const auto& shard : manifest->shards) last_of_shard.push_back((end += shard.samples) - 1);
  for (auto engine :
       {io::LocalStoreOptions::Engine::kUring, io::LocalStoreOptions::Engine::kPread}) {
    for (bool direct : {false, true}) {
      io::LocalStoreOptions options;
      options.engine = engine;
      options.direct = direct;
      auto store = std::make_shared<io::LocalStore>(options);
      auto ds = ShardedDataset::Open(store, dir.path().substr(1) + "/");
      ASSERT_TRUE(ds.ok()) << ds.status();
      EXPECT_EQ(&(*ds)->store(), store.get());
      std::mt19937 rng(9);
      for (int round = 0; round < 8; ++round) {
        std::vector<uint64_t> indices = last_of_shard;
        for (int i = 0; i < 100; ++i) indices.push_back(rng() % 400);
        auto batch = (*ds)->ReadSamples(indices);
        ASSERT_TRUE(batch.ok()) << batch.status();
        ASSERT_EQ(batch->size(), indices.size());
        for (size_t j = 0; j < indices.size(); ++j) {
          Sample expected = MakeSample(indices[j]);
          ASSERT_EQ((*batch)[j].key, expected.key) << store->engine() << " direct=" << direct;
          ASSERT_EQ((*batch)[j].fields, expected.fields) << store->engine() << " direct=" << direct;
        }
      }
    }
  }
}

// The bytes of a local dataset's samples are the same through every read path: warm (slices of
// mappings of the shards, the records checked partly on helper threads), copied (map_resident
// off), cold (the engine), mixed residency (some pages in the page cache, some not), O_DIRECT,
// in batches that span every shard (the last one too small to be mapped) and repeat indices.
TEST(DatasetTest, LocalReadPathsGiveTheSameSamples) {
  TempDir dir;
  constexpr uint64_t kSamples = 160;
  auto big_sample = [](uint64_t i) {
    Sample s;
    s.key = StrCat("k", i);
    s.fields.push_back({"bin", Buffer::FromString(Payload(i, 20'000 + (i * 7919) % 40'000))});
    return s;
  };
  {
    DatasetWriterOptions options;
    options.shard_bytes = 1600 << 10;
    auto writer = DatasetWriter::Open(dir.path(), options);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (uint64_t i = 0; i < kSamples; ++i) ASSERT_TRUE((*writer)->Add(big_sample(i)).ok());
    auto manifest = (*writer)->Close();
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_GE(manifest->shards.size(), 3u);
  }
  std::vector<std::string> shards;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".stk") shards.push_back(entry.path().string());
  }
  auto drop = [&] {
    for (const std::string& shard : shards) {
      int fd = ::open(shard.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  };
  auto warm = [&](bool every_other_page) {
    for (const std::string& shard : shards) {
      int fd = ::open(shard.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      char page[4096];
      for (off_t at = 0; ::pread(fd, page, sizeof(page), at) > 0;
           at += every_other_page ? 8192 : 4096) {
      }
      ::close(fd);
    }
  };
  std::mt19937 rng(3);
  std::vector<std::vector<uint64_t>> batches;
  for (int b = 0; b < 4; ++b) {
    std::vector<uint64_t> batch;
    for (int i = 0; i < 64; ++i) batch.push_back(rng() % kSamples);
    batch.push_back(kSamples - 1);
    batch.push_back(batch.front());
    batches.push_back(std::move(batch));
  }
  // Reads every batch through a fresh store; returns the samples' bytes, batch after batch.
  auto read_all = [&](io::LocalStoreOptions options, std::string_view what) {
    std::string all;
    auto store = std::make_shared<io::LocalStore>(options);
    auto ds = ShardedDataset::Open(store, dir.path().substr(1) + "/");
    EXPECT_TRUE(ds.ok()) << what << ": " << ds.status();
    if (!ds.ok()) return all;
    for (const auto& batch : batches) {
      auto got = (*ds)->ReadSamples(batch);
      EXPECT_TRUE(got.ok()) << what << ": " << got.status();
      if (!got.ok()) return all;
      EXPECT_EQ(got->size(), batch.size()) << what;
      for (size_t j = 0; j < got->size(); ++j) {
        Sample expected = big_sample(batch[j]);
        EXPECT_EQ((*got)[j].key, expected.key) << what;
        EXPECT_EQ((*got)[j].fields, expected.fields) << what;
        all += (*got)[j].key;
        for (const auto& field : (*got)[j].fields) all += field.value.view();
      }
    }
    return all;
  };
  io::LocalStoreOptions mapped, copied, direct;
  copied.map_resident = false;
  direct.direct = true;
  warm(false);
  const std::string reference = read_all(mapped, "warm, mapped");
  ASSERT_FALSE(reference.empty());
  EXPECT_EQ(read_all(copied, "warm, copied"), reference);
  drop();
  EXPECT_EQ(read_all(mapped, "cold"), reference);
  drop();
  warm(/*every_other_page=*/true);
  EXPECT_EQ(read_all(mapped, "mixed residency"), reference);
  EXPECT_EQ(read_all(direct, "O_DIRECT"), reference);

  // Several threads reading warm batches at once share the helper threads (a helper takes a
  // chunk only when idle): every batch complete and in order.
  warm(false);
  auto store = std::make_shared<io::LocalStore>(mapped);
  auto ds = ShardedDataset::Open(store, dir.path().substr(1) + "/");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        const auto& batch = batches[(t + round) % batches.size()];
        auto got = (*ds)->ReadSamples(batch);
        if (!got.ok() || got->size() != batch.size()) {
          ++wrong;
          continue;
        }
        for (size_t j = 0; j < batch.size(); ++j) {
          if ((*got)[j].fields != big_sample(batch[j]).fields) ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Direct I/O: on when asked, off when asked, and under kAuto when the dataset exceeds the given
// share of RAM (here a tiny share, through the environment variable); the samples are the same.
TEST(DatasetTest, DirectIoChoice) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 50, 64 << 10).ok());
  auto direct = [&](DatasetOptions options) {
    auto ds = ShardedDataset::Open(dir.path(), options);
    EXPECT_TRUE(ds.ok()) << ds.status();
    auto* local = dynamic_cast<io::LocalStore*>(&(*ds)->store());
    EXPECT_NE(local, nullptr);
    auto sample = (*ds)->ReadSample(7);
    EXPECT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->fields, MakeSample(7).fields);
    return local != nullptr && local->direct();
  };
  EXPECT_FALSE(direct({}));  // a few KB: far below half the RAM
  EXPECT_TRUE(direct({.direct_io = DatasetOptions::DirectIo::kOn}));
  setenv("STOKER_DIRECT_IO_RAM_SHARE", "1e-12", 1);
  EXPECT_TRUE(direct({}));
  EXPECT_FALSE(direct({.direct_io = DatasetOptions::DirectIo::kOff}));
  setenv("STOKER_DIRECT_IO", "off", 1);
  EXPECT_FALSE(direct({}));
  unsetenv("STOKER_DIRECT_IO");
  unsetenv("STOKER_DIRECT_IO_RAM_SHARE");
}

// A shard cut short after the dataset was opened, and a read that fails in the kernel, are
// errors naming the shard and the offset, with every engine.
TEST(DatasetTest, LocalTruncatedShardAndReadErrorNameShardAndOffset) {
  TempDir dir;
  auto manifest = WriteDataset(dir.path(), 100, 1 << 20);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::string shard = dir.path() + "/" + manifest->shards[0].name;
  for (auto engine :
       {io::LocalStoreOptions::Engine::kUring, io::LocalStoreOptions::Engine::kPread}) {
    for (bool direct : {false, true}) {
      SCOPED_TRACE(StrCat(engine == io::LocalStoreOptions::Engine::kUring ? "io_uring" : "pread",
                          direct ? " direct" : ""));
      io::LocalStoreOptions options;
      options.engine = engine;
      options.direct = direct;
      // Fails the read that starts at the sample's offset or, widened for O_DIRECT, up to 4 KiB
      // before it (the file system's alignment), and remembers where.
      uint64_t fail_at = ~uint64_t{0}, failed_at = 0;
      options.inject_error = [&fail_at, &failed_at](std::string_view, uint64_t offset) {
        if (fail_at == ~uint64_t{0} || offset > fail_at || offset + 4096 <= fail_at) return 0;
        failed_at = offset;
        return EIO;
      };
      auto store = std::make_shared<io::LocalStore>(options);
      auto ds = ShardedDataset::Open(store, dir.path().substr(1) + "/");
      ASSERT_TRUE(ds.ok()) << ds.status();
      SampleLocation loc = (*ds)->directory().location(50);
      fail_at = loc.offset;
      auto failed = (*ds)->ReadSamples({50});
      ASSERT_FALSE(failed.ok());
      if (!direct) EXPECT_EQ(failed_at, loc.offset);
      EXPECT_THAT(failed.status().message(), HasSubstr(shard));
      EXPECT_THAT(failed.status().message(), HasSubstr(StrCat("at offset ", failed_at)));
      EXPECT_THAT(failed.status().message(), HasSubstr("Input/output error"));
      fail_at = ~uint64_t{0};

      std::string original;
      {
        std::ifstream in(shard, std::ios::binary);
        original.assign(std::istreambuf_iterator<char>(in), {});
      }
      std::filesystem::resize_file(shard, loc.offset + loc.length / 2);
      auto truncated = (*ds)->ReadSamples({49, 50});
      ASSERT_FALSE(truncated.ok());
      EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(truncated.status().message(), HasSubstr(shard));
      EXPECT_THAT(truncated.status().message(), HasSubstr(StrCat("offset ", loc.offset)));
      EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));
      std::ofstream(shard, std::ios::binary | std::ios::trunc) << original;
    }
  }
}

TEST(DatasetTest, WrongMagicOrVersionFailsUpFront) {
  TempDir dir;
  ASSERT_TRUE(WriteDataset(dir.path(), 5, 1 << 30).ok());
  std::string shard = dir.path() + "/shard-00000.stk";
  uint64_t size = std::filesystem::file_size(shard);
  FlipByte(shard, size - 3);  // footer magic
  auto ds = ShardedDataset::Open(dir.path());
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr("footer"));
  FlipByte(shard, size - 3);
  FlipByte(shard, 8);  // header version
  EXPECT_THAT(VerifyShard(shard).status().message(), HasSubstr("version"));
}

// A minibatch of nearby samples of one shard is one request, not one per sample; samples spread
// over several shards take one request per shard (they are far apart within each).
TEST(DatasetTest, BatchedReadsCoalesceNeighbours) {
  auto base = std::make_shared<io::MemoryStore>("coalesce");
  auto counting = std::make_shared<testing::LatencyStore>(base);
  {
    DatasetWriterOptions options;
    options.shard_bytes = 400 << 10;
    auto writer = DatasetWriter::Open("mem://coalesce-src/d", options);
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 600; ++i) ASSERT_TRUE((*writer)->Add(MakeSample(i)).ok());
    auto manifest = (*writer)->Close();
    ASSERT_TRUE(manifest.ok());
    ASSERT_GE(manifest->shards.size(), 3u);
    auto source = io::OpenUrl("mem://coalesce-src/d/");
    auto listing = source->store->List({source->key, "", 0});
    for (const io::ObjectInfo& info : listing->objects) {
      ASSERT_TRUE(
          base->Put(info.key.substr(source->key.size()), *source->store->Read(info.key)).ok());
    }
  }
  DatasetOptions options;
  options.reader = io::ReaderOptions();  // S3 limits: holes up to 2.7 MB are read through
  auto ds = ShardedDataset::Open(counting, "", options);
  ASSERT_TRUE(ds.ok()) << ds.status();
  uint64_t first_shard_end = (*ds)->directory().shard_start(1);
  std::vector<uint64_t> batch;
  for (uint64_t i = 0; i < 32 && i < first_shard_end; ++i)
    batch.push_back((i * 7) % first_shard_end);
  int64_t before = counting->reads();
  auto samples = (*ds)->ReadSamples(batch);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(counting->reads() - before, 1) << "one request for " << batch.size() << " samples";
  for (size_t j = 0; j < batch.size(); ++j)
    EXPECT_EQ((*samples)[j].fields, MakeSample(batch[j]).fields);

  std::vector<uint64_t> spread = {0, (*ds)->directory().shard_start(1),
                                  (*ds)->directory().shard_start(2), 1,
                                  (*ds)->directory().shard_start(1) + 1};
  before = counting->reads();
  samples = (*ds)->ReadSamples(spread);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(counting->reads() - before, 3);
}

// A batch of many samples of one shard that lie apart is read in chunks (split only at gaps the
// reader would not read through), each decoded as its reads land: the samples come back in the
// asked order, byte-exact, with exactly the requests of one plan over the whole batch; a corrupt
// sample in a later chunk fails the batch with its key.
TEST(DatasetTest, ChunkedBatchesKeepOrderBytesAndRequests) {
  auto base = std::make_shared<io::MemoryStore>("chunked");
  auto counting = std::make_shared<testing::LatencyStore>(base);
  {
    DatasetWriterOptions options;
    options.shard_bytes = 4 << 20;  // one shard: every chunk of the batch is from the same shard
    auto writer = DatasetWriter::Open("mem://chunked-src/d", options);
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 600; ++i) ASSERT_TRUE((*writer)->Add(MakeSample(i)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
    auto source = io::OpenUrl("mem://chunked-src/d/");
    auto listing = source->store->List({source->key, "", 0});
    for (const io::ObjectInfo& info : listing->objects) {
      ASSERT_TRUE(
          base->Put(info.key.substr(source->key.size()), *source->store->Read(info.key)).ok());
    }
  }
  DatasetOptions options;
  options.reader = io::ReaderOptions();
  options.reader->max_hole = 4000;  // samples are 100-3,100 bytes: some gaps are read through
  options.reader->max_coalesced = 64 << 10;
  auto ds = ShardedDataset::Open(counting, "", options);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->directory().shard_count(), 1u) << "the test wants one shard";

  std::mt19937 rng(5);
  for (int round = 0; round < 6; ++round) {
    std::vector<uint64_t> batch;
    for (int i = 0; i < 200; ++i) batch.push_back(rng() % 600);  // duplicates too
    std::vector<io::ByteRange> ranges;
    for (uint64_t index : batch) {
      SampleLocation loc = (*ds)->directory().location(index);
      ranges.push_back({loc.offset, loc.length});
    }
    // Enough gaps wider than max_hole that the batch is read in several chunks.
    std::vector<io::ByteRange> sorted = ranges;
    std::sort(sorted.begin(), sorted.end(),
              [](const io::ByteRange& a, const io::ByteRange& b) { return a.offset < b.offset; });
    int wide_gaps = 0;
    for (size_t i = 1; i < sorted.size(); ++i)
      wide_gaps +=
          sorted[i].offset > sorted[i - 1].offset + sorted[i - 1].length + options.reader->max_hole;
    ASSERT_GE(wide_gaps, 3);
    size_t expected_requests =
        io::CoalesceRanges(ranges, options.reader->max_hole, options.reader->max_coalesced)
            .fetches.size();
    int64_t before = counting->reads();
    auto samples = (*ds)->ReadSamples(batch);
    ASSERT_TRUE(samples.ok()) << samples.status();
    EXPECT_EQ(static_cast<size_t>(counting->reads() - before), expected_requests);
    ASSERT_EQ(samples->size(), batch.size());
    for (size_t j = 0; j < batch.size(); ++j) {
      ASSERT_EQ((*samples)[j].key, MakeSample(batch[j]).key);
      ASSERT_EQ((*samples)[j].fields, MakeSample(batch[j]).fields);
    }
  }

  // Corrupt the last sample of the shard (the batch's last chunk in file order).
  std::string shard_key;
  auto shards = base->List({"", "", 0});
  ASSERT_TRUE(shards.ok()) << shards.status();
  for (const io::ObjectInfo& info : shards->objects) {
    if (info.key.ends_with(".stk")) shard_key = info.key;
  }
  ASSERT_FALSE(shard_key.empty());
  auto bytes = base->Read(shard_key);
  ASSERT_TRUE(bytes.ok());
  std::string corrupt(bytes->view());
  SampleLocation last = (*ds)->directory().location(599);
  corrupt[last.offset + last.length - 1] ^= 0x10;
  ASSERT_TRUE(base->Put(shard_key, Buffer::FromString(corrupt)).ok());
  auto reopened = ShardedDataset::Open(counting, "", options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::vector<uint64_t> spread;
  for (uint64_t i = 0; i < 600; i += 20) spread.push_back(i);
  spread.push_back(599);
  auto failed = (*reopened)->ReadSamples(spread);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr(MakeSample(599).key));
}

// The directory's memory for 1 M samples: the figure the issue asks for.
TEST(DatasetTest, DirectoryMemoryForOneMillionSamples) {
  constexpr uint64_t kSamples = 1'000'000;
  DatasetWriterOptions options;
  options.shard_bytes = 8 << 20;
  auto writer = DatasetWriter::Open("mem://dsmem/big", options);
  ASSERT_TRUE(writer.ok());
  uint64_t key_bytes = 0;
  Sample s;
  s.fields.push_back({"cls", Buffer::Copy("1")});
  for (uint64_t i = 0; i < kSamples; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "n%08llu", static_cast<unsigned long long>(i));
    s.key = key;
    key_bytes += s.key.size();
    ASSERT_TRUE((*writer)->Add(s).ok());
  }
  ASSERT_TRUE((*writer)->Close().ok());
  auto ds = ShardedDataset::Open("mem://dsmem/big");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), kSamples);
  uint64_t bytes = (*ds)->directory().MemoryBytes();
  double per_sample = static_cast<double>(bytes - key_bytes) / kSamples;
  std::printf("sample directory: %llu samples, %llu bytes (%.2f bytes/sample + %llu key bytes)\n",
              static_cast<unsigned long long>(kSamples), static_cast<unsigned long long>(bytes),
              per_sample, static_cast<unsigned long long>(key_bytes));
  RecordProperty("directory_bytes_per_sample", std::to_string(per_sample));
  EXPECT_LE(per_sample, 24.0);
  EXPECT_EQ((*ds)->key(123456), "n00123456");
}

}  // namespace
}  // namespace stoker::format
