#include "stoker/format/sharded_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "stoker/core/blocking.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread_pool.h"
#include "stoker/format/shard_format.h"
#include "stoker/format/shard_index.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/read/range_plan.h"
#include "stoker/io/read/ranged_reader.h"
#include "stoker/io/url.h"

namespace stoker::format {
namespace {

std::string Dirname(std::string_view key) {
  size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(key.substr(0, slash + 1));
}

// Loads every shard's index with at most `parallelism` loads in flight.
absl::StatusOr<std::vector<ShardIndex>> LoadIndexes(io::RangedReader& reader,
                                                    const std::vector<std::string>& keys,
                                                    const std::vector<std::string>& urls,
                                                    const Manifest& manifest, int parallelism) {
  struct State {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    absl::Status first_error ABSL_GUARDED_BY(mu);
    std::vector<std::optional<ShardIndex>> results ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  {
    absl::MutexLock lock(&state->mu);
    state->results.resize(keys.size());
  }
  parallelism = std::max(parallelism, 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    {
      absl::MutexLock lock(&state->mu);
      auto below = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
        return state->in_flight < parallelism;
      };
      while (!below()) state->mu.Await(absl::Condition(&below));
      if (!state->first_error.ok()) break;
      ++state->in_flight;
    }
    LoadShardIndexAsync(reader, keys[i], urls[i], manifest.shards[i].bytes,
                        [state, i](absl::StatusOr<ShardIndex> result) {
                          absl::MutexLock lock(&state->mu);
                          --state->in_flight;
                          if (result.ok()) {
                            state->results[i] = std::move(*result);
                          } else if (state->first_error.ok()) {
                            state->first_error = result.status();
                          }
                        });
  }
  absl::MutexLock lock(&state->mu);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) { return state->in_flight == 0; };
  state->mu.Await(absl::Condition(&idle));
  RETURN_IF_ERROR(state->first_error);
  std::vector<ShardIndex> out;
  out.reserve(keys.size());
  for (auto& r : state->results) out.push_back(std::move(*r));
  return out;
}

io::ReaderOptions ReaderOptionsFor(io::ObjectStore& store, const DatasetOptions& options) {
  if (options.reader.has_value()) return *options.reader;
  io::ReaderOptions reader;
  std::string root = store.Url("");
  bool network =
      root.starts_with("s3://") || root.starts_with("http://") || root.starts_with("https://");
  if (!network) {
    io::CoalesceLimits limits = io::CoalesceLimitsFor(absl::Microseconds(100), 2e9);
    reader.max_hole = limits.max_hole;
    reader.max_coalesced = limits.max_coalesced;
  }
  return reader;
}

// Batched reads of local files: limits from the device's measured speed, the whole call handed
// to the store as one batch (its engine bounds the reads in flight), no hedging (a local read
// that is slow is slow because the device is busy; a second one would only add to that).
io::ReaderOptions LocalReaderOptions(io::LocalStore& store, std::string_view probe_key) {
  io::DeviceProfile device = store.Probe(probe_key);
  io::CoalesceLimits limits = io::LocalCoalesceLimits(device.per_request, device.bytes_per_second);
  io::ReaderOptions reader;
  reader.max_hole = limits.max_hole;
  reader.max_coalesced = limits.max_coalesced;
  reader.max_parts_in_flight = 1 << 16;
  reader.hedge = false;
  return reader;
}

uint64_t PhysicalMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

bool UseDirectIo(const DatasetOptions& options, uint64_t dataset_bytes) {
  DatasetOptions::DirectIo mode = options.direct_io;
  double share = options.direct_io_ram_share;
  if (mode == DatasetOptions::DirectIo::kAuto) {
    if (const char* env = std::getenv("STOKER_DIRECT_IO")) {
      std::string_view value(env);
      if (value == "on" || value == "1") mode = DatasetOptions::DirectIo::kOn;
      if (value == "off" || value == "0") mode = DatasetOptions::DirectIo::kOff;
    }
    if (const char* env = std::getenv("STOKER_DIRECT_IO_RAM_SHARE")) {
      double parsed = std::strtod(env, nullptr);
      if (parsed > 0) share = parsed;
    }
  }
  if (mode != DatasetOptions::DirectIo::kAuto) return mode == DatasetOptions::DirectIo::kOn;
  uint64_t ram = PhysicalMemoryBytes();
  return ram > 0 && static_cast<double>(dataset_bytes) > share * static_cast<double>(ram);
}

}  // namespace

ShardedDataset::ShardedDataset(std::string base_url, std::shared_ptr<io::ObjectStore> store,
                               std::vector<std::string> shard_keys, Manifest manifest,
                               SampleDirectory directory, DatasetOptions options)
    : base_url_(std::move(base_url)),
      store_(store),
      shard_keys_(std::move(shard_keys)),
      manifest_(std::move(manifest)),
      directory_(std::move(directory)),
      options_(options),
      report_(std::make_shared<CorruptionReport>()),
      reader_(std::make_shared<io::RangedReader>(store, ReaderOptionsFor(*store, options))) {}

ShardedDataset::~ShardedDataset() = default;

const io::ReaderOptions& ShardedDataset::reader_options() const { return reader_->options(); }

std::string ShardedDataset::ShardUrl(size_t shard) const { return store_->Url(shard_keys_[shard]); }

absl::StatusOr<std::shared_ptr<ShardedDataset>> ShardedDataset::Open(std::string_view url,
                                                                     DatasetOptions options) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
  return Open(std::move(target.store), target.key, options);
}

absl::StatusOr<std::shared_ptr<ShardedDataset>> ShardedDataset::Open(
    std::shared_ptr<io::ObjectStore> store, std::string_view key, DatasetOptions options) {
  io::StoreAndKey target{store, std::string(key)};
  std::string url = store->Url(key);
  std::string prefix;
  Manifest manifest;
  if (target.key.ends_with(".stk")) {
    // A single shard: a one-shard dataset whose manifest comes from a Stat.
    ASSIGN_OR_RETURN(io::ObjectInfo info, store->Stat(target.key));
    prefix = Dirname(target.key);
    std::string name = target.key.substr(prefix.size());
    manifest.shards.push_back({name, 0, info.size});
    manifest.total_bytes = info.size;
  } else {
    std::string manifest_key;
    if (target.key.ends_with(kManifestName)) {
      manifest_key = target.key;
      prefix = Dirname(target.key);
    } else {
      prefix = target.key.empty() || target.key.ends_with("/") ? target.key : target.key + "/";
      manifest_key = StrCat(prefix, kManifestName);
    }
    std::string manifest_url = store->Url(manifest_key);
    auto bytes = store->Read(manifest_key);
    if (absl::IsNotFound(bytes.status())) {
      return absl::NotFoundError(StrCat("no dataset at ", url, ": ", manifest_url,
                                        " does not exist (create one with `stoker convert`)"));
    }
    RETURN_IF_ERROR(bytes.status());
    ASSIGN_OR_RETURN(manifest, ParseManifest(bytes->view(), manifest_url));
  }
  bool single_shard = target.key.ends_with(".stk");

  std::vector<std::string> keys, urls;
  for (const ManifestShard& s : manifest.shards) {
    keys.push_back(StrCat(prefix, s.name));
    urls.push_back(store->Url(keys.back()));
  }
  io::RangedReader reader(store);
  ASSIGN_OR_RETURN(std::vector<ShardIndex> indexes,
                   LoadIndexes(reader, keys, urls, manifest, options.open_parallelism));

  SampleDirectory::Builder builder;
  uint64_t total = 0, index_bytes = 0;
  for (const ShardIndex& index : indexes) {
    total += index.footer.record_count;
    index_bytes += index.footer.index_length;
  }
  // Keys take at most index_length - 14 bytes per entry; reserve what the indexes need.
  builder.Reserve(total, index_bytes > 14 * total ? index_bytes - 14 * total : 0);
  for (size_t s = 0; s < indexes.size(); ++s) {
    const shard::Footer& footer = indexes[s].footer;
    if (single_shard) {
      manifest.shards[s].samples = footer.record_count;
      manifest.total_samples = footer.record_count;
    } else if (footer.record_count != manifest.shards[s].samples) {
      return absl::FailedPreconditionError(
          StrCat(urls[s], ": the manifest lists ", manifest.shards[s].samples,
                 " samples but the shard's index has ", footer.record_count,
                 " (the manifest and the shards disagree; re-run `stoker convert`)"));
    }
    builder.StartShard();
    RETURN_IF_ERROR(shard::ParseIndex(indexes[s].index.view(), footer, urls[s],
                                      [&](uint64_t offset, uint32_t length, std::string_view key) {
                                        builder.Add(offset, length, key);
                                      }));
    indexes[s].index = Buffer();
  }
  std::string base_url = store->Url(prefix);
  if (auto* local = dynamic_cast<io::LocalStore*>(store.get()); local != nullptr) {
    // A store opened with O_DIRECT stays so; one through the page cache switches to the shared
    // O_DIRECT store when direct I/O is asked for or the dataset is large (UseDirectIo).
    if (!local->direct() && UseDirectIo(options, manifest.total_bytes)) {
      store = io::LocalStore::Shared(/*direct=*/true);
      local = static_cast<io::LocalStore*>(store.get());
    }
    if (!options.reader.has_value() && !keys.empty()) {
      options.reader = LocalReaderOptions(*local, keys.front());
    }
  }
  return std::make_shared<ShardedDataset>(std::move(base_url), std::move(store), std::move(keys),
                                          std::move(manifest), std::move(builder).Build(), options);
}

void ShardedDataset::ReadSamplesAsync(
    std::vector<uint64_t> indices,
    absl::AnyInvocable<void(absl::StatusOr<std::vector<Sample>>) &&> done) const {
  ReadSamplesAsync(std::move(indices), std::move(done), nullptr);
}

void ShardedDataset::ReadSamplesAsync(
    std::vector<uint64_t> indices,
    absl::AnyInvocable<void(absl::StatusOr<std::vector<Sample>>) &&> done,
    DecodeRunner run_decode) const {
  for (uint64_t index : indices) {
    if (index >= size()) {
      std::move(done)(absl::OutOfRangeError(StrCat("sample index ", index, " is past the end of ",
                                                   base_url_, " (", size(), " samples)")));
      return;
    }
  }
  // Positions in `indices` grouped by shard, each group in file order.
  std::map<uint32_t, std::vector<size_t>> by_shard;
  for (size_t pos = 0; pos < indices.size(); ++pos) {
    by_shard[directory_.location(indices[pos]).shard].push_back(pos);
  }
  // Each shard's group is read as one or more chunks: a chunk of at least kMinChunk samples ends
  // at a gap the reader would not coalesce anyway (wider than max_hole), so the requests are the
  // same as for one call, but each chunk is decoded (CRC, decompression) as soon as its reads
  // land, on whichever thread completes them, while later chunks are still being read.
  constexpr size_t kMinChunk = 8;
  const uint64_t max_hole = reader_->options().max_hole;
  std::vector<std::pair<uint32_t, std::vector<size_t>>> chunks;
  for (auto& [shard, positions] : by_shard) {
    std::sort(positions.begin(), positions.end(), [&](size_t a, size_t b) {
      return directory_.location(indices[a]).offset < directory_.location(indices[b]).offset;
    });
    std::vector<size_t> chunk;
    uint64_t chunk_end = 0;
    for (size_t pos : positions) {
      SampleLocation loc = directory_.location(indices[pos]);
      if (chunk.size() >= kMinChunk && loc.offset > chunk_end + max_hole) {
        chunks.emplace_back(shard, std::move(chunk));
        chunk.clear();
      }
      chunk.push_back(pos);
      chunk_end = std::max(chunk_end, loc.offset + loc.length);
    }
    chunks.emplace_back(shard, std::move(chunk));
  }
  struct Batch {
    absl::Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    absl::Status error ABSL_GUARDED_BY(mu);
    std::vector<uint64_t> indices;
    std::vector<std::optional<Sample>> samples;  // each slot written by one callback
    absl::AnyInvocable<void(absl::StatusOr<std::vector<Sample>>) &&> done;
  };
  auto batch = std::make_shared<Batch>();
  batch->indices = std::move(indices);
  batch->samples.resize(batch->indices.size());
  batch->done = std::move(done);
  if (chunks.empty()) {
    std::move(batch->done)(std::vector<Sample>());
    return;
  }
  {
    absl::MutexLock lock(&batch->mu);
    batch->pending = chunks.size();
  }
  // Finishes the batch once every chunk's reads are decoded.
  auto finish = [](const std::shared_ptr<Batch>& batch) {
    absl::Status error;
    {
      absl::MutexLock lock(&batch->mu);
      if (--batch->pending > 0) return;
      error = batch->error;
    }
    if (!error.ok()) {
      std::move(batch->done)(error);
      return;
    }
    std::vector<Sample> out;
    out.reserve(batch->samples.size());
    for (auto& sample : batch->samples) {
      if (sample.has_value()) out.push_back(std::move(*sample));
    }
    std::move(batch->done)(std::move(out));
  };
  for (auto& [shard, positions] : chunks) {
    std::vector<io::ByteRange> ranges;
    ranges.reserve(positions.size());
    for (size_t pos : positions) {
      SampleLocation loc = directory_.location(batch->indices[pos]);
      ranges.push_back({loc.offset, loc.length});
    }
    std::string url = ShardUrl(shard);
    reader_->ReadRangesAsync(
        shard_keys_[shard], std::move(ranges), "",
        [this, batch, positions = std::move(positions), url = std::move(url), finish,
         run_decode](absl::StatusOr<std::vector<Buffer>> result) mutable {
          auto decode = [this, batch, positions = std::move(positions), url = std::move(url),
                         finish, result = std::move(result)]() mutable {
            absl::Status error;
            if (!result.ok()) {
              error = Annotate(result.status(), StrCat("reading samples from ", url));
            } else {
              for (size_t j = 0; j < positions.size() && error.ok(); ++j) {
                uint64_t index = batch->indices[positions[j]];
                SampleLocation loc = directory_.location(index);
                std::string_view key = directory_.key(index);
                absl::StatusOr<Sample> sample;
                if ((*result)[j].size() != loc.length) {
                  sample = shard::RecordError(url, loc.offset, key, "truncated record");
                } else {
                  // A record in block-cache bytes is CRC-checked on its first read from them
                  // (where the block entered the cache) and marked; later reads of those same
                  // bytes skip the CRC (io::IsVerified).
                  const Buffer& record = (*result)[j];
                  const bool checked = io::IsVerified(record);
                  sample = shard::DecodeRecord(
                      record, url, loc.offset, key,
                      checked ? shard::RecordCrc::kAlreadyChecked : shard::RecordCrc::kCheck);
                  if (sample.ok() && !checked) io::MarkVerified(record);
                }
                if (sample.ok()) {
                  sample->index = index;
                  batch->samples[positions[j]] = std::move(*sample);
                } else if (options_.on_corrupt == OnCorrupt::kSkip &&
                           absl::IsDataLoss(sample.status())) {
                  spdlog::warn("skipping corrupt sample {}: {}", index,
                               std::string(sample.status().message()));
                  report_->Add(sample.status());
                } else {
                  error = sample.status();
                }
              }
            }
            if (!error.ok()) {
              absl::MutexLock lock(&batch->mu);
              if (batch->error.ok()) batch->error = error;
            }
            finish(batch);
          };
          if (run_decode) {
            run_decode(std::move(decode));
          } else {
            decode();
          }
        });
  }
}

namespace {

// Threads that check and decode part of a blocking ReadSamples call's records beside the caller:
// one fewer than the cores (at most 3); null on one core. A chunk goes to them only while one is
// idle (`busy` counts the chunks queued or running), so that many threads calling ReadSamples at
// once never wait behind a queue on the helpers; they then decode their own chunks as before.
struct DecodeHelpers {
  explicit DecodeHelpers(int threads) : pool("stoker-decode", threads) {}
  ThreadPool pool;
  std::atomic<int> busy{0};

  static DecodeHelpers* Get() {
    static DecodeHelpers* helpers = [] {
      int cores = static_cast<int>(std::thread::hardware_concurrency());
      return cores > 1 ? new DecodeHelpers(std::min(cores - 1, 3)) : nullptr;
    }();
    return helpers;
  }

  // Runs `decode` on an idle helper; false (and `decode` untouched) when none is idle.
  bool TryRun(absl::AnyInvocable<void() &&>& decode) {
    if (busy.fetch_add(1, std::memory_order_acq_rel) >= pool.num_threads()) {
      busy.fetch_sub(1, std::memory_order_acq_rel);
      return false;
    }
    pool.Schedule([this, decode = std::move(decode)]() mutable {
      std::move(decode)();
      busy.fetch_sub(1, std::memory_order_acq_rel);
    });
    return true;
  }
};

}  // namespace

absl::StatusOr<std::vector<Sample>> ShardedDataset::ReadSamples(
    std::span<const uint64_t> indices) const {
  // Reads that the store answers on this thread while it issues them (local files in the page
  // cache, which LocalStore serves without a copy) would leave every record's CRC to this one
  // thread: of the chunks answered so, all but every (helpers + 1)-th is checked and decoded by
  // an idle helper thread while this thread goes on, so a warm batch uses every core. Chunks
  // answered later (on I/O threads) are decoded where they land, as ReadSamplesAsync does.
  struct Spread {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> issuing{true};
    std::atomic<unsigned> inline_chunks{0};
  };
  auto spread = std::make_shared<Spread>();
  DecodeHelpers* helpers = DecodeHelpers::Get();
  DecodeRunner runner;
  if (helpers != nullptr) {
    runner = [spread, helpers](absl::AnyInvocable<void() &&> decode) {
      const unsigned share = static_cast<unsigned>(helpers->pool.num_threads()) + 1;
      if (spread->issuing.load(std::memory_order_acquire) &&
          std::this_thread::get_id() == spread->caller &&
          spread->inline_chunks.fetch_add(1, std::memory_order_relaxed) % share != 0 &&
          helpers->TryRun(decode)) {
        return;
      }
      std::move(decode)();
    };
  }
  return Await<absl::StatusOr<std::vector<Sample>>>([&](auto done) {
    ReadSamplesAsync(std::vector<uint64_t>(indices.begin(), indices.end()), std::move(done),
                     std::move(runner));
    spread->issuing.store(false, std::memory_order_release);
  });
}

absl::StatusOr<Sample> ShardedDataset::ReadSample(uint64_t index) const {
  uint64_t indices[] = {index};
  ASSIGN_OR_RETURN(std::vector<Sample> samples, ReadSamples(indices));
  if (samples.empty()) {
    return absl::DataLossError(
        StrCat("sample ", index, " of ", base_url_, " is corrupt and was skipped"));
  }
  return std::move(samples[0]);
}

absl::StatusOr<uint64_t> VerifyShard(std::string_view url,
                                     std::shared_ptr<CorruptionReport> report) {
  StreamOptions options;
  options.format = StreamFormat::kShard;
  if (report != nullptr) {
    options.on_corrupt = OnCorrupt::kSkip;
    options.report = std::move(report);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SampleStream> stream, OpenSampleStream(url, options));
  uint64_t count = 0;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<Sample> sample, stream->Next());
    if (!sample.has_value()) break;
    ++count;
  }
  return count;
}

}  // namespace stoker::format
