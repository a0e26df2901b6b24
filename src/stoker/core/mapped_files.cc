#include "stoker/core/mapped_files.h"

#include <map>

#include "absl/synchronization/mutex.h"

namespace stoker {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<const uint8_t*, MappedFileSlice> by_base ABSL_GUARDED_BY(mu);  // offset unused (0)
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed: mappings may outlive statics
  return *registry;
}

}  // namespace

void RegisterMappedFile(const uint8_t* base, uint64_t size, int fd, uint64_t device,
                        uint64_t inode) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.by_base[base] = MappedFileSlice{fd, device, inode, size, 0};
}

void UnregisterMappedFile(const uint8_t* base) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  r.by_base.erase(base);
}

std::optional<MappedFileSlice> FindMappedFile(const uint8_t* data, uint64_t size) {
  Registry& r = TheRegistry();
  absl::ReaderMutexLock lock(&r.mu);
  auto it = r.by_base.upper_bound(data);  // the first mapping starting after data
  if (it == r.by_base.begin()) return std::nullopt;
  --it;
  const uint64_t offset = static_cast<uint64_t>(data - it->first);
  if (offset > it->second.file_size || size > it->second.file_size - offset) return std::nullopt;
  MappedFileSlice slice = it->second;
  slice.offset = offset;
  return slice;
}

}  // namespace stoker
