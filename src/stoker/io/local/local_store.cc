#include "stoker/io/local/local_store.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
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
#include "stoker/core/buffer_pool.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/core/thread_pool.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/range_util.h"

namespace stoker::io {
namespace fs = std::filesystem;
namespace {

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

ObjectInfo InfoOf(std::string key, const struct stat& st) {
  return ObjectInfo{
      std::move(key), static_cast<uint64_t>(st.st_size), EtagOf(st),
      absl::FromUnixNanos(int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec)};
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

class LocalWriter : public ObjectWriter {
 public:
  LocalWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  ~LocalWriter() override {
    if (!closed_) ::unlink(temp_path_.c_str());
  }

  absl::Status Append(Buffer data) override {
    size_t written = 0;
    while (written < data.size()) {
      ssize_t n = ::write(fd_.get(), data.data() + written, data.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "cannot write", path_);
      }
      written += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (closed_) return absl::FailedPreconditionError(StrCat(path_, " is already closed"));
    int fd = fd_.release();
    if (::close(fd) != 0) return ErrnoError(errno, "cannot write", path_);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      return ErrnoError(errno, "cannot move into place", path_);
    }
    closed_ = true;
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool closed_ = false;
};

}  // namespace

namespace {

constexpr uint64_t kDirectAlign = 4096;

// One file opened for the requests of one batch.
struct OpenFile {
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
  std::string path;
  int fd = -1;
  absl::Status error;  // the open or fstat failed
  uint64_t size = 0;
  std::string etag;
  bool direct = false;
};

void LogOnce(std::once_flag& flag, std::string message) {
  std::call_once(flag, [&] { spdlog::warn("{}", message); });
}

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
  return file;
}

}  // namespace

// One read in progress: the caller's range, the (for O_DIRECT widened) range read into `block`.
struct LocalRead {
  std::shared_ptr<OpenFile> file;
  ReadCallback done;
  ByteRange want;       // what the caller gets (clamped to the file)
  uint64_t start = 0;   // file offset of block.data()[0]
  uint64_t length = 0;  // bytes to read into the block
  uint64_t got = 0;
  BufferPool::Block block;
  absl::Status error;

  // Prepares the read; false when it is answered already (error, or nothing to read).
  bool Prepare(const ReadRequest& request) {
    if (!file->error.ok()) {
      error = file->error;
      return false;
    }
    if (!request.if_match.empty() && request.if_match != file->etag) {
      error = absl::FailedPreconditionError(StrCat(
          file->path, " changed while being read (expected version ", request.if_match, ")"));
      return false;
    }
    auto clamped = ClampRange(request.range, file->size, file->path);
    if (!clamped.ok()) {
      error = clamped.status();
      return false;
    }
    want = *clamped;
    if (want.length == 0) return false;
    start = want.offset;
    uint64_t end = want.offset + want.length;
    if (file->direct) {
      start = want.offset / kDirectAlign * kDirectAlign;
      end = (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    }
    length = end - start;
    block = BufferPool::Default().Get(length);
    return true;
  }

  // Takes one system call's result; true when the read is complete (done, end of file or error).
  bool Advance(int64_t result) {
    if (result == -EINTR || result == -EAGAIN) return false;  // issue the rest again
    if (result < 0) {
      error = ErrnoError(static_cast<int>(-result), "cannot read",
                         StrCat(file->path, " at offset ", start + got));
      return true;
    }
    if (result == 0) return true;  // end of file: the file shrank under us
    got += static_cast<uint64_t>(result);
    // O_DIRECT reads come back short only at the end of the file.
    return got >= length || (file->direct && got % kDirectAlign != 0);
  }

  absl::StatusOr<Buffer> Result() {
    if (!error.ok()) return error;
    if (want.length == 0) return Buffer();
    uint64_t lead = want.offset - start;
    if (got <= lead) return Buffer();
    return block.Share(lead, std::min(want.length, got - lead));
  }

  void Complete() {
    ReadCallback callback = std::move(done);
    absl::StatusOr<Buffer> result = Result();
    block = {};
    file.reset();
    std::move(callback)(std::move(result));
  }
};

class LocalStore::Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string_view name() const = 0;
  // Issues prepared reads; each is Complete()d exactly once, on an engine thread.
  virtual void Submit(std::vector<std::unique_ptr<LocalRead>> reads) = 0;
};

namespace {

int InjectedErrno(const LocalStoreOptions& options, const LocalRead& read) {
  if (!options.inject_error) return 0;
  return options.inject_error(read.file->path, read.start + read.got);
}

// Reads with pread until the read is complete (done, end of file or error).
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

}  // namespace

// pread on a thread pool: one request per thread at a time.
class LocalStore::PreadEngine : public LocalStore::Engine {
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
class LocalStore::UringEngine : public LocalStore::Engine {
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

thread_local LocalStore::UringEngine::Ring* LocalStore::UringEngine::current_ = nullptr;

namespace {

int DefaultThreads() {
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw, 2, 4);
}

LocalStoreOptions::Engine EngineFromEnvironment(LocalStoreOptions::Engine engine) {
  if (engine != LocalStoreOptions::Engine::kAuto) return engine;
  const char* env = std::getenv("STOKER_LOCAL_IO");
  if (env == nullptr) return engine;
  std::string_view value(env);
  if (value == "pread") return LocalStoreOptions::Engine::kPread;
  if (value == "uring" || value == "io_uring") return LocalStoreOptions::Engine::kUring;
  return engine;
}

}  // namespace

LocalStore::LocalStore(int io_threads) : LocalStore(LocalStoreOptions{.io_threads = io_threads}) {}

LocalStore::LocalStore(LocalStoreOptions options) : options_(std::move(options)) {
  LocalStoreOptions::Engine engine = EngineFromEnvironment(options_.engine);
  if (engine != LocalStoreOptions::Engine::kPread) {
    int threads = options_.io_threads > 0 ? options_.io_threads : DefaultThreads();
    auto uring = UringEngine::Create(options_, threads);
    if (uring.ok()) {
      engine_ = *std::move(uring);
    } else {
      static std::once_flag logged;
      LogOnce(logged, StrCat("io_uring is unavailable (", uring.status().message(),
                             "); local files are read with pread on a thread pool"));
    }
  }
  if (engine_ == nullptr) {
    // pread has one read in flight per thread: enough threads to keep a disk's queue busy.
    engine_ =
        std::make_unique<PreadEngine>(options_, options_.io_threads > 0 ? options_.io_threads : 8);
  }
}

LocalStore::~LocalStore() = default;

std::shared_ptr<LocalStore> LocalStore::Shared(bool direct) {
  static std::mutex mu;
  static std::shared_ptr<LocalStore>* stores = new std::shared_ptr<LocalStore>[2];
  std::lock_guard<std::mutex> lock(mu);
  auto& store = stores[direct ? 1 : 0];
  if (store == nullptr) store = std::make_shared<LocalStore>(LocalStoreOptions{.direct = direct});
  return store;
}

std::string_view LocalStore::engine() const { return engine_->name(); }
bool LocalStore::direct() const { return options_.direct; }

void LocalStore::ReadBatchAsync(std::vector<ReadRequest> requests, std::vector<ReadCallback> done) {
  // Each file once per batch (batches are normally of one file: a shard's coalesced reads).
  std::vector<std::shared_ptr<OpenFile>> files;
  std::vector<std::unique_ptr<LocalRead>> reads, answered;
  reads.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    std::string path = Url(requests[i].key);
    std::shared_ptr<OpenFile> file;
    for (const auto& f : files) {
      if (f->path == path) file = f;
    }
    if (file == nullptr) {
      file = OpenForRead(std::move(path), options_.direct);
      files.push_back(file);
    }
    auto read = std::make_unique<LocalRead>();
    read->file = std::move(file);
    read->done = std::move(done[i]);
    if (read->Prepare(requests[i])) {
      reads.push_back(std::move(read));
    } else {
      answered.push_back(std::move(read));
    }
  }
  engine_->Submit(std::move(reads));
  for (auto& read : answered) read->Complete();
}

void LocalStore::ReadAsync(ReadRequest request, ReadCallback done) {
  std::vector<ReadRequest> requests;
  requests.push_back(std::move(request));
  std::vector<ReadCallback> callbacks;
  callbacks.push_back(std::move(done));
  ReadBatchAsync(std::move(requests), std::move(callbacks));
}

absl::StatusOr<Buffer> LocalStore::ReadNow(const ReadRequest& request) {
  // On the caller's thread (so that it may be called from an engine callback).
  LocalRead read;
  read.file = OpenForRead(Url(request.key), options_.direct);
  if (read.Prepare(request)) PreadAll(options_, read);
  return read.Result();
}

DeviceProfile LocalStore::Probe(std::string_view key) {
  DeviceProfile profile{absl::Microseconds(100), absl::Microseconds(100), 2e9, false,
                        std::string(engine()),   options_.direct};
  std::string path = Url(key);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return profile;
  static std::mutex mu;
  static auto* probed = new std::map<std::tuple<dev_t, std::string, bool>, DeviceProfile>();
  auto id = std::make_tuple(st.st_dev, std::string(engine()), options_.direct);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = probed->find(id); it != probed->end()) return it->second;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  constexpr uint64_t kSmall = 4096, kLarge = 1 << 20;
  if (size >= 4 * kLarge) {
    std::mt19937_64 rng(size);
    auto batch = [&](int count, uint64_t length) -> std::optional<absl::Duration> {
      std::vector<ReadRequest> requests;
      for (int i = 0; i < count; ++i) {
        uint64_t offset = rng() % (size - length) / kSmall * kSmall;
        requests.push_back(ReadRequest{std::string(key), {offset, length}, ""});
      }
      absl::Mutex done_mu;
      int left = count;
      bool ok = true;
      std::vector<ReadCallback> callbacks;
      for (int i = 0; i < count; ++i) {
        callbacks.push_back([&](absl::StatusOr<Buffer> result) {
          absl::MutexLock lock(&done_mu);
          ok = ok && result.ok();
          --left;
        });
      }
      absl::Time started = absl::Now();
      ReadBatchAsync(std::move(requests), std::move(callbacks));
      absl::MutexLock lock(&done_mu);
      done_mu.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &left));
      if (!ok) return std::nullopt;
      return absl::Now() - started;
    };
    std::vector<absl::Duration> singles;
    for (int i = 0; i < 9; ++i) {
      auto one = batch(1, kSmall);
      if (!one) return profile;
      singles.push_back(*one);
    }
    std::sort(singles.begin(), singles.end());
    auto small = batch(64, kSmall);
    int large_count = static_cast<int>(std::min<uint64_t>(16, size / kLarge - 1));
    auto large = batch(large_count, kLarge);
    if (small && large && *large > absl::ZeroDuration()) {
      profile.first_byte = singles[singles.size() / 2];
      profile.per_request = *small / 64;
      profile.bytes_per_second =
          static_cast<double>(large_count * kLarge) / absl::ToDoubleSeconds(*large);
      profile.measured = true;
    }
  }
  if (!profile.measured) return profile;  // a larger file of the device may still measure it
  std::lock_guard<std::mutex> lock(mu);
  return probed->emplace(id, profile).first->second;
}

std::string LocalStore::Url(std::string_view key) const { return StrCat("/", key); }

void LocalStore::StatAsync(std::string key, StatCallback done) {
  std::string path = Url(key);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::move(done)(ErrnoError(errno, "cannot stat", path));
  if (S_ISDIR(st.st_mode))
    return std::move(done)(absl::NotFoundError(StrCat(path, " is a directory")));
  std::move(done)(InfoOf(std::move(key), st));
}

absl::StatusOr<ListResult> LocalStore::List(const ListOptions& options) {
  // Walk from the deepest folder that contains every key with this prefix.
  std::string prefix_path = Url(options.prefix);
  fs::path start =
      prefix_path.ends_with("/") ? fs::path(prefix_path) : fs::path(prefix_path).parent_path();
  std::vector<ObjectInfo> found;
  std::error_code ec;
  if (!fs::is_directory(start, ec)) return ListResult{};
  bool shallow = options.delimiter == "/";
  auto visit = [&](const fs::directory_entry& entry) {
    std::string key = entry.path().string().substr(1);
    if (!key.starts_with(options.prefix)) return;
    struct stat st;
    if (::stat(entry.path().c_str(), &st) != 0) return;  // vanished or dangling link
    if (S_ISDIR(st.st_mode)) {
      // Represent a folder by a key ending in "/" so ListFromSorted rolls it up.
      if (shallow) found.push_back(ObjectInfo{key + "/", 0, "", absl::UnixEpoch()});
      return;
    }
    if (S_ISREG(st.st_mode)) found.push_back(InfoOf(std::move(key), st));
  };
  if (shallow) {
    for (const auto& entry : fs::directory_iterator(start, ec)) visit(entry);
  } else {
    for (auto it = fs::recursive_directory_iterator(
             start, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      visit(*it);
    }
  }
  if (ec) return ErrnoError(ec.value(), "cannot list", start.string());
  std::sort(found.begin(), found.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return ListFromSorted(found, options);
}

absl::StatusOr<std::unique_ptr<ObjectWriter>> LocalStore::OpenWriter(std::string_view key) {
  std::string path = Url(key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return ErrnoError(ec.value(), "cannot create folder for", path);
  std::string temp = StrCat(path, ".tmp-", ::getpid(), "-", std::random_device{}());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", path);
  return std::make_unique<LocalWriter>(path, temp, fd);
}

absl::Status LocalStore::Delete(std::string_view key) {
  std::string path = Url(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return ErrnoError(errno, "cannot delete", path);
  return absl::OkStatus();
}

}  // namespace stoker::io
