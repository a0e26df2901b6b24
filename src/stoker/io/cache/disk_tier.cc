#include "stoker/io/cache/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "stoker/core/fd_io.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/cache/block_cache.h"

namespace stoker::io {
namespace {

// File layout (host byte order; a cache folder is not meant to move between machines):
//   magic[8] | u32 url_len | u32 etag_len | u64 index | u64 data_len | u64 checksum(data)
//   | url | etag | data
constexpr char kMagic[8] = {'S', 'T', 'K', 'B', 'L', 'K', '1', '\n'};
struct Header {
  char magic[8];
  uint32_t url_len;
  uint32_t etag_len;
  uint64_t index;
  uint64_t data_len;
  uint64_t checksum;
};
static_assert(sizeof(Header) == 40);

constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kSuffix = ".blk";

std::string ErrnoText() { return std::strerror(errno); }

bool ReadFully(int fd, char* out, size_t n) {
  return ReadAll(fd, out, n) == static_cast<ssize_t>(n);
}

bool WriteFully(int fd, const char* data, size_t n) {
  return WriteAll(fd, std::string_view(data, n)) == 0;
}

}  // namespace

uint64_t StableHash64(std::string_view bytes) {
  // 8 bytes at a time with a multiply-rotate mix; the tail is folded in byte by byte.
  constexpr uint64_t kMul1 = 0x9E3779B97F4A7C15ull;
  constexpr uint64_t kMul2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t h = 0x243F6A8885A308D3ull ^ (bytes.size() * kMul1);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h ^= word * kMul2;
    h = ((h << 31) | (h >> 33)) * kMul1;
  }
  for (; i < bytes.size(); ++i) {
    h ^= static_cast<uint8_t>(bytes[i]);
    h *= kMul1;
  }
  h ^= h >> 29;
  h *= kMul2;
  h ^= h >> 32;
  return h;
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(std::string dir, uint64_t budget_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(StrCat("cannot create the block cache folder ", dir, ": ",
                                                ec.message(),
                                                "; check the path and its permissions"));
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(std::move(dir), budget_bytes));
  struct Found {
    std::string name;
    uint64_t size;
    std::filesystem::file_time_type mtime;
  };
  std::vector<Found> found;
  auto now = std::filesystem::file_time_type::clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(tier->dir_, ec)) {
    std::error_code entry_ec;
    if (!entry.is_regular_file(entry_ec)) continue;
    std::string name = entry.path().filename().string();
    auto mtime = entry.last_write_time(entry_ec);
    if (entry_ec) continue;
    if (name.starts_with(kTempPrefix)) {
      // An interrupted write; give a concurrent writer in another process ten minutes.
      if (now - mtime > std::chrono::minutes(10)) std::filesystem::remove(entry.path(), entry_ec);
      continue;
    }
    if (!name.ends_with(kSuffix)) continue;
    found.push_back({name, entry.file_size(entry_ec), mtime});
  }
  if (ec) {
    return absl::FailedPreconditionError(
        StrCat("cannot list the block cache folder ", tier->dir_, ": ", ec.message()));
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime > b.mtime; });
  std::vector<std::string> to_delete;
  {
    absl::MutexLock lock(&tier->mu_);
    for (Found& f : found) {
      tier->lru_.push_back(f.name);
      tier->files_[f.name] = File{f.size, std::prev(tier->lru_.end())};
      tier->bytes_ += f.size;
    }
    tier->EvictLocked(&to_delete);
  }
  for (const std::string& path : to_delete) ::unlink(path.c_str());
  return tier;
}

std::string DiskTier::FileName(const BlockKey& key) const {
  char name[64];
  std::snprintf(name, sizeof(name), "%016llx-%016llx-%llu",
                static_cast<unsigned long long>(StableHash64(key.url)),
                static_cast<unsigned long long>(StableHash64(key.etag)),
                static_cast<unsigned long long>(key.index));
  return StrCat(name, kSuffix);
}

std::optional<Buffer> DiskTier::Read(const BlockKey& key) {
  std::string name = FileName(key);
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(name);
    if (it == files_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  std::string path = StrCat(dir_, "/", name);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool valid = false;
  std::optional<Buffer> result;
  if (fd >= 0) {
    Header header;
    if (ReadFully(fd, reinterpret_cast<char*>(&header), sizeof(header)) &&
        std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 &&
        header.url_len == key.url.size() && header.etag_len == key.etag.size() &&
        header.index == key.index && header.data_len <= (uint64_t{1} << 40)) {
      std::string names(header.url_len + header.etag_len, '\0');
      MutableBuffer data(header.data_len);
      if (ReadFully(fd, names.data(), names.size()) && names == StrCat(key.url, key.etag) &&
          ReadFully(fd, data.chars(), data.size()) &&
          StableHash64(std::string_view(data.chars(), data.size())) == header.checksum) {
        char extra;
        valid = ::read(fd, &extra, 1) == 0;  // nothing after the data
        if (valid) result = std::move(data).Finish();
      }
    }
    ::close(fd);
  }
  if (!valid) {
    // Missing (deleted by another process), damaged, or another block's file under a colliding
    // name: forget it so the block is fetched again and rewritten.
    bool forget;
    {
      absl::MutexLock lock(&mu_);
      forget = ForgetLocked(name);
    }
    if (forget) ::unlink(path.c_str());
    return std::nullopt;
  }
  return result;
}

absl::Status DiskTier::Write(const BlockKey& key, const Buffer& data) {
  std::string name = FileName(key);
  std::string temp;
  {
    absl::MutexLock lock(&mu_);
    temp = StrCat(dir_, "/", kTempPrefix, ::getpid(), "-", next_temp_++);
  }
  Header header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.url_len = static_cast<uint32_t>(key.url.size());
  header.etag_len = static_cast<uint32_t>(key.etag.size());
  header.index = key.index;
  header.data_len = data.size();
  header.checksum = StableHash64(data.view());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        StrCat("cannot write block cache file ", temp, ": ", ErrnoText()));
  }
  bool ok = WriteFully(fd, reinterpret_cast<const char*>(&header), sizeof(header)) &&
            WriteFully(fd, key.url.data(), key.url.size()) &&
            WriteFully(fd, key.etag.data(), key.etag.size()) &&
            WriteFully(fd, data.chars(), data.size());
  std::string error = ok ? "" : ErrnoText();
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = ErrnoText();
  }
  std::string path = StrCat(dir_, "/", name);
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ok = false;
    error = ErrnoText();
  }
  if (!ok) {
    ::unlink(temp.c_str());
    return absl::UnavailableError(StrCat("cannot write block cache file ", path, ": ", error));
  }
  uint64_t size = sizeof(header) + key.url.size() + key.etag.size() + data.size();
  std::vector<std::string> to_delete;
  {
    absl::MutexLock lock(&mu_);
    ForgetLocked(name);  // the file the rename replaced
    lru_.push_front(name);
    files_[name] = File{size, lru_.begin()};
    bytes_ += size;
    EvictLocked(&to_delete);
  }
  for (const std::string& victim : to_delete) ::unlink(victim.c_str());
  return absl::OkStatus();
}

bool DiskTier::ForgetLocked(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) return false;
  bytes_ -= it->second.size;
  lru_.erase(it->second.lru);
  files_.erase(it);
  return true;
}

void DiskTier::EvictLocked(std::vector<std::string>* to_delete) {
  while (bytes_ > budget_ && !lru_.empty()) {
    std::string victim = lru_.back();
    lru_.pop_back();
    auto it = files_.find(victim);
    bytes_ -= it->second.size;
    files_.erase(it);
    ++evictions_;
    to_delete->push_back(StrCat(dir_, "/", victim));
  }
}

void DiskTier::EraseObject(std::string_view url) {
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "%016llx-",
                static_cast<unsigned long long>(StableHash64(url)));
  std::vector<std::string> to_delete;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = files_.lower_bound(prefix);
         it != files_.end() && it->first.starts_with(prefix);) {
      bytes_ -= it->second.size;
      lru_.erase(it->second.lru);
      to_delete.push_back(StrCat(dir_, "/", it->first));
      it = files_.erase(it);
    }
  }
  for (const std::string& path : to_delete) ::unlink(path.c_str());
}

uint64_t DiskTier::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}
uint64_t DiskTier::files() const {
  absl::MutexLock lock(&mu_);
  return files_.size();
}
uint64_t DiskTier::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

}  // namespace stoker::io
