#include "stoker/service/common/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "stoker/core/strings.h"

namespace stoker::service {
namespace {

std::string Errno() { return std::strerror(errno); }

uint64_t RoundUp(uint64_t size) {
  return (std::max<uint64_t>(size, 1) + ShmRing::kAlign - 1) / ShmRing::kAlign * ShmRing::kAlign;
}

std::atomic<int64_t> next_segment_id{1};

}  // namespace

std::optional<ShmRing::Slot> ShmRing::Allocate(uint64_t size) {
  size = RoundUp(size);
  if (size > capacity_) return std::nullopt;
  uint64_t offset = 0;
  if (entries_.empty()) {
    head_ = 0;
  } else {
    const uint64_t tail = entries_.front().offset;  // the oldest slot still tracked
    if (tail < head_) {
      // Free: [head_, capacity_) and [0, tail). Pages the ring has used come first: rather than
      // grow past its high-water mark it wraps to 0 once the space there holds the most that
      // was ever in flight (at least min_lap_) plus this allocation (a lap from 0 then has room
      // for what the consumer held at its peak), so a segment larger than the elements in flight
      // keeps reusing the same (mapped, cache-warm) pages instead of faulting in the whole
      // segment once per lap. The minimum keeps tiny elements from wrapping into a lap of a few
      // slots, which a consumer that comes to hold more would find full.
      if (head_ + size <= touched_)
        offset = head_;
      else if (size <= tail && tail >= std::max(peak_, min_lap_) + size)
        offset = 0;
      else if (head_ + size <= capacity_)
        offset = head_;
      else if (size <= tail)
        offset = 0;
      else
        return std::nullopt;
    } else {
      // Wrapped: free is [head_, tail) (tail == head_: full).
      if (head_ + size > tail) return std::nullopt;
      offset = head_;
    }
  }
  if (offset == 0 && !entries_.empty()) lap_end_ = head_;  // wrapped: the lap before ends here
  entries_.push_back({offset, size, false});
  head_ = offset + size;
  touched_ = std::max(touched_, head_);
  peak_ = std::max(peak_, used());
  ++live_;
  return Slot{first_id_ + static_cast<int64_t>(entries_.size()) - 1, offset};
}

bool ShmRing::Release(int64_t id) {
  if (id < first_id_ || id - first_id_ >= static_cast<int64_t>(entries_.size())) return false;
  Entry& e = entries_[static_cast<size_t>(id - first_id_)];
  if (e.released) return false;
  e.released = true;
  --live_;
  while (!entries_.empty() && entries_.front().released) {
    entries_.pop_front();
    ++first_id_;
  }
  return true;
}

uint64_t ShmRing::used() const {
  if (entries_.empty()) return 0;
  const uint64_t tail = entries_.front().offset;
  return tail < head_ ? head_ - tail : lap_end_ - tail + head_;
}

absl::StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Create(uint64_t size) {
  size = size / ShmRing::kAlign * ShmRing::kAlign;
  if (size == 0) return absl::InvalidArgumentError("shared-memory segment of 0 bytes");
  std::shared_ptr<ShmSegment> s(new ShmSegment(size));
  const int fd = memfd_create("stoker-elements", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::UnavailableError(StrCat("memfd_create: ", Errno()));
  s->info_.fd = fd;  // closed by the destructor from here on
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(size)) != 0)
    return absl::UnavailableError(StrCat("ftruncate of a memfd to ", size, " bytes: ", Errno()));
  // The consumer maps it at this size: it must never shrink under its mapping (SIGBUS).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return absl::UnavailableError(StrCat("sealing a memfd: ", Errno()));
  if (fstat(fd, &st) != 0) return absl::UnavailableError(StrCat("fstat of a memfd: ", Errno()));
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return absl::UnavailableError(StrCat("mmap of a ", size, "-byte memfd: ", Errno()));
  s->base_ = static_cast<uint8_t*>(base);
  s->info_.id = next_segment_id.fetch_add(1);
  s->info_.pid = getpid();
  s->info_.size = size;
  s->info_.inode = st.st_ino;
  return s;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, info_.size);
  if (info_.fd >= 0) close(static_cast<int>(info_.fd));
}

std::optional<ShmSegment::Ref> ShmSegment::Place(const std::vector<Buffer>& pieces, uint64_t size,
                                                 int64_t holder) {
  Ref ref;
  uint64_t populate_from = 0, populate_to = 0;
  {
    absl::MutexLock lock(&mu_);
    std::optional<ShmRing::Slot> slot = ring_.Allocate(size);
    if (!slot) return std::nullopt;
    ref = Ref{next_reference_++, slot->offset, slot->id};
    stored_.emplace(slot->id, Stored{slot->offset, 1});
    references_.emplace(ref.id, Held{slot->id, holder});
    if (slot->offset + size > populated_) {
      populate_from = populated_;
      populated_ = std::min<uint64_t>(
          info_.size, (slot->offset + size + kPopulateChunk - 1) / kPopulateChunk * kPopulateChunk);
      populate_to = populated_;
    }
  }
  // Space the ring has not used before: its pages are allocated in one call rather than by a
  // page fault each (with the copy below, about half the time of faulting 256 MiB in, on a
  // virtual machine). Without MADV_POPULATE_WRITE (Linux before 5.14) the copy faults them in.
  if (populate_to > populate_from)
    madvise(base_ + populate_from, populate_to - populate_from, MADV_POPULATE_WRITE);
  // The slot is this caller's alone until it returns the reference (Share needs `stored`, and
  // a consumer releases only what it was sent).
  uint8_t* out = base_ + ref.offset;
  for (const Buffer& b : pieces) {
    if (b.size() > 0) std::memcpy(out, b.data(), b.size());
    out += b.size();
  }
  return ref;
}

std::optional<ShmSegment::Ref> ShmSegment::Share(int64_t stored, int64_t holder) {
  absl::MutexLock lock(&mu_);
  auto it = stored_.find(stored);
  if (it == stored_.end()) return std::nullopt;
  ++it->second.references;
  Ref ref{next_reference_++, it->second.offset, stored};
  references_.emplace(ref.id, Held{stored, holder});
  return ref;
}

void ShmSegment::Release(int64_t id, int64_t holder) {
  absl::MutexLock lock(&mu_);
  auto it = references_.find(id);
  if (it == references_.end() || it->second.holder != holder) return;
  auto stored = stored_.find(it->second.stored);
  references_.erase(it);
  if (--stored->second.references > 0) return;
  ring_.Release(stored->first);
  stored_.erase(stored);
}

size_t ShmSegment::live_slots() const {
  absl::MutexLock lock(&mu_);
  return ring_.live();
}

std::optional<ShmSegment::Ref> ShmSharedCopy::Get(const std::shared_ptr<ShmSegment>& segment,
                                                  const std::vector<Buffer>& pieces, uint64_t size,
                                                  int64_t holder, bool* shared) {
  absl::MutexLock lock(&mu_);
  if (shared != nullptr) *shared = false;
  if (segment_ == segment) {
    if (auto ref = segment->Share(stored_, holder)) {
      if (shared != nullptr) *shared = true;
      return ref;
    }
  } else if (segment_ != nullptr && keeper_ != 0) {
    segment_->Release(keeper_, kKeeper);  // the job's segment was replaced
  }
  segment_.reset();
  keeper_ = 0;
  std::optional<ShmSegment::Ref> ref = segment->Place(pieces, size, holder);
  if (!ref) return std::nullopt;
  std::optional<ShmSegment::Ref> keeper = segment->Share(ref->stored, kKeeper);
  segment_ = segment;
  stored_ = ref->stored;
  keeper_ = keeper ? keeper->id : 0;
  return ref;
}

void ShmSharedCopy::Drop() {
  absl::MutexLock lock(&mu_);
  if (segment_ != nullptr && keeper_ != 0) segment_->Release(keeper_, kKeeper);
  keeper_ = 0;
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmMapping::Open(const ShmSegmentInfo& info) {
  const std::string path = StrCat("/proc/", info.pid, "/fd/", info.fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::UnavailableError(StrCat("opening the worker's shared memory ", path, ": ", Errno(),
                                         " (another user's process, or another PID "
                                         "namespace?)"));
  struct stat st {};
  const bool same = fstat(fd, &st) == 0 && st.st_ino == info.inode &&
                    static_cast<uint64_t>(st.st_size) == info.size;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (!same || seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    close(fd);
    return absl::UnavailableError(StrCat(path, " is not the worker's sealed segment (inode ",
                                         st.st_ino, ", expected ", info.inode, ")"));
  }
  void* base = mmap(nullptr, info.size, PROT_READ, MAP_SHARED, fd, 0);
  const std::string error = Errno();
  close(fd);  // the mapping keeps the memory
  if (base == MAP_FAILED) return absl::UnavailableError(StrCat("mmap of ", path, ": ", error));
  std::shared_ptr<ShmMapping> m(new ShmMapping(info));
  m->base_ = static_cast<const uint8_t*>(base);
  return m;
}

ShmMapping::~ShmMapping() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), info_.size);
}

absl::StatusOr<Buffer> ShmMapping::Slot(int64_t id, uint64_t offset, uint64_t length) {
  if (offset > info_.size || length > info_.size - offset)
    return absl::DataLossError(StrCat("slot ", id, " [", offset, ", +", length,
                                      ") is outside the worker's ", info_.size,
                                      "-byte shared-memory segment"));
  struct Hold {
    Hold(std::shared_ptr<ShmMapping> m, int64_t i) : mapping(std::move(m)), id(i) {}
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    std::shared_ptr<ShmMapping> mapping;
    int64_t id;
    ~Hold() {
      absl::MutexLock lock(&mapping->mu_);
      mapping->released_.push_back(id);
    }
  };
  auto hold = std::make_shared<const Hold>(shared_from_this(), id);
  return Buffer::Wrap(std::move(hold), base_ + offset, length);
}

std::vector<int64_t> ShmMapping::TakeReleased() {
  absl::MutexLock lock(&mu_);
  return std::exchange(released_, {});
}

void ShmMapping::Requeue(const std::vector<int64_t>& ids) {
  absl::MutexLock lock(&mu_);
  released_.insert(released_.end(), ids.begin(), ids.end());
}

const std::string& ShmHostIdentity() {
  static const std::string identity = [] {
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string id;
    if (!std::getline(boot, id) || id.empty()) return std::string();
    for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/pid"}) {
      char link[128];
      const ssize_t n = readlink(ns, link, sizeof(link));
      if (n <= 0) return std::string();
      id += ' ';
      id.append(link, static_cast<size_t>(n));
    }
    return id;
  }();
  return identity;
}

}  // namespace stoker::service
