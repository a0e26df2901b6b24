#include "stoker/io/cache/cached_store.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/range_util.h"

namespace stoker::io {
namespace {

// Stat results kept at most; beyond it expired entries are pruned.
constexpr size_t kMaxCachedStats = 100000;

// The version part of block keys: the ETag, or size and mtime for stores that cannot tell one.
std::string VersionOf(const ObjectInfo& info) {
  if (!info.etag.empty()) return info.etag;
  return StrCat("size=", info.size, ",mtime=", absl::ToUnixNanos(info.mtime));
}

class InvalidatingWriter : public ObjectWriter {
 public:
  InvalidatingWriter(std::unique_ptr<ObjectWriter> base, CachedStore* store, std::string key)
      : base_(std::move(base)), store_(store), key_(std::move(key)) {}
  absl::Status Append(Buffer data) override { return base_->Append(std::move(data)); }
  absl::Status Close() override {
    absl::Status status = base_->Close();
    store_->Invalidate(key_);
    return status;
  }

 private:
  std::unique_ptr<ObjectWriter> base_;
  CachedStore* store_;
  std::string key_;
};

// One ReadAsync: the blocks it needs, filled in as they arrive from the cache, from other
// callers' fetches, or from its own.
struct BlockRead {
  std::string url;
  ByteRange range;  // clamped to the object
  uint64_t first_block = 0;
  uint64_t block_size = 0;
  uint64_t object_size = 0;
  ReadCallback done;  // called once, by whoever delivers the last block
  // Set when a FailedPrecondition (the object changed) may start the read over; takes `done`.
  absl::AnyInvocable<void(ReadCallback)> retry;

  absl::Mutex mu;
  std::vector<Buffer> blocks ABSL_GUARDED_BY(mu);
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);

  uint64_t ExpectedSize(size_t i) const {
    uint64_t start = (first_block + i) * block_size;
    return std::min(block_size, object_size - start);
  }

  void Deliver(size_t i, absl::StatusOr<Buffer> block) {
    {
      absl::MutexLock lock(&mu);
      if (!block.ok()) {
        if (status.ok()) status = block.status();
      } else if (block->size() != ExpectedSize(i)) {
        if (status.ok()) {
          status = absl::DataLossError(StrCat("block ", first_block + i, " of ", url, " has ",
                                              block->size(), " bytes, expected ", ExpectedSize(i)));
        }
      } else {
        blocks[i] = *std::move(block);
      }
      if (--remaining > 0) return;
    }
    Finish();
  }

  void Finish() {
    absl::Status final_status;
    std::vector<Buffer> parts;
    {
      absl::MutexLock lock(&mu);
      final_status = status;
      parts = std::move(blocks);
    }
    if (!final_status.ok()) {
      if (final_status.code() == absl::StatusCode::kFailedPrecondition && retry) {
        std::move(retry)(std::move(done));
        return;
      }
      std::move(done)(final_status);
      return;
    }
    uint64_t skip = range.offset - first_block * block_size;
    if (parts.size() == 1) {
      std::move(done)(parts[0].Slice(skip, range.length));
      return;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      uint64_t start = (first_block + i) * block_size;
      uint64_t from = std::max(start, range.offset) - start;
      uint64_t to = std::min(start + parts[i].size(), range.offset + range.length) - start;
      parts[i] = parts[i].Slice(from, to - from);
    }
    std::move(done)(Buffer::Concat(parts));
  }
};

}  // namespace

CachedStore::CachedStore(std::shared_ptr<ObjectStore> base, std::shared_ptr<BlockCache> cache,
                         CachedStoreOptions options)
    : base_(std::move(base)), cache_(std::move(cache)), options_(options) {}

std::string CachedStore::Url(std::string_view key) const { return base_->Url(key); }

absl::StatusOr<ObjectInfo> CachedStore::StatCached(std::string_view key, bool fresh) {
  absl::Time now = absl::Now();
  if (!fresh) {
    absl::MutexLock lock(&mu_);
    auto it = stats_.find(key);
    if (it != stats_.end() && it->second.expires > now) return it->second.info;
  }
  ASSIGN_OR_RETURN(ObjectInfo info, base_->Stat(key));
  absl::MutexLock lock(&mu_);
  if (stats_.size() >= kMaxCachedStats) {
    for (auto it = stats_.begin(); it != stats_.end();) {
      it = it->second.expires <= now ? stats_.erase(it) : std::next(it);
    }
    if (stats_.size() >= kMaxCachedStats) stats_.clear();
  }
  stats_[std::string(key)] = CachedStat{info, now + options_.stat_ttl};
  return info;
}

void CachedStore::StatAsync(std::string key, StatCallback done) {
  std::move(done)(StatCached(key, /*fresh=*/false));
}

absl::StatusOr<ListResult> CachedStore::List(const ListOptions& options) {
  return base_->List(options);
}

void CachedStore::ReadAsync(ReadRequest request, ReadCallback done) {
  ReadWithRetry(std::move(request), std::move(done), /*may_retry=*/true);
}

CachedStoreStats CachedStore::stats() const {
  return CachedStoreStats{hits_.load(), misses_.load(), joined_.load(), fetched_bytes_.load()};
}

void CachedStore::ReadWithRetry(ReadRequest request, ReadCallback done, bool may_retry) {
  may_retry = may_retry && options_.restart_on_change;
  auto info = StatCached(request.key, /*fresh=*/!may_retry && options_.restart_on_change);
  if (info.ok() && !request.if_match.empty() && info->etag != request.if_match && may_retry) {
    info = StatCached(request.key, /*fresh=*/true);  // the cached Stat may be stale
  }
  if (!info.ok()) {
    std::move(done)(info.status());
    return;
  }
  std::string url = base_->Url(request.key);
  if (!request.if_match.empty() && info->etag != request.if_match) {
    std::move(done)(
        absl::FailedPreconditionError(StrCat(url, " changed while being read (ETag ", info->etag,
                                             ", expected ", request.if_match, ")")));
    return;
  }
  auto range = ClampRange(request.range, info->size, url);
  if (!range.ok() || range->length == 0) {
    std::move(done)(range.ok() ? absl::StatusOr<Buffer>(Buffer()) : range.status());
    return;
  }
  const uint64_t bs = std::max<uint64_t>(1, options_.block_size);
  auto read = std::make_shared<BlockRead>();
  read->url = url;
  read->range = *range;
  read->first_block = range->offset / bs;
  read->block_size = bs;
  read->object_size = info->size;
  uint64_t last_block = (range->offset + range->length - 1) / bs;
  size_t count = last_block - read->first_block + 1;
  {
    absl::MutexLock lock(&read->mu);
    read->blocks.resize(count);
    read->remaining = count;
  }
  if (may_retry && request.if_match.empty()) {
    // The object changed since the cached Stat: start over once with a fresh one.
    read->retry = [this, request](ReadCallback done) mutable {
      Invalidate(request.key);
      ReadWithRetry(std::move(request), std::move(done), /*may_retry=*/false);
    };
  }
  read->done = std::move(done);

  std::string version = VersionOf(*info);
  std::vector<uint64_t> missing;  // block numbers this read fetches
  std::vector<std::pair<size_t, Buffer>> hits;
  hits.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    BlockKey key{url, version, read->first_block + i};
    BlockCache::Handle hit;
    auto outcome =
        cache_->LookupOrFetch(key, &hit, [read, i](absl::StatusOr<BlockCache::Handle> h) {
          read->Deliver(i, h.ok() ? absl::StatusOr<Buffer>(h->data()) : h.status());
        });
    if (outcome == BlockCache::Outcome::kHit) hits.emplace_back(i, hit.data());
    if (outcome == BlockCache::Outcome::kFetch) missing.push_back(read->first_block + i);
    if (outcome == BlockCache::Outcome::kJoined) joined_.fetch_add(1);
  }
  hits_.fetch_add(hits.size());
  misses_.fetch_add(missing.size());
  for (auto& [i, block] : hits) read->Deliver(i, std::move(block));
  for (BlockRun& run : GroupRuns(request.key, *info, missing)) {
    FetchRun(
        std::move(run),
        [read](uint64_t block, absl::StatusOr<Buffer> data) {
          read->Deliver(block - read->first_block, std::move(data));
        },
        [] {});
  }
}

std::vector<CachedStore::BlockRun> CachedStore::GroupRuns(
    std::string_view key, const ObjectInfo& info, const std::vector<uint64_t>& blocks) const {
  const uint64_t bs = std::max<uint64_t>(1, options_.block_size);
  const uint64_t max_blocks = std::max<uint64_t>(1, options_.max_request_bytes / bs);
  std::vector<BlockRun> runs;
  for (uint64_t b : blocks) {
    if (!runs.empty() && runs.back().last_block + 1 == b &&
        b - runs.back().first_block < max_blocks) {
      runs.back().last_block = b;
      continue;
    }
    BlockRun run;
    run.key = std::string(key);
    run.url = base_->Url(key);
    run.version = VersionOf(info);
    run.if_match = info.etag;
    run.first_block = run.last_block = b;
    runs.push_back(std::move(run));
  }
  for (BlockRun& run : runs) {
    uint64_t start = run.first_block * bs;
    run.bytes = {start, std::min((run.last_block + 1) * bs, info.size) - start};
  }
  return runs;
}

absl::StatusOr<std::vector<CachedStore::BlockRun>> CachedStore::ClaimMissing(std::string_view key,
                                                                             ByteRange range) {
  ASSIGN_OR_RETURN(ObjectInfo info, StatCached(key, /*fresh=*/false));
  if (range.offset >= info.size || range.length == 0) return std::vector<BlockRun>();
  const uint64_t bs = std::max<uint64_t>(1, options_.block_size);
  const uint64_t end = range.length == ByteRange::kToEnd || range.length > info.size - range.offset
                           ? info.size
                           : range.offset + range.length;
  const std::string url = base_->Url(key);
  const std::string version = VersionOf(info);
  std::vector<uint64_t> claimed;
  for (uint64_t b = range.offset / bs; b <= (end - 1) / bs; ++b) {
    BlockCache::Handle hit;
    // Single flight: a block another read is fetching is left to it.
    auto outcome = cache_->LookupOrFetch({url, version, b}, &hit, [](auto) {});
    if (outcome == BlockCache::Outcome::kFetch) claimed.push_back(b);
  }
  return GroupRuns(key, info, claimed);
}

void CachedStore::FetchRun(BlockRun run, BlockCallback each_block,
                           absl::AnyInvocable<void() &&> done) {
  ReadRequest request{run.key, run.bytes, run.if_match};
  // The callback holds the cache: the first block it hands over may end the read whose caller
  // then destroys this store (and drops its cache), while the callback still fulfils and
  // unpins the run's other blocks. After that point it touches nothing of `this`.
  base_->ReadAsync(std::move(request), [this, cache = cache_, run = std::move(run),
                                        each_block = std::move(each_block), done = std::move(done)](
                                           absl::StatusOr<Buffer> data) mutable {
    const uint64_t start = run.bytes.offset, end = run.bytes.offset + run.bytes.length;
    if (data.ok()) fetched_bytes_.fetch_add(data->size());
    if (data.ok() && data->size() != run.bytes.length) {
      data = absl::DataLossError(StrCat("reading bytes [", start, ", ", end, ") of ", run.url,
                                        ": got ", data->size(), " bytes"));
    } else if (!data.ok() && data.status().code() != absl::StatusCode::kFailedPrecondition) {
      // (A changed object stays FailedPrecondition: a read starts over on it.)
      data = Annotate(data.status(), StrCat("reading bytes [", start, ", ", end, ") of ", run.url));
    }
    const uint64_t bs = std::max<uint64_t>(1, options_.block_size);
    for (uint64_t b = run.first_block; b <= run.last_block; ++b) {
      BlockKey key{run.url, run.version, b};
      if (!data.ok()) {
        cache->Abandon(key, data.status());
        if (each_block) each_block(b, data.status());
        continue;
      }
      Buffer block = data->Slice((b - run.first_block) * bs, bs);
      // A block cut from a larger response gets its own storage, so evicting it frees it.
      if (run.first_block != run.last_block) block = Buffer::Copy(block.view());
      // The cached bytes (not `block`): what a reader checks in them stays marked for later
      // reads of the block (IsVerified).
      BlockCache::Handle cached = cache->Fulfill(key, std::move(block));
      if (each_block) each_block(b, cached.data());
    }
    std::move(done)();
  });
}

absl::StatusOr<std::unique_ptr<ObjectWriter>> CachedStore::OpenWriter(std::string_view key) {
  ASSIGN_OR_RETURN(auto writer, base_->OpenWriter(key));
  return std::make_unique<InvalidatingWriter>(std::move(writer), this, std::string(key));
}

absl::Status CachedStore::Delete(std::string_view key) {
  absl::Status status = base_->Delete(key);
  Invalidate(key);
  return status;
}

void CachedStore::Invalidate(std::string_view key) {
  {
    absl::MutexLock lock(&mu_);
    auto it = stats_.find(key);
    if (it != stats_.end()) stats_.erase(it);
  }
  cache_->EraseObject(base_->Url(key));
}

}  // namespace stoker::io
