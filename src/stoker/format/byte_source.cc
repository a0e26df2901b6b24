#include "stoker/format/byte_source.h"

#include <algorithm>
#include <cstring>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::format {

struct ByteSource::Fetch {
  uint64_t offset = 0;
  absl::Notification done;
  absl::StatusOr<Buffer> result;
};

absl::StatusOr<std::unique_ptr<ByteSource>> ByteSource::Open(
    std::shared_ptr<io::RangedReader> reader, std::string key, std::string url,
    uint64_t chunk_bytes) {
  ASSIGN_OR_RETURN(io::ObjectInfo info, reader->store().Stat(key));
  return std::unique_ptr<ByteSource>(new ByteSource(std::move(reader), std::move(key),
                                                    std::move(url), info.size, std::move(info.etag),
                                                    chunk_bytes));
}

ByteSource::ByteSource(std::shared_ptr<io::RangedReader> reader, std::string key, std::string url,
                       uint64_t size, std::string etag, uint64_t chunk_bytes)
    : reader_(std::move(reader)),
      key_(std::move(key)),
      url_(std::move(url)),
      size_(size),
      etag_(std::move(etag)),
      chunk_bytes_(std::max<uint64_t>(chunk_bytes, 4096)) {}

ByteSource::~ByteSource() {
  // The callback of an in-flight prefetch writes into *prefetch_, which it co-owns; nothing else
  // needs to wait, but waiting keeps the reader's work bounded to live sources.
  if (prefetch_ != nullptr) prefetch_->done.WaitForNotification();
}

void ByteSource::StartPrefetch(uint64_t offset) {
  if (offset >= size_) return;
  auto fetch = std::make_shared<Fetch>();
  fetch->offset = offset;
  prefetch_ = fetch;
  uint64_t length = std::min(chunk_bytes_, size_ - offset);
  reader_->ReadRangesAsync(key_, {io::ByteRange{offset, length}}, etag_,
                           [fetch](absl::StatusOr<std::vector<Buffer>> result) {
                             if (result.ok()) {
                               fetch->result = std::move((*result)[0]);
                             } else {
                               fetch->result = std::move(result).status();
                             }
                             fetch->done.Notify();
                           });
}

absl::Status ByteSource::Refill() {
  uint64_t offset = position_;
  if (prefetch_ == nullptr || prefetch_->offset != offset) {
    if (prefetch_ != nullptr) prefetch_->done.WaitForNotification();
    StartPrefetch(offset);
  }
  std::shared_ptr<Fetch> fetch = std::move(prefetch_);
  fetch->done.WaitForNotification();
  if (!fetch->result.ok()) return Annotate(fetch->result.status(), StrCat("reading ", url_));
  chunk_ = std::move(*fetch->result);
  chunk_offset_ = offset;
  uint64_t expected = std::min(chunk_bytes_, size_ - offset);
  if (chunk_.size() != expected) {
    return absl::DataLossError(StrCat(url_, ": read ", chunk_.size(), " bytes at offset ", offset,
                                      ", expected ", expected, " (object changed or truncated?)"));
  }
  StartPrefetch(offset + chunk_.size());
  return absl::OkStatus();
}

absl::StatusOr<Buffer> ByteSource::Read(uint64_t n) {
  if (n > remaining()) {
    return absl::DataLossError(StrCat(url_, ": truncated: needs ", n, " bytes at offset ",
                                      position_, " but only ", remaining(), " remain"));
  }
  if (n == 0) return Buffer();
  auto in_chunk = [&] {
    return position_ >= chunk_offset_ && position_ < chunk_offset_ + chunk_.size();
  };
  if (!in_chunk()) RETURN_IF_ERROR(Refill());
  uint64_t start = position_ - chunk_offset_;
  if (start + n <= chunk_.size()) {
    position_ += n;
    return chunk_.Slice(start, n);
  }
  // Spans chunks: copy into one buffer of exactly n bytes (n <= remaining(), so bounded).
  MutableBuffer out(n);
  uint64_t filled = 0;
  while (filled < n) {
    if (!in_chunk()) RETURN_IF_ERROR(Refill());
    uint64_t at = position_ - chunk_offset_;
    uint64_t take = std::min<uint64_t>(n - filled, chunk_.size() - at);
    std::memcpy(out.data() + filled, chunk_.data() + at, take);
    filled += take;
    position_ += take;
  }
  return std::move(out).Finish();
}

absl::Status ByteSource::Skip(uint64_t n) {
  if (n > remaining()) {
    return absl::DataLossError(StrCat(url_, ": truncated: cannot skip ", n, " bytes at offset ",
                                      position_, "; only ", remaining(), " remain"));
  }
  position_ += n;
  return absl::OkStatus();
}

absl::StatusOr<Buffer> ByteSource::ReadAt(uint64_t offset, uint64_t n) {
  if (offset > size_ || n > size_ - offset) {
    return absl::DataLossError(StrCat(url_, ": cannot read ", n, " bytes at offset ", offset,
                                      " of a ", size_, "-byte object"));
  }
  if (n == 0) return Buffer();
  if (offset >= chunk_offset_ && offset + n <= chunk_offset_ + chunk_.size()) {
    return chunk_.Slice(offset - chunk_offset_, n);
  }
  ASSIGN_OR_RETURN(Buffer bytes, reader_->Read(key_, io::ByteRange{offset, n}));
  if (bytes.size() != n) {
    return absl::DataLossError(StrCat(url_, ": read ", bytes.size(), " bytes at offset ", offset,
                                      ", expected ", n, " (object changed or truncated?)"));
  }
  return bytes;
}

}  // namespace stoker::format
