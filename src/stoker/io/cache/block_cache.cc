#include "stoker/io/cache/block_cache.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "stoker/core/byte_size.h"
#include "stoker/core/logging.h"
#include "stoker/core/strings.h"
#include "stoker/io/cache/disk_tier.h"

namespace stoker::io {

namespace {

// The owner of a cached block's bytes (as inserted) and of its verified ranges (IsVerified). It is
// found from any slice of the block through the type of its deleter, which also holds it, so a
// Buffer whose owner aliases another object is never mistaken for it.
struct CachedBytes {
  explicit CachedBytes(Buffer b) : block(std::move(b)) {}
  const Buffer block;
  absl::Mutex mu;
  // (offset in the block << 32) | length.
  absl::flat_hash_set<uint64_t> verified ABSL_GUARDED_BY(mu);
};

struct CachedBytesDeleter {
  CachedBytes* bytes;
  void operator()(const void*) const { delete bytes; }
};

// `block`'s bytes owned through a CachedBytes (no copy).
Buffer WrapCached(Buffer block) {
  const uint8_t* data = block.data();
  const size_t size = block.size();
  auto* bytes = new CachedBytes(std::move(block));
  std::shared_ptr<const void> owner(bytes, CachedBytesDeleter{bytes});
  return Buffer::Wrap(std::move(owner), data, size);
}

// The key of `range` in its cached block's verified set, or nullopt when it is not a markable
// range of a cached block.
std::optional<std::pair<CachedBytes*, uint64_t>> VerifiedKey(const Buffer& range) {
  if (range.size() < kMinVerifiedRangeBytes || range.owner() == nullptr) return std::nullopt;
  const auto* deleter = std::get_deleter<CachedBytesDeleter>(range.owner());
  if (deleter == nullptr) return std::nullopt;
  CachedBytes* bytes = deleter->bytes;
  const uint8_t* begin = bytes->block.data();
  if (range.data() < begin || range.data() + range.size() > begin + bytes->block.size()) {
    return std::nullopt;
  }
  const uint64_t offset = static_cast<uint64_t>(range.data() - begin);
  if (offset >= (uint64_t{1} << 32) || range.size() >= (uint64_t{1} << 32)) return std::nullopt;
  return std::make_pair(bytes, (offset << 32) | range.size());
}

}  // namespace

bool IsVerified(const Buffer& bytes) {
  auto key = VerifiedKey(bytes);
  if (!key.has_value()) return false;
  absl::MutexLock lock(&key->first->mu);
  return key->first->verified.contains(key->second);
}

void MarkVerified(const Buffer& bytes) {
  auto key = VerifiedKey(bytes);
  if (!key.has_value()) return;
  absl::MutexLock lock(&key->first->mu);
  key->first->verified.insert(key->second);
}

struct BlockCache::Entry {
  BlockKey key;
  Buffer data;
  int pins = 0;  // guarded by the cache's mu_: handles holding this entry
};

BlockCache::Handle& BlockCache::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = other.cache_;
    entry_ = std::move(other.entry_);
    other.cache_ = nullptr;
  }
  return *this;
}

const Buffer& BlockCache::Handle::data() const { return entry_->data; }

void BlockCache::Handle::Release() {
  if (entry_ == nullptr) return;
  cache_->Unpin(entry_.get());
  entry_.reset();
  cache_ = nullptr;
}

absl::StatusOr<std::shared_ptr<BlockCache>> BlockCache::Create(BlockCacheOptions options) {
  std::unique_ptr<DiskTier> disk;
  if (!options.disk_dir.empty()) {
    auto opened = DiskTier::Open(options.disk_dir, options.disk_bytes);
    if (!opened.ok()) return opened.status();
    disk = *std::move(opened);
  }
  auto cache = std::shared_ptr<BlockCache>(new BlockCache(options.memory_bytes, std::move(disk)));
  if (cache->disk_ != nullptr) cache->disk_budget_ = options.disk_bytes;
  return cache;
}

BlockCache::BlockCache(uint64_t memory_bytes) : BlockCache(memory_bytes, nullptr) {}

BlockCache::BlockCache(uint64_t memory_bytes, std::unique_ptr<DiskTier> disk)
    : memory_budget_(memory_bytes), disk_(std::move(disk)) {
  if (disk_ != nullptr) disk_writer_ = std::make_unique<ThreadPool>("cache-disk", 1);
}

BlockCache::~BlockCache() {
  disk_writer_.reset();  // runs the queued writes, then joins
}

BlockCache::Handle BlockCache::PinIfCachedLocked(const BlockKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return Handle();
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);  // most recently used
  ++(*it->second)->pins;
  return Handle(this, *it->second);
}

BlockCache::Handle BlockCache::Lookup(const BlockKey& key) {
  {
    absl::MutexLock lock(&mu_);
    if (Handle handle = PinIfCachedLocked(key)) return handle;
  }
  if (disk_ != nullptr) {
    if (std::optional<Buffer> data = disk_->Read(key)) {
      absl::MutexLock lock(&mu_);
      ++stats_.hits;
      ++stats_.disk_hits;
      return InsertLocked(key, *std::move(data));
    }
  }
  absl::MutexLock lock(&mu_);
  ++stats_.misses;
  return Handle();
}

BlockCache::Handle BlockCache::Insert(const BlockKey& key, Buffer block) {
  Handle handle;
  {
    absl::MutexLock lock(&mu_);
    handle = InsertLocked(key, block);
  }
  QueueDiskWrite(key, std::move(block));
  return handle;
}

BlockCache::Outcome BlockCache::LookupOrFetch(const BlockKey& key, Handle* hit, Waiter waiter) {
  {
    absl::MutexLock lock(&mu_);
    if ((*hit = PinIfCachedLocked(key))) return Outcome::kHit;
    auto pending = pending_.find(key);
    if (pending != pending_.end()) {
      ++stats_.joined;
      pending->second.push_back(std::move(waiter));
      return Outcome::kJoined;
    }
    pending_[key];  // this caller fetches; later callers join
  }
  if (disk_ != nullptr) {
    if (std::optional<Buffer> data = disk_->Read(key)) {
      std::vector<Waiter> waiters;
      std::vector<Handle> handles;
      {
        absl::MutexLock lock(&mu_);
        ++stats_.hits;
        ++stats_.disk_hits;
        *hit = InsertLocked(key, *std::move(data));
        auto pending = pending_.find(key);
        waiters = std::move(pending->second);
        pending_.erase(pending);
        for (size_t i = 0; i < waiters.size(); ++i) {
          ++hit->entry_->pins;
          handles.push_back(Handle(this, hit->entry_));
        }
      }
      for (size_t i = 0; i < waiters.size(); ++i) std::move(waiters[i])(std::move(handles[i]));
      return Outcome::kHit;
    }
  }
  absl::MutexLock lock(&mu_);
  ++stats_.misses;
  return Outcome::kFetch;
}

BlockCache::Handle BlockCache::Fulfill(const BlockKey& key, Buffer block) {
  Handle handle;
  std::vector<Waiter> waiters;
  std::vector<Handle> handles;
  {
    absl::MutexLock lock(&mu_);
    handle = InsertLocked(key, block);
    auto pending = pending_.find(key);
    if (pending != pending_.end()) {
      waiters = std::move(pending->second);
      pending_.erase(pending);
    }
    for (size_t i = 0; i < waiters.size(); ++i) {
      ++handle.entry_->pins;
      handles.push_back(Handle(this, handle.entry_));
    }
  }
  QueueDiskWrite(key, std::move(block));
  for (size_t i = 0; i < waiters.size(); ++i) std::move(waiters[i])(std::move(handles[i]));
  return handle;
}

void BlockCache::Abandon(const BlockKey& key, const absl::Status& status) {
  std::vector<Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    auto pending = pending_.find(key);
    if (pending == pending_.end()) return;
    waiters = std::move(pending->second);
    pending_.erase(pending);
  }
  for (Waiter& waiter : waiters) std::move(waiter)(status);
}

BlockCache::Handle BlockCache::InsertLocked(const BlockKey& key, Buffer block) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    usage_ -= (*it->second)->data.size();
    lru_.erase(it->second);
    map_.erase(it);
  }
  auto entry = std::make_shared<Entry>();
  entry->key = key;
  entry->data = WrapCached(std::move(block));
  entry->pins = 1;
  usage_ += entry->data.size();
  lru_.push_front(entry);
  map_[key] = lru_.begin();
  EvictLocked();
  return Handle(this, std::move(entry));
}

// Drops unpinned blocks from the cold end until the budget holds (or only pinned ones remain).
void BlockCache::EvictLocked() {
  auto it = lru_.end();
  while (usage_ > memory_budget_ && it != lru_.begin()) {
    --it;
    Entry* entry = it->get();
    if (entry->pins > 0) continue;
    usage_ -= entry->data.size();
    ++stats_.evictions;
    map_.erase(entry->key);
    it = lru_.erase(it);
  }
}

void BlockCache::Unpin(Entry* entry) {
  absl::MutexLock lock(&mu_);
  if (--entry->pins == 0 && usage_ > memory_budget_) EvictLocked();
}

void BlockCache::QueueDiskWrite(const BlockKey& key, Buffer block) {
  if (disk_writer_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    ++disk_writes_queued_;
  }
  disk_writer_->Schedule([this, key, block = std::move(block)] {
    absl::Status status = disk_->Write(key, block);
    if (!status.ok()) spdlog::warn("block cache: {}", status.ToString());
    absl::MutexLock lock(&mu_);
    if (!status.ok()) ++stats_.disk_write_errors;
    if (--disk_writes_queued_ == 0) disk_idle_.SignalAll();
  });
}

void BlockCache::EraseObject(std::string_view url) {
  {
    absl::MutexLock lock(&mu_);
    for (auto it = lru_.begin(); it != lru_.end();) {
      if ((*it)->key.url == url) {
        usage_ -= (*it)->data.size();
        map_.erase((*it)->key);
        it = lru_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (disk_ != nullptr) {
    Flush();  // a queued write of the old version must not land after the erase
    disk_->EraseObject(url);
  }
}

void BlockCache::Flush() {
  absl::MutexLock lock(&mu_);
  while (disk_writes_queued_ > 0) disk_idle_.Wait(&mu_);
}

BlockCacheStats BlockCache::stats() const {
  BlockCacheStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
    stats.memory_bytes = usage_;
    stats.memory_blocks = map_.size();
  }
  if (disk_ != nullptr) {
    stats.disk_bytes = disk_->bytes();
    stats.disk_evictions = disk_->evictions();
  }
  return stats;
}

namespace {
uint64_t ByteSizeFromEnv(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  auto parsed = stoker::ParseByteSize(text);
  if (!parsed.ok()) {
    spdlog::warn("{}: {}; using {} bytes", name, ToStd(parsed.status().message()), fallback);
    return fallback;
  }
  return *parsed;
}
}  // namespace

std::shared_ptr<BlockCache> DefaultBlockCache() {
  static const std::shared_ptr<BlockCache> cache = [] {
    InitLogging();
    BlockCacheOptions options;
    options.memory_bytes = ByteSizeFromEnv("STOKER_CACHE_BYTES", options.memory_bytes);
    const char* dir = std::getenv("STOKER_CACHE_DIR");
    if (dir != nullptr) options.disk_dir = dir;
    options.disk_bytes = ByteSizeFromEnv("STOKER_CACHE_DISK_BYTES", options.disk_bytes);
    auto created = BlockCache::Create(options);
    if (created.ok()) return *std::move(created);
    spdlog::warn("block cache: {}; going on without the disk tier",
                 ToStd(created.status().message()));
    return std::make_shared<BlockCache>(options.memory_bytes);
  }();
  return cache;
}

}  // namespace stoker::io
