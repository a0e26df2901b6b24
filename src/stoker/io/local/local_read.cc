#include "stoker/io/local/local_read.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "stoker/core/logging.h"
#include "stoker/core/thread.h"
#include "stoker/core/thread_pool.h"

namespace stoker::io::local_internal {

absl::Status ErrnoError(int err, std::string_view what, std::string_view path) {
  std::string message = StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string EtagOf(const struct stat& st) {
  return StrCat(st.st_size, "-", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "-", st.st_ino);
}

void LogOnce(std::once_flag& flag, std::string message) {
  std::call_once(flag, [&] { spdlog::warn("{}", message); });
}

namespace {

// The offset alignment O_DIRECT reads of `fd` need (statx STATX_DIOALIGN), when the kernel says
// and it divides kDirectAlign (the alignment of the pool's blocks); else kDirectAlign. Reading
// a record widened to 512 bytes instead of 4096 reads ~0.5 KiB more than the record on average
// instead of ~4 KiB (P12: 100 KiB samples, docs/reads.md "Direct I/O").
uint64_t DirectAlignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx st;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) == 0 &&
      (st.stx_mask & STATX_DIOALIGN) != 0) {
    uint64_t offset = st.stx_dio_offset_align, memory = st.stx_dio_mem_align;
    bool power_of_two = offset != 0 && (offset & (offset - 1)) == 0;
    if (power_of_two && kDirectAlign % offset == 0 && memory != 0 && kDirectAlign % memory == 0) {
      return offset;
    }
  }
#endif
  return kDirectAlign;
}

}  // namespace

std::shared_ptr<OpenFile> OpenForRead(std::string path, bool direct) {
  auto file = std::make_shared<OpenFile>();
  file->path = std::move(path);
  int flags = O_RDONLY | O_CLOEXEC;
  int fd = direct ? ::open(file->path.c_str(), flags | O_DIRECT) : -1;
  if (direct && fd < 0 && errno == EINVAL) {
    static std::once_flag logged;
    LogOnce(logged, StrCat("the file system of ", file->path,
                           " does not support O_DIRECT; reading through the page cache"));
  }
  file->direct = fd >= 0;
  if (fd < 0) fd = ::open(file->path.c_str(), flags);
  if (fd < 0) {
    file->error = ErrnoError(errno, "cannot open", file->path);
    return file;
  }
  file->fd = fd;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    file->error = ErrnoError(errno, "cannot stat", file->path);
  } else if (S_ISDIR(st.st_mode)) {
    file->error = absl::NotFoundError(StrCat(file->path, " is a directory"));
  } else {
    file->size = static_cast<uint64_t>(st.st_size);
    file->etag = EtagOf(st);
  }
  if (file->direct) file->direct_align = DirectAlignment(fd);
  return file;
}

namespace {

int InjectedErrno(const LocalStoreOptions& options, const LocalRead& read) {
  if (!options.inject_error) return 0;
  return options.inject_error(read.file->path, read.start + read.got);
}

}  // namespace

void PreadAll(const LocalStoreOptions& options, LocalRead& read) {
  while (true) {
    int injected = InjectedErrno(options, read);
    int64_t n = injected != 0
                    ? -injected
                    : ::pread(read.file->fd, read.block.data() + read.got, read.length - read.got,
                              static_cast<off_t>(read.start + read.got));
    if (n < 0 && injected == 0) n = -errno;
    if (read.Advance(n)) return;
  }
}

bool ReadFromPageCache(LocalRead& read) {
  // Kernels or file systems without RWF_NOWAIT for buffered reads say so once; then never again.
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return false;
  while (true) {
    iovec iov{read.block.data() + read.got, read.length - read.got};
    ssize_t n =
        ::preadv2(read.file->fd, &iov, 1, static_cast<off_t>(read.start + read.got), RWF_NOWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return false;  // not (all) in the page cache
      if (errno == EOPNOTSUPP || errno == EINVAL) {
        unsupported.store(true, std::memory_order_relaxed);
        return false;
      }
      n = -errno;
    }
    if (read.Advance(n)) return true;
  }
}

namespace {

// pread on a thread pool: one request per thread at a time.
class PreadEngine : public ReadEngine {
 public:
  PreadEngine(const LocalStoreOptions& options, int threads)
      : options_(options), pool_("local-io", threads) {}
  std::string_view name() const override { return "pread"; }

  void Submit(std::vector<std::unique_ptr<LocalRead>> reads) override {
    for (auto& read : reads) {
      pool_.Schedule([this, read = std::move(read)]() mutable {
        PreadAll(options_, *read);
        read->Complete();
      });
    }
  }

 private:
  const LocalStoreOptions& options_;
  ThreadPool pool_;
};

// io_uring: one ring per thread. Producers queue reads and wake the ring's thread through an
// eventfd that the ring itself reads (so the thread sleeps in one place: io_uring_enter).
class UringEngine : public ReadEngine {
 public:
  static absl::StatusOr<std::unique_ptr<UringEngine>> Create(const LocalStoreOptions& options,
                                                             int threads) {
    auto engine = std::unique_ptr<UringEngine>(new UringEngine(options));
    for (int i = 0; i < threads; ++i) {
      auto ring = std::make_unique<Ring>();
      int err = io_uring_queue_init(options.ring_entries, &ring->ring, 0);
      if (err < 0) {
        return absl::UnavailableError(
            StrCat("io_uring_queue_init(", options.ring_entries, "): ", std::strerror(-err)));
      }
      ring->initialised = true;
      io_uring_probe* probe = io_uring_get_probe_ring(&ring->ring);
      bool read_supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ);
      if (probe != nullptr) io_uring_free_probe(probe);
      if (!read_supported) {
        return absl::UnavailableError("the kernel's io_uring has no IORING_OP_READ");
      }
      ring->wake_fd = ::eventfd(0, EFD_CLOEXEC);
      if (ring->wake_fd < 0) return ErrnoError(errno, "cannot create", "an eventfd");
      ring->entries = options.ring_entries;
      engine->rings_.push_back(std::move(ring));
    }
    for (size_t i = 0; i < engine->rings_.size(); ++i) {
      Ring* ring = engine->rings_[i].get();
      ring->thread = StartThread(StrCat("local-uring-", i),
                                 [engine = engine.get(), ring] { engine->Loop(*ring); });
    }
    return engine;
  }

  ~UringEngine() override {
    for (auto& ring : rings_) {
      {
        absl::MutexLock lock(&ring->mu);
        ring->stopping = true;
      }
      Wake(*ring);
    }
    for (auto& ring : rings_) {
      if (ring->thread.joinable()) ring->thread.join();
    }
  }

  std::string_view name() const override { return "io_uring"; }

  void Submit(std::vector<std::unique_ptr<LocalRead>> reads) override {
    if (reads.empty()) return;
    // A small batch goes to one ring (the caller's own, when a callback submits more); a large
    // one is spread over every ring, so that page-cache copies run on several cores.
    size_t rings = reads.size() < 16 ? 1 : rings_.size();
    size_t per_ring = (reads.size() + rings - 1) / rings;
    size_t first = current_ != nullptr && current_->owner == this
                       ? current_->index
                       : next_.fetch_add(1, std::memory_order_relaxed) % rings_.size();
    for (size_t r = 0; r < rings; ++r) {
      Ring& ring = *rings_[(first + r) % rings_.size()];
      size_t begin = r * per_ring, end = std::min(reads.size(), begin + per_ring);
      if (begin >= end) break;
      {
        absl::MutexLock lock(&ring.mu);
        for (size_t i = begin; i < end; ++i) ring.queue.push_back(std::move(reads[i]));
      }
      if (current_ != &ring) Wake(ring);
    }
  }

 private:
  struct Ring {
    ~Ring() {
      if (initialised) io_uring_queue_exit(&ring);
      if (wake_fd >= 0) ::close(wake_fd);
    }
    io_uring ring{};
    bool initialised = false;
    int wake_fd = -1;
    uint64_t wake_value = 0;  // target of the eventfd read
    unsigned entries = 0;
    const UringEngine* owner = nullptr;
    size_t index = 0;
    std::thread thread;
    absl::Mutex mu;
    std::deque<std::unique_ptr<LocalRead>> queue ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
  };

  explicit UringEngine(const LocalStoreOptions& options) : options_(options) {}

  static void Wake(Ring& ring) {
    uint64_t one = 1;
    while (::write(ring.wake_fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

  // Queues a read of the eventfd: it completes when a producer writes it.
  static bool ArmWake(Ring& ring) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring.ring);
    if (sqe == nullptr) return false;
    io_uring_prep_read(sqe, ring.wake_fd, &ring.wake_value, sizeof(ring.wake_value), 0);
    io_uring_sqe_set_data(sqe, nullptr);
    return true;
  }

  void Loop(Ring& ring) {
    ring.owner = this;
    for (size_t i = 0; i < rings_.size(); ++i) {
      if (rings_[i].get() == &ring) ring.index = i;
    }
    current_ = &ring;
    std::deque<std::unique_ptr<LocalRead>> ready;  // not yet in the ring
    std::vector<std::unique_ptr<LocalRead>> finished;
    unsigned in_flight = 0;  // reads in the ring
    bool wake_armed = ArmWake(ring);
    while (true) {
      bool stopping;
      {
        absl::MutexLock lock(&ring.mu);
        while (!ring.queue.empty()) {
          ready.push_back(std::move(ring.queue.front()));
          ring.queue.pop_front();
        }
        stopping = ring.stopping;
      }
      if (stopping && ready.empty() && in_flight == 0) break;
      if (!wake_armed) wake_armed = ArmWake(ring);
      // One ring entry stays for the wake-up read.
      while (!ready.empty() && in_flight + 1 < ring.entries) {
        std::unique_ptr<LocalRead>& read = ready.front();
        if (int injected = InjectedErrno(options_, *read); injected != 0) {
          if (read->Advance(-injected)) finished.push_back(std::move(read));
          ready.pop_front();
          continue;
        }
        io_uring_sqe* sqe = io_uring_get_sqe(&ring.ring);
        if (sqe == nullptr) break;
        // At most 1 GiB per request (the length is 32 bits); the rest is a short read.
        unsigned length =
            static_cast<unsigned>(std::min<uint64_t>(read->length - read->got, 1 << 30));
        io_uring_prep_read(sqe, read->file->fd, read->block.data() + read->got, length,
                           read->start + read->got);
        io_uring_sqe_set_data(sqe, read.release());
        ready.pop_front();
        ++in_flight;
      }
      bool more;
      {
        absl::MutexLock lock(&ring.mu);
        more = !ring.queue.empty();
      }
      bool wait = !more && finished.empty() && (ready.empty() || in_flight > 0);
      int err = io_uring_submit_and_wait(&ring.ring, wait ? 1 : 0);
      if (err < 0 && err != -EINTR && err != -EAGAIN && err != -EBUSY) {
        static std::once_flag logged;
        LogOnce(logged, StrCat("io_uring_submit_and_wait: ", std::strerror(-err)));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring.ring, head, cqe) {
        ++seen;
        auto* raw = static_cast<LocalRead*>(io_uring_cqe_get_data(cqe));
        if (raw == nullptr) {  // the wake-up read
          wake_armed = false;
          continue;
        }
        std::unique_ptr<LocalRead> read(raw);
        --in_flight;
        if (read->Advance(cqe->res)) {
          finished.push_back(std::move(read));
        } else {
          ready.push_front(std::move(read));  // the rest of a short read
        }
      }
      io_uring_cq_advance(&ring.ring, seen);
      for (auto& read : finished) read->Complete();
      finished.clear();
    }
    current_ = nullptr;
  }

  const LocalStoreOptions& options_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<size_t> next_{0};
  static thread_local Ring* current_;
};

thread_local UringEngine::Ring* UringEngine::current_ = nullptr;

}  // namespace

std::unique_ptr<ReadEngine> MakePreadEngine(const LocalStoreOptions& options, int threads) {
  return std::make_unique<PreadEngine>(options, threads);
}

absl::StatusOr<std::unique_ptr<ReadEngine>> MakeUringEngine(const LocalStoreOptions& options,
                                                            int threads) {
  ASSIGN_OR_RETURN(std::unique_ptr<UringEngine> engine, UringEngine::Create(options, threads));
  return std::unique_ptr<ReadEngine>(std::move(engine));
}

}  // namespace stoker::io::local_internal
