#include "stoker/io/local/local_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "stoker/core/mapped_files.h"

namespace stoker::io::local_internal {
namespace {

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// Whether mincore reports this file's page-cache residency truthfully: the kernel does so for a
// caller that owns the file, is privileged, or may open it for writing; for anyone else it
// reports every page resident (mm/mincore.c, can_do_mincore).
bool MincoreTellsResidency(const OpenFile& file) {
  struct stat st;
  if (::fstat(file.fd, &st) != 0) return false;
  uid_t euid = ::geteuid();
  if (euid == 0 || st.st_uid == euid) return true;
  return ::faccessat(AT_FDCWD, file.path.c_str(), W_OK, AT_EACCESS) == 0;
}

// cachestat(2) (Linux 6.5; the same number on every architecture), not in older headers.
constexpr long kCachestatSyscall = 451;
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

// Set once cachestat is found missing (or forced off by a test): mincore from then on.
std::atomic<bool>& NoCachestat() {
  static std::atomic<bool> no{false};
  return no;
}

}  // namespace

void UseMincoreForTesting(bool on) { NoCachestat().store(on, std::memory_order_relaxed); }

FileMapping::~FileMapping() {
  if (data != nullptr && fd >= 0) UnregisterMappedFile(data);
  if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), size);
  if (fd >= 0) ::close(fd);
}

std::shared_ptr<const FileMapping> FileMappings::Get(const OpenFile& file) {
  if (!file.error.ok() || file.direct || file.size < kMinMappedFileBytes) return nullptr;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = files_.begin(); it != files_.end(); ++it) {
      if (it->first != file.path) continue;
      if (it->second->etag != file.etag) {
        files_.erase(it);  // a new version: slices of the old one keep it mapped
        break;
      }
      std::shared_ptr<const FileMapping> found = it->second;
      files_.splice(files_.begin(), files_, it);
      return found->data != nullptr ? found : nullptr;
    }
  }
  auto mapping = std::make_shared<FileMapping>();
  mapping->etag = file.etag;
  if (MincoreTellsResidency(file)) {
    void* addr = ::mmap(nullptr, file.size, PROT_READ, MAP_SHARED, file.fd, 0);
    if (addr != MAP_FAILED) {
      // Only resident pages are touched; a page evicted after the check should not pull in its
      // neighbours too.
      ::madvise(addr, file.size, MADV_RANDOM);
      mapping->data = static_cast<const uint8_t*>(addr);
      mapping->size = file.size;
      struct stat st;
      const int fd = ::fcntl(file.fd, F_DUPFD_CLOEXEC, 0);
      if (fd >= 0 && ::fstat(fd, &st) == 0) {
        mapping->fd = fd;
        RegisterMappedFile(mapping->data, mapping->size, fd, static_cast<uint64_t>(st.st_dev),
                           static_cast<uint64_t>(st.st_ino));
      } else if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  files_.emplace_front(file.path, mapping);
  while (files_.size() > max_files_) files_.pop_back();
  return mapping->data != nullptr ? mapping : nullptr;
}

bool Resident(const OpenFile& file, const FileMapping& mapping, uint64_t offset, uint64_t length) {
  if (length == 0) return true;
  const uint64_t page = PageSize();
  uint64_t first = offset / page * page;
  uint64_t end = std::min(offset + length, mapping.size);
  if (!NoCachestat().load(std::memory_order_relaxed)) {
    CachestatRange range{first, end - first};
    Cachestat stat{};
    if (::syscall(kCachestatSyscall, file.fd, &range, &stat, 0) == 0) {
      return stat.nr_cache >= (end - first + page - 1) / page;
    }
    // ENOSYS: an older kernel; EPERM: a kernel that hides this file's residency. mincore then
    // (MincoreTellsResidency said it tells this file's residency truthfully).
    if (errno == ENOSYS || errno == EPERM) NoCachestat().store(true, std::memory_order_relaxed);
  }
  size_t pages = static_cast<size_t>((end - first + page - 1) / page);
  unsigned char small[64];
  std::vector<unsigned char> large;
  unsigned char* vec = small;
  if (pages > sizeof(small)) {
    large.resize(pages);
    vec = large.data();
  }
  if (::mincore(const_cast<uint8_t*>(mapping.data + first), end - first, vec) != 0) return false;
  for (size_t i = 0; i < pages; ++i) {
    if ((vec[i] & 1) == 0) return false;
  }
  return true;
}

}  // namespace stoker::io::local_internal
