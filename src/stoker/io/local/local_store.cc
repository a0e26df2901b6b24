#include "stoker/io/local/local_store.h"

#include <fcntl.h>
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
#include "stoker/core/thread_pool.h"
#include "stoker/io/local/local_map.h"
#include "stoker/io/local/local_read.h"
#include "stoker/io/memory_store.h"
#include "stoker/io/range_util.h"

namespace stoker::io {
namespace fs = std::filesystem;
using local_internal::ErrnoError;
using local_internal::EtagOf;
using local_internal::LocalRead;
using local_internal::LogOnce;
using local_internal::OpenFile;
using local_internal::OpenForRead;
using local_internal::PreadAll;
namespace {

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

bool MapResidentFromEnvironment() {
  const char* env = std::getenv("STOKER_LOCAL_MMAP");
  if (env == nullptr) return true;
  std::string_view value(env);
  return !(value == "off" || value == "0");
}

}  // namespace

LocalStore::LocalStore(int io_threads) : LocalStore(LocalStoreOptions{.io_threads = io_threads}) {}

LocalStore::LocalStore(LocalStoreOptions options) : options_(std::move(options)) {
  LocalStoreOptions::Engine engine = EngineFromEnvironment(options_.engine);
  if (engine != LocalStoreOptions::Engine::kPread) {
    int threads = options_.io_threads > 0 ? options_.io_threads : DefaultThreads();
    auto uring = local_internal::MakeUringEngine(options_, threads);
    if (uring.ok()) {
      engine_ = *std::move(uring);
    } else {
      static std::once_flag logged;
      LogOnce(logged, StrCat("io_uring is unavailable (", uring.status().message(),
                             "); local files are read with pread on a thread pool"));
    }
  }
  if (options_.map_resident && !options_.direct && options_.page_cache_first &&
      !options_.inject_error && MapResidentFromEnvironment()) {
    mappings_ = std::make_unique<local_internal::FileMappings>();
  }
  if (engine_ == nullptr) {
    // pread has one read in flight per thread: enough threads to keep a disk's queue busy.
    engine_ = local_internal::MakePreadEngine(options_,
                                              options_.io_threads > 0 ? options_.io_threads : 8);
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
  ReadBatch(std::move(requests), std::move(done), /*map=*/mappings_ != nullptr);
}

void LocalStore::ReadBatch(std::vector<ReadRequest> requests, std::vector<ReadCallback> done,
                           bool map) {
  // Each file once per batch (batches are normally of one file: a shard's coalesced reads).
  std::vector<std::shared_ptr<OpenFile>> files;
  std::vector<std::shared_ptr<const local_internal::FileMapping>> mappings;  // one per file
  std::vector<std::unique_ptr<LocalRead>> reads, answered;
  reads.reserve(requests.size());
  const bool cache_first = options_.page_cache_first && !options_.inject_error;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::string path = Url(requests[i].key);
    size_t f = 0;
    while (f < files.size() && files[f]->path != path) ++f;
    if (f == files.size()) {
      files.push_back(OpenForRead(std::move(path), options_.direct));
      mappings.push_back(map ? mappings_->Get(*files.back()) : nullptr);
    }
    auto read = std::make_unique<LocalRead>();
    read->file = files[f];
    read->done = std::move(done[i]);
    if (!read->Plan(requests[i])) {
      answered.push_back(std::move(read));
      continue;
    }
    // Resident in the page cache: a slice of the file's mapping, nothing copied.
    const local_internal::FileMapping* mapping = mappings[f].get();
    if (mapping != nullptr && read->length >= local_internal::kMinMappedReadBytes &&
        read->start + read->length <= mapping->size &&
        local_internal::Resident(*read->file, *mapping, read->start, read->length)) {
      read->mapped =
          Buffer::Wrap(mappings[f], mapping->data + read->want.offset, read->want.length);
      answered.push_back(std::move(read));
      continue;
    }
    read->block = BufferPool::Default().Get(read->length);
    reads.push_back(std::move(read));
  }
  if (cache_first) {
    // The engine starts on the later half of a large batch while this thread reads the first
    // half from the page cache: the copies of a warm batch run on two cores, not one.
    size_t inline_count = reads.size() >= 8 ? reads.size() / 2 : reads.size();
    std::vector<std::unique_ptr<LocalRead>> later(
        std::make_move_iterator(reads.begin() + static_cast<ptrdiff_t>(inline_count)),
        std::make_move_iterator(reads.end()));
    reads.resize(inline_count);
    engine_->Submit(std::move(later));
    for (auto& read : reads) {
      if (!read->file->direct && local_internal::ReadFromPageCache(*read)) {
        answered.push_back(std::move(read));
      }
    }
    std::erase(reads, nullptr);
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
      requests.reserve(count);
      for (int i = 0; i < count; ++i) {
        uint64_t offset = rng() % (size - length) / kSmall * kSmall;
        requests.push_back(ReadRequest{std::string(key), {offset, length}, ""});
      }
      absl::Mutex done_mu;
      int left = count;
      bool ok = true;
      std::vector<ReadCallback> callbacks;
      callbacks.reserve(count);
      for (int i = 0; i < count; ++i) {
        callbacks.push_back([&](absl::StatusOr<Buffer> result) {
          absl::MutexLock lock(&done_mu);
          ok = ok && result.ok();
          --left;
        });
      }
      absl::Time started = absl::Now();
      // Copies, never slices of a mapping: the probe measures what a read costs the device or
      // the page cache's copy, which the planner weighs against reading through holes (a slice
      // costs neither; measured through mappings, 1 MiB "read" in a few microseconds gave holes
      // of megabytes, merged reads split into parts and concatenated by copying).
      ReadBatch(std::move(requests), std::move(callbacks), /*map=*/false);
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
