#include "stoker/data/sources_format.h"

#include <deque>
#include <optional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/snapshot.h"

#ifdef STOKER_HAVE_FORMAT
#include "stoker/core/byte_size.h"
#include "stoker/core/logging.h"
#include "stoker/format/manifest.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/io/cache/block_cache.h"
#include "stoker/io/cache/cached_store.h"
#include "stoker/io/url.h"
#endif

namespace stoker::data {

#ifdef STOKER_HAVE_FORMAT
namespace {

// A sample as an element of bytes fields; a snapshot's record (snapshot.h) as the element it
// stored.
absl::StatusOr<Element> ToElement(format::Sample sample) {
  if (const Buffer* meta = sample.Find(kSnapshotMetaField)) {
    std::vector<std::pair<std::string, Buffer>> fields;
    for (format::Field& f : sample.fields) fields.emplace_back(f.name, std::move(f.value));
    ASSIGN_OR_RETURN(Element e, DecodeSnapshotElement(
                                    meta->view(), std::move(fields),
                                    StrCat("sample ", sample.index, " (key ", sample.key, ")")));
    e.sample_index = sample.index;
    return e;
  }
  Element e;
  for (format::Field& f : sample.fields) e.fields[f.name] = Tensor::Bytes(std::move(f.value));
  e.keys.push_back(std::move(sample.key));
  e.sample_index = sample.index;
  return e;
}

// A batched read in flight. Its decode closures (one per shard of the batch) arrive from the I/O
// thread into `work`; each is run by whichever comes first: a task on the pipeline's pool, or the
// thread in Wait() (which helps rather than waits behind other stages' tasks in the pool's queue).
class FormatPendingRead : public PendingRead {
 public:
  struct State {
    absl::Mutex mu;
    std::deque<absl::AnyInvocable<void() &&>> work ABSL_GUARDED_BY(mu);
    // The thread in StartRead while it issues the reads (reads answered inside that call: block
    // cache hits); the decode closures it gets are left to Wait() rather than handed to the pool.
    std::optional<std::thread::id> starter ABSL_GUARDED_BY(mu);
    std::optional<absl::StatusOr<std::vector<format::Sample>>> result ABSL_GUARDED_BY(mu);
  };

  explicit FormatPendingRead(std::shared_ptr<State> state) : state_(std::move(state)) {}
  ~FormatPendingRead() override {
    if (!waited_) (void)Wait();
  }

  // Runs one queued decode closure, if any is left (a pool task).
  static void RunOne(const std::shared_ptr<State>& state) {
    absl::AnyInvocable<void() &&> work;
    {
      absl::MutexLock lock(&state->mu);
      if (state->work.empty()) return;
      work = std::move(state->work.front());
      state->work.pop_front();
    }
    std::move(work)();
  }

  bool waited_for_io() const override { return waited_for_io_; }

  absl::StatusOr<std::vector<Element>> Wait() override {
    waited_ = true;
    absl::StatusOr<std::vector<format::Sample>> samples = std::vector<format::Sample>();
    while (true) {
      absl::AnyInvocable<void() &&> work;
      {
        absl::MutexLock lock(&state_->mu);
        if (!state_->result.has_value() && state_->work.empty()) {
          waited_for_io_ = true;
          state_->mu.Await(absl::Condition(
              +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
                return s->result.has_value() || !s->work.empty();
              },
              state_.get()));
        }
        if (state_->result.has_value()) {
          samples = std::move(*state_->result);
          break;
        }
        work = std::move(state_->work.front());
        state_->work.pop_front();
      }
      std::move(work)();
    }
    RETURN_IF_ERROR(samples.status());
    std::vector<Element> out;
    out.reserve(samples->size());
    for (format::Sample& s : *samples) {
      ASSIGN_OR_RETURN(Element e, ToElement(std::move(s)));
      out.push_back(std::move(e));
    }
    return out;
  }

 private:
  std::shared_ptr<State> state_;
  bool waited_ = false;
  bool waited_for_io_ = false;
};

class FormatIndexedSource : public IndexedSource {
 public:
  FormatIndexedSource(std::shared_ptr<format::ShardedDataset> ds,
                      std::shared_ptr<io::CachedStore> cached)
      : ds_(std::move(ds)), cached_(std::move(cached)) {}
  int64_t size() const override { return static_cast<int64_t>(ds_->size()); }
  std::optional<SourceCacheStats> cache_stats() const override {
    if (cached_ == nullptr) return std::nullopt;
    io::CachedStoreStats s = cached_->stats();
    SourceCacheStats out;
    out.hits = s.hits + s.joined;
    out.misses = s.misses;
    out.remote_bytes = s.fetched_bytes;
    out.budget_bytes = cached_->cache().memory_budget() + cached_->cache().disk_budget();
    return out;
  }
  std::unique_ptr<PendingRead> StartRead(std::vector<int64_t> indices,
                                         ThreadPool* pool) const override {
    using State = FormatPendingRead::State;
    auto state = std::make_shared<State>();
    auto pending = std::make_unique<FormatPendingRead>(state);
    // Called on the I/O thread. The pool task is scheduled under state->mu: Wait() cannot take
    // this work, finish, and let the pipeline destroy `pool` before Schedule has returned (a
    // Schedule on a destroyed pool crashed `stoker run` and workers at the end of a run). The task
    // itself only touches `state`, and a pool runs what is queued before it is destroyed.
    //
    // A read answered inside StartRead (every block a cache hit) was answered on this thread with
    // nothing to wait for: its decode is left to Wait() on the consumer's thread. Handing it to a
    // pool thread cost more than the decode (a futex wake-up per chunk, and the consumer waking
    // again for the result: 17% of the CPU samples of P8's second epoch once the CRC was off the
    // hit path); a decode that still checks CRCs there (a block's first read from the cache) costs
    // about what reading it from the cache's disk tier on this thread did.
    auto run_decode = [state, pool](absl::AnyInvocable<void() &&> decode) {
      absl::MutexLock lock(&state->mu);
      state->work.push_back(std::move(decode));
      if (state->starter == std::this_thread::get_id()) return;
      pool->Schedule([state] { FormatPendingRead::RunOne(state); });
    };
    {
      absl::MutexLock lock(&state->mu);
      state->starter = std::this_thread::get_id();
    }
    ds_->ReadSamplesAsync(
        std::vector<uint64_t>(indices.begin(), indices.end()),
        [state](absl::StatusOr<std::vector<format::Sample>> result) {
          absl::MutexLock lock(&state->mu);
          state->result = std::move(result);
        },
        run_decode);
    {
      absl::MutexLock lock(&state->mu);
      state->starter.reset();
    }
    return pending;
  }
  absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const override {
    std::vector<uint64_t> wanted(indices.begin(), indices.end());
    ASSIGN_OR_RETURN(std::vector<format::Sample> samples, ds_->ReadSamples(wanted));
    std::vector<Element> out;
    out.reserve(samples.size());
    for (format::Sample& s : samples) {
      ASSIGN_OR_RETURN(Element e, ToElement(std::move(s)));
      out.push_back(std::move(e));
    }
    return out;
  }

 private:
  std::shared_ptr<format::ShardedDataset> ds_;
  std::shared_ptr<io::CachedStore> cached_;  // null: reads go straight to the store
};

class FormatStream : public ElementStream {
 public:
  FormatStream(std::unique_ptr<format::SampleStream> s,
               std::shared_ptr<format::CorruptionReport> report)
      : s_(std::move(s)), report_(std::move(report)) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    ASSIGN_OR_RETURN(std::optional<format::Sample> s, s_->Next());
    if (!s) return std::nullopt;
    ASSIGN_OR_RETURN(Element e, ToElement(std::move(*s)));
    return e;
  }
  int64_t skipped() const override { return static_cast<int64_t>(report_->count()); }

 private:
  std::unique_ptr<format::SampleStream> s_;
  std::shared_ptr<format::CorruptionReport> report_;
};

class FormatStreamSource : public StreamSource {
 public:
  FormatStreamSource(std::vector<std::string> urls, bool tar, bool skip_corrupt, int read_ahead)
      : urls_(std::move(urls)), tar_(tar), skip_corrupt_(skip_corrupt), read_ahead_(read_ahead) {}
  int num_shards() const override { return static_cast<int>(urls_.size()); }
  absl::StatusOr<std::unique_ptr<ElementStream>> OpenShard(int shard) const override {
    format::StreamOptions options;
    options.format = tar_ ? format::StreamFormat::kTar : format::StreamFormat::kTfRecord;
    options.on_corrupt = skip_corrupt_ ? format::OnCorrupt::kSkip : format::OnCorrupt::kFail;
    options.report = std::make_shared<format::CorruptionReport>();
    options.read_ahead = read_ahead_;
    ASSIGN_OR_RETURN(auto s, format::OpenSampleStream(urls_[shard], options));
    return std::unique_ptr<ElementStream>(new FormatStream(std::move(s), options.report));
  }

 private:
  std::vector<std::string> urls_;
  bool tar_;
  bool skip_corrupt_;
  int read_ahead_;
};

}  // namespace

namespace {

bool IsNetworkUrl(std::string_view url) {
  return url.starts_with("s3://") || url.starts_with("http://") || url.starts_with("https://");
}

// The dataset's bytes from its manifest (or the shard's size), or nullopt when they cannot be
// read here (ShardedDataset::Open then reports the problem).
std::optional<uint64_t> DatasetBytes(io::ObjectStore& store, const std::string& key) {
  if (key.ends_with(".stk")) {
    auto info = store.Stat(key);
    return info.ok() ? std::optional<uint64_t>(info->size) : std::nullopt;
  }
  std::string manifest_key = key;
  if (!key.ends_with(format::kManifestName)) {
    manifest_key = StrCat(key, key.empty() || key.ends_with("/") ? "" : "/", format::kManifestName);
  }
  auto bytes = store.Read(manifest_key);
  if (!bytes.ok()) return std::nullopt;
  auto manifest = format::ParseManifest(bytes->view(), store.Url(manifest_key));
  return manifest.ok() ? std::optional<uint64_t>(manifest->total_bytes) : std::nullopt;
}

absl::StatusOr<std::shared_ptr<io::BlockCache>> CacheFor(int64_t cache_bytes) {
  if (cache_bytes <= 0) return io::DefaultBlockCache();
  io::BlockCacheOptions options;
  options.memory_bytes = static_cast<uint64_t>(cache_bytes);
  if (const char* dir = std::getenv("STOKER_CACHE_DIR")) options.disk_dir = dir;
  if (const char* text = std::getenv("STOKER_CACHE_DISK_BYTES")) {
    auto parsed = ParseByteSize(text);
    if (parsed.ok()) options.disk_bytes = *parsed;
  }
  return io::BlockCache::Create(options);
}

}  // namespace

absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(
    const std::string& url, const DatasetSourceOptions& source_options) {
  format::DatasetOptions options;
  options.on_corrupt =
      source_options.skip_corrupt ? format::OnCorrupt::kSkip : format::OnCorrupt::kFail;
  if (source_options.direct_io == "on") options.direct_io = format::DatasetOptions::DirectIo::kOn;
  if (source_options.direct_io == "off") {
    options.direct_io = format::DatasetOptions::DirectIo::kOff;
  }
  std::shared_ptr<io::CachedStore> cached;
  if (source_options.cache != "off" && IsNetworkUrl(url)) {
    ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
    ASSIGN_OR_RETURN(std::shared_ptr<io::BlockCache> cache, CacheFor(source_options.cache_bytes));
    bool use = source_options.cache == "on";
    if (!use) {
      std::optional<uint64_t> bytes = DatasetBytes(*target.store, target.key);
      const uint64_t budget = cache->memory_budget() + cache->disk_budget();
      use = bytes.has_value() && *bytes <= budget;
      if (bytes.has_value() && !use) {
        spdlog::info("{}: {} bytes do not fit in the block cache ({} bytes): reading without it",
                     url, *bytes, budget);
      }
    }
    if (use) {
      // A dataset is read as the version opened (its sample directory comes from those shard
      // footers): Stats are kept for good, and a shard that changes under the pipeline fails
      // the read (FailedPrecondition) rather than starting over.
      io::CachedStoreOptions cached_options;
      cached_options.stat_ttl = absl::InfiniteDuration();
      cached_options.restart_on_change = false;
      cached = std::make_shared<io::CachedStore>(target.store, std::move(cache), cached_options);
      // Samples are read one range each, never merged with their neighbours: the cache fetches
      // whole blocks from the store anyway (one request per run of missing blocks), and a range
      // merged across blocks is one copy of every byte it spans, holes included. Read one by
      // one, a sample inside a block is a slice of it, and only one that straddles two blocks
      // is copied (measured: epoch 2 from the cache spent 40% of its CPU copying merged
      // ranges of up to 8 MB for 100 KB samples).
      io::ReaderOptions reader;
      reader.max_hole = 0;
      reader.max_coalesced = cached_options.block_size;
      options.reader = reader;
      ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
                       format::ShardedDataset::Open(cached, target.key, options));
      return std::shared_ptr<IndexedSource>(new FormatIndexedSource(std::move(ds), cached));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
                   format::ShardedDataset::Open(url, options));
  return std::shared_ptr<IndexedSource>(new FormatIndexedSource(std::move(ds), nullptr));
}

absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt,
                                                               int read_ahead) {
  return std::shared_ptr<StreamSource>(
      new FormatStreamSource(std::move(urls), tar, skip_corrupt, read_ahead));
}

#else

absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(
    const std::string& url, const DatasetSourceOptions& source_options) {
  return absl::UnimplementedError(
      StrCat("cannot open '", url, "': this build has no shard format layer (stoker_format)"));
}

absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt,
                                                               int read_ahead) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}

#endif

}  // namespace stoker::data
