#include "stoker/io/memory_store.h"

#include "stoker/core/strings.h"
#include "stoker/io/range_util.h"

namespace stoker::io {
namespace {

class MemoryWriter : public ObjectWriter {
 public:
  MemoryWriter(MemoryStore* store, std::string key) : store_(store), key_(std::move(key)) {}
  absl::Status Append(Buffer data) override {
    parts_.push_back(std::move(data));
    return absl::OkStatus();
  }
  absl::Status Close() override {
    store_->Set(key_, Buffer::Concat(parts_));
    parts_.clear();
    return absl::OkStatus();
  }

 private:
  MemoryStore* store_;
  std::string key_;
  std::vector<Buffer> parts_;
};

}  // namespace

ListResult ListFromSorted(const std::vector<ObjectInfo>& sorted, const ListOptions& options) {
  ListResult result;
  for (const ObjectInfo& info : sorted) {
    if (!info.key.starts_with(options.prefix)) continue;
    if (!options.delimiter.empty()) {
      size_t pos = info.key.find(options.delimiter, options.prefix.size());
      if (pos != std::string::npos) {
        std::string common = info.key.substr(0, pos + options.delimiter.size());
        if (result.common_prefixes.empty() || result.common_prefixes.back() != common) {
          result.common_prefixes.push_back(std::move(common));
        }
        continue;
      }
    }
    if (options.max_objects != 0 && result.objects.size() >= options.max_objects) break;
    result.objects.push_back(info);
  }
  return result;
}

std::string MemoryStore::Url(std::string_view key) const {
  return StrCat("mem://", bucket_, "/", key);
}

void MemoryStore::Set(std::string_view key, Buffer data) {
  absl::MutexLock lock(&mu_);
  objects_[std::string(key)] = Object{std::move(data), StrCat("m", ++version_), absl::Now()};
}

void MemoryStore::StatAsync(std::string key, StatCallback done) {
  absl::StatusOr<ObjectInfo> info = absl::NotFoundError(StrCat(Url(key), " does not exist"));
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(key);
    if (it != objects_.end()) {
      info = ObjectInfo{it->first, it->second.data.size(), it->second.etag, it->second.mtime};
    }
  }
  std::move(done)(std::move(info));
}

absl::StatusOr<ListResult> MemoryStore::List(const ListOptions& options) {
  std::vector<ObjectInfo> all;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = objects_.lower_bound(options.prefix); it != objects_.end(); ++it) {
      if (!it->first.starts_with(options.prefix)) break;
      all.push_back(
          ObjectInfo{it->first, it->second.data.size(), it->second.etag, it->second.mtime});
    }
  }
  return ListFromSorted(all, options);
}

void MemoryStore::ReadAsync(ReadRequest request, ReadCallback done) {
  Object object;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(request.key);
    if (it == objects_.end()) {
      std::move(done)(absl::NotFoundError(StrCat(Url(request.key), " does not exist")));
      return;
    }
    object = it->second;
  }
  if (!request.if_match.empty() && request.if_match != object.etag) {
    std::move(done)(
        absl::FailedPreconditionError(StrCat(Url(request.key), " changed while being read (ETag ",
                                             object.etag, ", expected ", request.if_match, ")")));
    return;
  }
  auto range = ClampRange(request.range, object.data.size(), Url(request.key));
  if (!range.ok()) {
    std::move(done)(range.status());
    return;
  }
  std::move(done)(object.data.Slice(range->offset, range->length));
}

absl::StatusOr<std::unique_ptr<ObjectWriter>> MemoryStore::OpenWriter(std::string_view key) {
  return std::make_unique<MemoryWriter>(this, std::string(key));
}

absl::Status MemoryStore::Delete(std::string_view key) {
  absl::MutexLock lock(&mu_);
  objects_.erase(std::string(key));
  return absl::OkStatus();
}

}  // namespace stoker::io
