// Micro benchmarks of the read planner, the ranged reader and the block cache.
//
// The "Simulated" benchmarks read from memory through a LatencyStore that behaves like one S3
// connection per request (30 ms to first byte, 90 MB/s), so they show what planning buys against
// object-store latency without a server: compare the variants of one benchmark with each other,
// not with absolute disk or network figures.
#include <benchmark/benchmark.h>

#include <random>

#include "stoker/io/cache/cached_store.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/read/range_plan.h"
#include "stoker/io/read/ranged_reader.h"
#include "stoker/testing/latency_store.h"

namespace stoker::io {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

std::vector<ByteRange> RandomRanges(size_t n, uint64_t object_size, uint64_t length, int seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> offset(0, object_size - length);
  std::vector<ByteRange> ranges;
  for (size_t i = 0; i < n; ++i) ranges.push_back({offset(rng), length});
  return ranges;
}

std::shared_ptr<testing::LatencyStore> SimulatedS3(uint64_t object_size) {
  auto memory = std::make_shared<MemoryStore>();
  std::string data(object_size, 'x');
  memory->Set("obj", Buffer::FromString(std::move(data)));
  return std::make_shared<testing::LatencyStore>(
      memory,
      testing::LatencyStore::Options{.latency = absl::Milliseconds(30), .bytes_per_second = 90e6});
}

void BM_CoalesceRanges(benchmark::State& state) {
  auto ranges = RandomRanges(state.range(0), 256 * kMiB, 100 * kKiB, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(CoalesceRanges(ranges, 2'700'000, 8'100'000));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_CoalesceRanges)->Arg(100)->Arg(10000);

// 128 random 100 KiB ranges of a 32 MiB object.
//   arg 0: defaults (coalescing with S3 limits, 16 requests in flight)
//   arg 1: no coalescing, 16 in flight
//   arg 2: no coalescing, one request at a time
void BM_SimulatedS3RandomRanges(benchmark::State& state) {
  auto store = SimulatedS3(32 * kMiB);
  ReaderOptions options;
  if (state.range(0) >= 1) options.max_hole = options.max_coalesced = 0;
  if (state.range(0) == 2) options.max_parts_in_flight = 1;
  RangedReader reader(store, options);
  auto ranges = RandomRanges(128, 32 * kMiB, 100 * kKiB, 2);
  int64_t requests_before = store->reads();
  for (auto _ : state) {
    auto got = reader.ReadRanges("obj", ranges);
    if (!got.ok()) state.SkipWithError(std::string(got.status().message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * 128 * 100 * kKiB);
  state.counters["requests"] = static_cast<double>(store->reads() - requests_before) /
                               static_cast<double>(state.iterations());
}
BENCHMARK(BM_SimulatedS3RandomRanges)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One 64 MiB read: arg = parts in flight (8 MiB parts).
void BM_SimulatedS3WholeObject(benchmark::State& state) {
  auto store = SimulatedS3(64 * kMiB);
  RangedReader reader(store, {.max_parts_in_flight = static_cast<int>(state.range(0))});
  for (auto _ : state) {
    auto got = reader.Read("obj");
    if (!got.ok()) state.SkipWithError(std::string(got.status().message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * 64 * kMiB);
}
BENCHMARK(BM_SimulatedS3WholeObject)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Iterations(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// 100 KiB reads served from a warm RAM cache (the hit path: lookup, pin, slice or assemble).
void BM_CachedStoreWarmReads(benchmark::State& state) {
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("obj", Buffer::FromString(std::string(64 * kMiB, 'y')));
  CachedStore store(memory, std::make_shared<BlockCache>(256 * kMiB));
  (void)store.Read("obj");  // warm
  auto ranges = RandomRanges(1024, 64 * kMiB, 100 * kKiB, 3);
  size_t i = 0;
  for (auto _ : state) {
    auto got = store.Read("obj", ranges[i++ % ranges.size()]);
    benchmark::DoNotOptimize(got);
  }
  state.SetBytesProcessed(state.iterations() * 100 * kKiB);
}
BENCHMARK(BM_CachedStoreWarmReads);

void BM_BlockCacheHit(benchmark::State& state) {
  BlockCache cache(64 * kMiB);
  for (uint64_t i = 0; i < 64; ++i)
    cache.Insert({"s3://b/k", "etag", i}, Buffer::FromString(std::string(kMiB, 'z')));
  uint64_t i = 0;
  for (auto _ : state) {
    auto handle = cache.Lookup({"s3://b/k", "etag", i++ % 64});
    benchmark::DoNotOptimize(handle);
  }
}
BENCHMARK(BM_BlockCacheHit);

}  // namespace
}  // namespace stoker::io

BENCHMARK_MAIN();
