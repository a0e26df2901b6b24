#include "stoker/service/common/shm_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "stoker/core/mapped_files.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::service {

SharedFileTable::Split SharedFileTable::SplitPayload(const std::vector<Buffer>& pieces) {
  Split split;
  bool any_file = false;
  for (const Buffer& b : pieces) {
    std::optional<MappedFileSlice> file;
    if (b.size() >= kMinSharedFileBytes) file = FindMappedFile(b.data(), b.size());
    PayloadSpan span;
    span.set_length(static_cast<int64_t>(b.size()));
    if (file) {
      auto [it, added] =
          index_.try_emplace({file->device, file->inode}, static_cast<int64_t>(files_.size()) + 1);
      if (added) {
        SharedFile& f = files_.emplace_back();
        f.set_pid(::getpid());
        f.set_fd(file->fd);
        f.set_device(static_cast<int64_t>(file->device));
        f.set_inode(static_cast<int64_t>(file->inode));
        f.set_size(static_cast<int64_t>(file->file_size));
      }
      span.set_file(it->second);
      span.set_offset(static_cast<int64_t>(file->offset));
      any_file = true;
    } else {
      split.copied.push_back(b);
      split.copied_size += b.size();
    }
    // Consecutive copied pieces are one span of the slot.
    if (!file && !split.spans.empty() && split.spans.back().file() == 0) {
      split.spans.back().set_length(split.spans.back().length() + span.length());
    } else {
      split.spans.push_back(std::move(span));
    }
  }
  if (!any_file) split.spans.clear();
  return split;
}

void SharedFileTable::AddTo(GetElementsResponse* fields) const {
  for (const SharedFile& f : files_) *fields->add_shm_files() = f;
}

struct SharedFileMappings::Mapping {
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), size);
  }
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

absl::StatusOr<Buffer> SharedFileMappings::Range(const SharedFile& file, uint64_t offset,
                                                 uint64_t length) {
  const Key key{file.pid(), file.fd(), file.device(), file.inode()};
  std::shared_ptr<const Mapping> mapping;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = files_.begin(); it != files_.end(); ++it) {
      if (it->first != key) continue;
      files_.splice(files_.begin(), files_, it);
      mapping = it->second;
      break;
    }
  }
  const std::string path = StrCat("/proc/", file.pid(), "/fd/", file.fd());
  if (mapping == nullptr) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return absl::UnavailableError(StrCat("opening the worker's file ", path, ": ",
                                           std::strerror(errno),
                                           " (another user's process, or another PID "
                                           "namespace?)"));
    struct stat st {};
    const bool same = ::fstat(fd, &st) == 0 && static_cast<int64_t>(st.st_dev) == file.device() &&
                      static_cast<int64_t>(st.st_ino) == file.inode() && file.size() > 0 &&
                      st.st_size >= file.size();
    if (!same) {
      ::close(fd);
      return absl::UnavailableError(StrCat(path, " is not the file the worker named (device ",
                                           st.st_dev, ", inode ", st.st_ino, ", ", st.st_size,
                                           " bytes; expected device ", file.device(), ", inode ",
                                           file.inode(), ", at least ", file.size(), " bytes)"));
    }
    const uint64_t size = static_cast<uint64_t>(file.size());
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    const std::string error = std::strerror(errno);
    ::close(fd);  // the mapping keeps the file
    if (base == MAP_FAILED) return absl::UnavailableError(StrCat("mmap of ", path, ": ", error));
    auto made = std::make_shared<Mapping>();
    made->data = static_cast<const uint8_t*>(base);
    made->size = size;
    mapping = made;
    absl::MutexLock lock(&mu_);
    files_.emplace_front(key, mapping);
    while (files_.size() > kMaxFiles) files_.pop_back();
  }
  if (offset > mapping->size || length > mapping->size - offset)
    return absl::DataLossError(StrCat("range [", offset, ", +", length, ") is outside the ",
                                      mapping->size, " bytes of the worker's file ", path));
  return Buffer::Wrap(mapping, mapping->data + offset, length);
}

}  // namespace stoker::service
