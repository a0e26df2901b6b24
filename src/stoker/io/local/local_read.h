// Internal to LocalStore (local_store.cc, local_read.cc): a read of a local file in progress
// and the engines that run such reads, pread on a thread pool and io_uring (local_store.h says
// when each is used). Not part of the public API.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/core/buffer_pool.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/local/local_store.h"
#include "stoker/io/range_util.h"

namespace stoker::io::local_internal {

// An errno as a Status naming what failed and where (ENOENT: NotFound, EACCES: PermissionDenied,
// ENOSPC: ResourceExhausted, else Internal).
absl::Status ErrnoError(int err, std::string_view what, std::string_view path);

// A local file's version: size, modification time and inode.
std::string EtagOf(const struct stat& st);

// Logs `message` at warn level the first time `flag` is passed.
void LogOnce(std::once_flag& flag, std::string message);

// O_DIRECT offsets and lengths are widened to this where the kernel does not say what the file
// needs (statx STATX_DIOALIGN, Linux 6.1+); block buffers are always aligned to it.
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
  // With `direct`: the file offset (and length) alignment O_DIRECT needs, from statx where the
  // kernel reports it (512 on most disks), else kDirectAlign.
  uint64_t direct_align = kDirectAlign;
};

// Opens `path` for reading (with O_DIRECT when `direct` and the file system allows it) and reads
// its size and version; a failure is kept in the result's `error`.
std::shared_ptr<OpenFile> OpenForRead(std::string path, bool direct);

// One read in progress: the caller's range, the (for O_DIRECT widened) range read into `block`.
struct LocalRead {
  std::shared_ptr<OpenFile> file;
  ReadCallback done;
  ByteRange want;       // what the caller gets (clamped to the file)
  uint64_t start = 0;   // file offset of block.data()[0]
  uint64_t length = 0;  // bytes to read into the block
  uint64_t got = 0;
  BufferPool::Block block;
  Buffer mapped;  // the answer as a slice of a mapping of the file (AnswerFromMapping)
  absl::Status error;

  // Prepares the read and takes a block for it; false when it is answered already (error, or
  // nothing to read).
  bool Prepare(const ReadRequest& request) {
    if (!Plan(request)) return false;
    block = BufferPool::Default().Get(length);
    return true;
  }

  // Prepare without taking the block (for a read that may be answered by a mapping first).
  bool Plan(const ReadRequest& request) {
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
      const uint64_t align = file->direct_align;
      start = want.offset / align * align;
      end = (end + align - 1) / align * align;
    }
    length = end - start;
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
    return got >= length || (file->direct && got % file->direct_align != 0);
  }

  absl::StatusOr<Buffer> Result() {
    if (!error.ok()) return error;
    if (mapped.data() != nullptr) return mapped;
    if (want.length == 0) return Buffer();
    uint64_t lead = want.offset - start;
    if (got <= lead) return Buffer();
    return block.Share(lead, std::min(want.length, got - lead));
  }

  void Complete() {
    ReadCallback callback = std::move(done);
    absl::StatusOr<Buffer> result = Result();
    block = {};
    mapped = Buffer();
    file.reset();
    std::move(callback)(std::move(result));
  }
};

// Reads with pread on the calling thread until `read` is complete (done, end of file or error),
// honouring options.inject_error.
void PreadAll(const LocalStoreOptions& options, LocalRead& read);

// Reads what the page cache holds of `read` on the calling thread (preadv2 with RWF_NOWAIT: it
// never waits for the device). True when `read` is complete (done, end of file or error); false
// when the rest must come from the device (read.got says how much is in already).
bool ReadFromPageCache(LocalRead& read);

// Runs prepared reads. Thread-safe.
class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  virtual std::string_view name() const = 0;
  // Issues prepared reads; each is Complete()d exactly once, on an engine thread.
  virtual void Submit(std::vector<std::unique_ptr<LocalRead>> reads) = 0;
};

// pread on `threads` threads, one read in flight per thread.
std::unique_ptr<ReadEngine> MakePreadEngine(const LocalStoreOptions& options, int threads);
// `threads` io_uring rings, each with its own thread; Unavailable where io_uring cannot be set up.
absl::StatusOr<std::unique_ptr<ReadEngine>> MakeUringEngine(const LocalStoreOptions& options,
                                                            int threads);

}  // namespace stoker::io::local_internal
