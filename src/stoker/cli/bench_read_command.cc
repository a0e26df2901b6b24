// stoker bench-read URL: how fast a dataset can be read where it lives (docs/reads.md), next to
// what the device allows, so users can tell whether storage or their CPUs limit them.
//   random      random-order minibatches through ShardedDataset::ReadSamplesAsync (the pipeline's
//               path), `--in-flight` minibatches at a time; with O_DIRECT for `--seconds`
//               (passes over the dataset in new orders), through the page cache one pass at most
//   sequential  every shard read front to back in 8 MiB reads, 8 in flight
//   bound       for local files, the device profile LocalStore::Probe measured: one more 4 KiB
//               read at queue depth 32 costs `per_request`, large reads run at `bandwidth`; a
//               random sample of S bytes then needs per_request + S / bandwidth of device time.
// --drop-cache asks the kernel to drop the shards' cached pages (posix_fadvise DONTNEED) before
// each measurement, so page-cache reads start cold.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/cli/commands.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/io/local/local_store.h"

namespace stoker::cli {
namespace {

struct BenchReadArgs {
  std::string url;
  std::string direct = "auto";
  uint64_t batch_size = 256;
  int in_flight = 2;
  double seconds = 3;
  uint64_t seed = 7;
  bool drop_cache = false;
  bool json = false;
  std::string mode = "both";
};

struct Rate {
  uint64_t items = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Drops the cached pages of every local shard (no-op for other stores).
void DropCache(const format::ShardedDataset& ds) {
  if (ds.store().Url("").starts_with("s3://") || ds.store().Url("").starts_with("http")) return;
  for (size_t s = 0; s < ds.manifest().shards.size(); ++s) {
    std::string path = ds.ShardUrl(s);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

absl::StatusOr<Rate> RandomSamples(const format::ShardedDataset& ds, const BenchReadArgs& args) {
  std::vector<uint64_t> order(ds.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(args.seed));
  // With O_DIRECT every pass reads the device, so a dataset read through before --seconds are
  // up is read again in a new order (a steady state, as fio's time-based runs measure); through
  // the page cache a second pass would be warm, so the measurement ends with the first.
  auto* local = dynamic_cast<const io::LocalStore*>(&ds.store());
  const bool repeat = local != nullptr && local->direct();
  absl::Mutex mu;
  int in_flight = 0;
  absl::Status error;
  Rate rate;
  absl::Time start = absl::Now();
  absl::Time stop = start + absl::Seconds(args.seconds);
  uint64_t pass = 0;
  for (size_t first = 0; absl::Now() < stop && !order.empty(); first += args.batch_size) {
    if (first >= order.size()) {
      if (!repeat) break;
      std::shuffle(order.begin(), order.end(), std::mt19937_64(args.seed + ++pass));
      first = 0;
    }
    {
      absl::MutexLock lock(&mu);
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight < args.in_flight; };
      mu.Await(absl::Condition(&room));
      if (!error.ok()) break;
      ++in_flight;
    }
    size_t n = std::min<size_t>(args.batch_size, order.size() - first);
    ds.ReadSamplesAsync(std::vector<uint64_t>(order.begin() + first, order.begin() + first + n),
                        [&](absl::StatusOr<std::vector<format::Sample>> got) {
                          absl::MutexLock lock(&mu);
                          --in_flight;
                          if (!got.ok()) {
                            if (error.ok()) error = got.status();
                            return;
                          }
                          for (const format::Sample& s : *got) {
                            ++rate.items;
                            for (const format::Field& f : s.fields) rate.bytes += f.value.size();
                          }
                        });
  }
  absl::MutexLock lock(&mu);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 0; };
  mu.Await(absl::Condition(&idle));
  RETURN_IF_ERROR(error);
  rate.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return rate;
}

absl::StatusOr<Rate> SequentialShards(const format::ShardedDataset& ds, const BenchReadArgs& args) {
  constexpr uint64_t kPart = 8 << 20;
  constexpr int kInFlight = 8;
  absl::Mutex mu;
  int in_flight = 0;
  absl::Status error;
  Rate rate;
  absl::Time start = absl::Now();
  absl::Time stop = start + absl::Seconds(args.seconds);
  for (size_t s = 0; s < ds.manifest().shards.size() && absl::Now() < stop; ++s) {
    uint64_t size = ds.manifest().shards[s].bytes;
    for (uint64_t offset = 0; offset < size && absl::Now() < stop; offset += kPart) {
      {
        absl::MutexLock lock(&mu);
        auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight < kInFlight; };
        mu.Await(absl::Condition(&room));
        if (!error.ok()) break;
        ++in_flight;
      }
      ds.store().ReadAsync(
          io::ReadRequest{ds.shard_key(s), {offset, std::min(kPart, size - offset)}, ""},
          [&](absl::StatusOr<Buffer> got) {
            absl::MutexLock lock(&mu);
            --in_flight;
            if (!got.ok()) {
              if (error.ok()) error = got.status();
              return;
            }
            ++rate.items;
            rate.bytes += got->size();
          });
    }
  }
  absl::MutexLock lock(&mu);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return in_flight == 0; };
  mu.Await(absl::Condition(&idle));
  RETURN_IF_ERROR(error);
  rate.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return rate;
}

absl::Status BenchRead(const BenchReadArgs& args) {
  format::DatasetOptions options;
  if (args.direct == "on") {
    options.direct_io = format::DatasetOptions::DirectIo::kOn;
  } else if (args.direct == "off") {
    options.direct_io = format::DatasetOptions::DirectIo::kOff;
  } else if (args.direct != "auto") {
    return absl::InvalidArgumentError(
        StrCat("--direct: '", args.direct, "' is not one of auto, on, off"));
  }
  if (args.mode != "both" && args.mode != "random" && args.mode != "sequential") {
    return absl::InvalidArgumentError(
        StrCat("--mode: '", args.mode, "' is not one of both, random, sequential"));
  }
  if (args.batch_size == 0 || args.in_flight < 1 || !(args.seconds > 0)) {
    return absl::InvalidArgumentError("--batch-size, --in-flight and --seconds must be positive");
  }
  if (args.drop_cache) {
    // Before opening, so that the device probe (for local files) sees the device, not the cache.
    ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> first,
                     format::ShardedDataset::Open(args.url, options));
    DropCache(*first);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
                   format::ShardedDataset::Open(args.url, options));
  if (ds->size() == 0) return absl::FailedPreconditionError(StrCat(args.url, " has no samples"));
  auto* local = dynamic_cast<io::LocalStore*>(&ds->store());
  nlohmann::json out = {{"url", ds->url()},
                        {"samples", ds->size()},
                        {"bytes", ds->manifest().total_bytes},
                        {"max_hole", ds->reader_options().max_hole},
                        {"max_coalesced", ds->reader_options().max_coalesced}};
  double avg_sample = static_cast<double>(ds->manifest().total_bytes) / ds->size();
  io::DeviceProfile device;
  if (local != nullptr) {
    device = local->Probe(ds->shard_key(0));
    out["engine"] = device.engine;
    out["direct"] = device.direct;
    out["device"] = {{"measured", device.measured},
                     {"first_byte_us", absl::ToDoubleMicroseconds(device.first_byte)},
                     {"per_request_us", absl::ToDoubleMicroseconds(device.per_request)},
                     {"bytes_per_second", device.bytes_per_second}};
    double per_sample =
        absl::ToDoubleSeconds(device.per_request) + avg_sample / device.bytes_per_second;
    out["bound"] = {{"random_samples_per_second", 1 / per_sample},
                    {"sequential_bytes_per_second", device.bytes_per_second}};
  }
  if (args.mode != "sequential") {
    if (args.drop_cache) DropCache(*ds);
    ASSIGN_OR_RETURN(Rate r, RandomSamples(*ds, args));
    out["random"] = {{"samples", r.items},
                     {"bytes", r.bytes},
                     {"seconds", r.seconds},
                     {"samples_per_second", r.items / r.seconds},
                     {"bytes_per_second", r.bytes / r.seconds}};
  }
  if (args.mode != "random") {
    if (args.drop_cache) DropCache(*ds);
    ASSIGN_OR_RETURN(Rate r, SequentialShards(*ds, args));
    out["sequential"] = {
        {"bytes", r.bytes}, {"seconds", r.seconds}, {"bytes_per_second", r.bytes / r.seconds}};
  }
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
    return absl::OkStatus();
  }
  std::printf("%s: %llu samples, %.1f MB, %.0f KiB per sample on average\n", ds->url().c_str(),
              static_cast<unsigned long long>(ds->size()), ds->manifest().total_bytes / 1e6,
              avg_sample / 1024);
  if (local != nullptr) {
    std::printf(
        "  local files, %s engine, %s\n", device.engine.c_str(),
        device.direct ? "O_DIRECT" : "through the page cache (cached data probes as memory)");
    std::printf(
        "  device%s: %.1f us to first byte, %.1f us per 4 KiB read at queue depth 32, "
        "%.0f MB/s in 1 MiB reads\n",
        device.measured ? "" : " (not measured: shard too small; assumed)",
        absl::ToDoubleMicroseconds(device.first_byte),
        absl::ToDoubleMicroseconds(device.per_request), device.bytes_per_second / 1e6);
  }
  std::printf("  planning: holes up to %llu bytes read through, merged reads up to %llu bytes\n",
              static_cast<unsigned long long>(ds->reader_options().max_hole),
              static_cast<unsigned long long>(ds->reader_options().max_coalesced));
  if (out.contains("random")) {
    double sps = out["random"]["samples_per_second"];
    std::printf("  random samples:   %10.0f samples/s  %8.0f MB/s", sps,
                out["random"]["bytes_per_second"].get<double>() / 1e6);
    if (out.contains("bound")) {
      double bound = out["bound"]["random_samples_per_second"];
      std::printf("   device bound %10.0f samples/s (%.2f of it)", bound, sps / bound);
    }
    std::printf("\n");
  }
  if (out.contains("sequential")) {
    double bps = out["sequential"]["bytes_per_second"];
    std::printf("  sequential:                         %8.0f MB/s", bps / 1e6);
    if (out.contains("bound")) {
      std::printf("   device bound %10.0f MB/s      (%.2f of it)", device.bytes_per_second / 1e6,
                  bps / device.bytes_per_second);
    }
    std::printf("\n");
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterBenchReadCommand(CLI::App& app, absl::Status* result) {
  auto* cmd = app.add_subcommand(
      "bench-read",
      "Measure a dataset's random-sample and sequential read rates where it lives, next to the "
      "device's bound (local files)");
  static BenchReadArgs bench_args;
  BenchReadArgs* a = &bench_args;
  cmd->add_option("URL", a->url, "dataset folder/prefix, manifest.json or shard")->required();
  cmd->add_option("--mode", a->mode, "both, random or sequential")->capture_default_str();
  cmd->add_option("--direct", a->direct, "O_DIRECT for local files: auto, on or off")
      ->capture_default_str();
  cmd->add_option("--batch-size", a->batch_size, "samples per random minibatch")
      ->capture_default_str();
  cmd->add_option("--in-flight", a->in_flight, "random minibatches read at a time")
      ->capture_default_str();
  cmd->add_option("--seconds", a->seconds, "stop each measurement after this long")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the random sample order")->capture_default_str();
  cmd->add_flag("--drop-cache", a->drop_cache,
                "drop the shards' cached pages first (posix_fadvise DONTNEED)");
  cmd->add_flag("--json", a->json, "print one JSON line instead of text");
  cmd->callback([=] { *result = BenchRead(*a); });
}

}  // namespace stoker::cli
