#include "stoker/fuse/mount_fs.h"

#include <cerrno>
#include <cstring>

#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::fuse {
namespace {

std::string NormalizeRoot(std::string key) {
  while (key.starts_with("/")) key.erase(0, 1);
  if (!key.empty() && !key.ends_with("/")) key += "/";
  return key;
}

// "/a/b" -> ("/a", "b"); "/b" -> ("/", "b").
std::pair<std::string_view, std::string_view> SplitPath(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view parent = slash == 0 ? std::string_view("/") : path.substr(0, slash);
  return {parent, path.substr(slash + 1)};
}

std::string VersionOf(const Attr& attr) {
  if (!attr.etag.empty()) return attr.etag;
  return StrCat(attr.size, "@", absl::ToUnixNanos(attr.mtime));
}

}  // namespace

MountFs::MountFs(std::shared_ptr<io::ObjectStore> base, std::string root_key,
                 std::shared_ptr<io::BlockCache> cache, MountFsOptions options)
    : base_(std::move(base)),
      root_prefix_(NormalizeRoot(std::move(root_key))),
      cache_(std::move(cache)),
      options_(options),
      prefetch_budget_(cache_->memory_budget() / 2),
      cached_(std::make_shared<io::CachedStore>(base_, cache_)),
      reader_(std::make_unique<io::RangedReader>(cached_)) {}

MountFs::~MountFs() {
  reader_.reset();
  // Read-ahead callbacks touch the cache and the counters: wait for the last one.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* requests) { return *requests == 0; }, &prefetch_requests_));
}

std::string MountFs::KeyOf(std::string_view path) const {
  if (path.starts_with("/")) path.remove_prefix(1);
  return StrCat(root_prefix_, path);
}

absl::Status MountFs::CheckRoot() { return GetDir("/").status(); }

absl::StatusOr<std::shared_ptr<const MountFs::Dir>> MountFs::GetDir(std::string_view path) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = dirs_.find(path);
    if (it != dirs_.end() && it->second->expires > now) return it->second;
  }
  std::string prefix = path == "/" ? root_prefix_ : StrCat(KeyOf(path), "/");
  ASSIGN_OR_RETURN(io::ListResult listing, base_->List({prefix, "/", 0}));
  auto dir = std::make_shared<Dir>();
  dir->expires = absl::Now() + options_.dir_ttl;
  for (const std::string& folder : listing.common_prefixes) {
    std::string_view name(folder);
    name.remove_prefix(prefix.size());
    while (name.ends_with("/")) name.remove_suffix(1);
    if (name.empty() || name.find('/') != std::string_view::npos) continue;
    Attr attr;
    attr.is_dir = true;
    dir->entries.emplace(std::string(name), attr);
  }
  for (const io::ObjectInfo& info : listing.objects) {
    std::string_view name(info.key);
    name.remove_prefix(prefix.size());
    // Skip folder markers ("prefix/") and anything a store rolled up oddly; a folder of the same
    // name as an object wins (both cannot be shown).
    if (name.empty() || name.find('/') != std::string_view::npos) continue;
    dir->entries.emplace(std::string(name), Attr{false, info.size, info.mtime, info.etag});
  }
  absl::MutexLock lock(&mu_);
  dirs_[std::string(path)] = dir;
  return std::shared_ptr<const Dir>(std::move(dir));
}

absl::StatusOr<Attr> MountFs::GetAttr(std::string_view path) {
  if (path == "/" || path.empty()) {
    Attr root;
    root.is_dir = true;
    return root;
  }
  auto [parent, name] = SplitPath(path);
  ASSIGN_OR_RETURN(std::shared_ptr<const Dir> dir, GetDir(parent));
  auto it = dir->entries.find(name);
  if (it == dir->entries.end()) {
    return absl::NotFoundError(StrCat(base_->Url(KeyOf(path)), " does not exist"));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::pair<std::string, Attr>>> MountFs::ReadDir(std::string_view path) {
  if (path.empty()) path = "/";
  if (path != "/") {
    ASSIGN_OR_RETURN(Attr attr, GetAttr(path));
    if (!attr.is_dir) {
      return absl::FailedPreconditionError(StrCat(base_->Url(KeyOf(path)), " is not a folder"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Dir> dir, GetDir(path));
  return std::vector<std::pair<std::string, Attr>>(dir->entries.begin(), dir->entries.end());
}

absl::StatusOr<std::unique_ptr<MountFs::File>> MountFs::Open(std::string_view path,
                                                             bool* keep_cache) {
  ASSIGN_OR_RETURN(Attr attr, GetAttr(path));
  if (attr.is_dir) {
    return absl::FailedPreconditionError(StrCat(base_->Url(KeyOf(path)), " is a folder"));
  }
  std::string version = VersionOf(attr);
  {
    absl::MutexLock lock(&mu_);
    std::string& seen = opened_versions_[std::string(path)];
    *keep_cache = seen == version;
    seen = version;
  }
  uint64_t max_ahead =
      std::max<uint64_t>(io::ReadAheadWindow::kDefaultInitial,
                         std::min(options_.max_read_ahead, cache_->memory_budget() / 8));
  return std::make_unique<File>(KeyOf(path), std::move(attr), max_ahead);
}

absl::StatusOr<size_t> MountFs::ReadSmall(File& file, char* out, size_t size, uint64_t offset) {
  const uint64_t file_size = file.attr_.size;
  Buffer whole;
  {
    absl::MutexLock lock(&file.mu_);
    if (file.have_whole_) whole = file.whole_;
  }
  if (whole.size() == 0 && file_size > 0) {
    // One request for the whole object (no HEAD: the size comes from the listing).
    ASSIGN_OR_RETURN(whole, base_->Read(file.key_, {0, file_size}));
    if (whole.size() != file_size) {
      return absl::DataLossError(StrCat(base_->Url(file.key_), ": expected ", file_size,
                                        " bytes, got ", whole.size(),
                                        " (the object changed; remount or wait for the listing "
                                        "to expire)"));
    }
  }
  size_t n = static_cast<size_t>(std::min<uint64_t>(size, file_size - offset));
  std::memcpy(out, whole.data() + offset, n);
  absl::MutexLock lock(&file.mu_);
  // Drop the bytes once a read reaches the end (the usual whole-file read), so open files hold
  // no memory outside the cache budget once they have been read.
  if (offset + n >= file_size) {
    file.whole_ = Buffer();
    file.have_whole_ = false;
  } else {
    file.whole_ = whole;
    file.have_whole_ = true;
  }
  return n;
}

absl::StatusOr<size_t> MountFs::Read(File& file, char* out, size_t size, uint64_t offset) {
  const uint64_t file_size = file.attr_.size;
  if (offset >= file_size || size == 0) return 0;
  if (file_size <= options_.small_file_bytes) return ReadSmall(file, out, size, offset);

  const uint64_t length = std::min<uint64_t>(size, file_size - offset);
  const uint64_t end = offset + length;
  io::ByteRange prefetch{0, 0};
  {
    absl::MutexLock lock(&file.mu_);
    uint64_t ahead = file.window_.OnRead(offset, length);
    if (!file.window_.sequential()) file.prefetched_end_ = end;  // a seek: start over
    // Read-ahead goes out in whole requests (of the request size, or of the window while that is
    // smaller), topped up as soon as one more fits, so that about window / request size of them
    // stay in flight; only the last one of the file may be shorter.
    const uint64_t granule =
        std::max<uint64_t>(1, std::min<uint64_t>(ahead, cached_->options().max_request_bytes));
    const uint64_t want_end = std::min(file_size, end + ahead);
    const uint64_t have_end = std::max(file.prefetched_end_, end);
    uint64_t bytes = want_end > have_end ? want_end - have_end : 0;
    if (want_end < file_size) bytes = bytes / granule * granule;
    if (bytes > 0) {
      uint64_t in_flight = prefetch_in_flight_.fetch_add(bytes);
      if (in_flight + bytes <= prefetch_budget_) {
        prefetch = {have_end, bytes};
        file.prefetched_end_ = have_end + bytes;
      } else {
        prefetch_in_flight_.fetch_sub(bytes);  // over the global budget: no read-ahead now
      }
    }
  }
  if (spdlog::should_log(spdlog::level::trace)) {
    spdlog::trace("stoker mount: read {} [{}, +{}) window {} read-ahead [{}, +{})", file.key_,
                  offset, length, read_ahead_window(file), prefetch.offset, prefetch.length);
  }
  if (prefetch.length > 0) Prefetch(file, prefetch, prefetch.length);
  ASSIGN_OR_RETURN(std::vector<Buffer> parts, reader_->ReadRanges(file.key_, {{offset, length}}));
  const Buffer& got = parts.at(0);
  size_t n = static_cast<size_t>(std::min<uint64_t>(got.size(), length));
  std::memcpy(out, got.data(), n);
  return n;
}

void MountFs::Prefetch(const File& file, io::ByteRange range, uint64_t reserved) {
  // The blocks a read of `range` would fetch, claimed now; those cached or on their way already
  // need no reservation.
  auto runs = cached_->ClaimMissing(file.key_, range);
  if (!runs.ok() || runs->empty()) {
    prefetch_in_flight_.fetch_sub(reserved);  // a read itself will report an error
    return;
  }
  uint64_t requested = 0;
  for (const auto& run : *runs) requested += run.bytes.length;
  prefetch_in_flight_.fetch_sub(reserved - std::min(reserved, requested));
  uint64_t left_reserved = std::min(reserved, requested);
  for (auto& run : *runs) {
    const uint64_t release = std::min(left_reserved, run.bytes.length);
    left_reserved -= release;
    {
      absl::MutexLock lock(&mu_);
      ++prefetch_requests_;
    }
    // Into the cache only: nothing is assembled for anyone.
    cached_->FetchRun(std::move(run), nullptr, [this, release] {
      prefetch_in_flight_.fetch_sub(release);
      absl::MutexLock lock(&mu_);
      --prefetch_requests_;
    });
  }
}

uint64_t MountFs::read_ahead_window(File& file) {
  absl::MutexLock lock(&file.mu_);
  return file.window_.window();
}

int MountFs::ErrnoFor(const absl::Status& status, std::string_view path) {
  int err = EIO;
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      err = EACCES;
      break;
    case absl::StatusCode::kFailedPrecondition: {
      std::string_view message = ToStd(status.message());
      if (message.ends_with(" is a folder")) return EISDIR;
      if (message.ends_with(" is not a folder")) return ENOTDIR;
      break;
    }
    default:
      break;
  }
  std::string line = StrCat(path, ": ", status.ToString());
  bool first;
  {
    absl::MutexLock lock(&mu_);
    first = logged_.insert(line).second;
  }
  if (first) spdlog::error("stoker mount: {} (reported as {})", line, strerror(err));
  return err;
}

}  // namespace stoker::fuse
