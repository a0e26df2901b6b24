#include "stoker/io/local/local_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
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

LocalStore::LocalStore(int io_threads) : pool_("local-io", io_threads) {}

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

absl::StatusOr<Buffer> LocalStore::ReadNow(const ReadRequest& request) {
  std::string path = Url(request.key);
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "cannot open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, "cannot stat", path);
  if (S_ISDIR(st.st_mode)) return absl::NotFoundError(StrCat(path, " is a directory"));
  if (!request.if_match.empty() && request.if_match != EtagOf(st)) {
    return absl::FailedPreconditionError(
        StrCat(path, " changed while being read (expected version ", request.if_match, ")"));
  }
  ASSIGN_OR_RETURN(ByteRange range,
                   ClampRange(request.range, static_cast<uint64_t>(st.st_size), path));
  MutableBuffer out(range.length);
  size_t done = 0;
  while (done < range.length) {
    ssize_t n = ::pread(fd.get(), out.data() + done, range.length - done,
                        static_cast<off_t>(range.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "cannot read", path);
    }
    if (n == 0) break;  // file shrank under us
    done += static_cast<size_t>(n);
  }
  out.Truncate(done);
  return std::move(out).Finish();
}

void LocalStore::ReadAsync(ReadRequest request, ReadCallback done) {
  pool_.Schedule([this, request = std::move(request), done = std::move(done)]() mutable {
    std::move(done)(ReadNow(request));
  });
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
