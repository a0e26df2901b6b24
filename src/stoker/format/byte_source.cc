#include "stoker/format/byte_source.h"

#include <algorithm>
#include <cstring>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::format {

struct ByteSource::Fetch {
  uint64_t offset = 0;
  uint64_t length = 0;
  absl::Notification done;
  absl::StatusOr<Buffer> result;
};

absl::StatusOr<std::unique_ptr<ByteSource>> ByteSource::Open(
    std::shared_ptr<io::RangedReader> reader, std::string key, std::string url,
    uint64_t chunk_bytes, int read_ahead) {
  ASSIGN_OR_RETURN(io::ObjectInfo info, reader->store().Stat(key));
  return std::unique_ptr<ByteSource>(new ByteSource(std::move(reader), std::move(key),
                                                    std::move(url), info.size, std::move(info.etag),
                                                    chunk_bytes, read_ahead));
}

ByteSource::ByteSource(std::shared_ptr<io::RangedReader> reader, std::string key, std::string url,
                       uint64_t size, std::string etag, uint64_t chunk_bytes, int read_ahead)
    : reader_(std::move(reader)),
      key_(std::move(key)),
      url_(std::move(url)),
      size_(size),
      etag_(std::move(etag)),
      chunk_bytes_(std::max<uint64_t>(chunk_bytes, 4096)),
      read_ahead_(static_cast<size_t>(std::max(read_ahead, 1))) {}

ByteSource::~ByteSource() {
  // The callback of a fetch in flight writes into its Fetch, which it co-owns; nothing else needs
  // to wait, but waiting keeps the reader's work bounded to live sources.
  DropFetches();
}

void ByteSource::DropFetches() {
  for (auto& fetch : fetches_) fetch->done.WaitForNotification();
  fetches_.clear();
}

void ByteSource::StartFetches() {
  while (fetches_.size() < read_ahead_ && next_fetch_ < size_) {
    auto fetch = std::make_shared<Fetch>();
    fetch->offset = next_fetch_;
    fetch->length = std::min(chunk_bytes_, size_ - next_fetch_);
    next_fetch_ += fetch->length;
    fetches_.push_back(fetch);
    reader_->ReadRangesAsync(key_, {io::ByteRange{fetch->offset, fetch->length}}, etag_,
                             [fetch](absl::StatusOr<std::vector<Buffer>> result) {
                               if (result.ok()) {
                                 fetch->result = std::move((*result)[0]);
                               } else {
                                 fetch->result = std::move(result).status();
                               }
                               fetch->done.Notify();
                             });
  }
}

absl::Status ByteSource::Refill() {
  const uint64_t offset = position_;
  // Fetches that end at or before the position were skipped over.
  while (!fetches_.empty() && fetches_.front()->offset + fetches_.front()->length <= offset) {
    fetches_.front()->done.WaitForNotification();
    fetches_.pop_front();
  }
  if (fetches_.empty() || fetches_.front()->offset > offset) {
    DropFetches();
    next_fetch_ = offset;
    StartFetches();
  }
  std::shared_ptr<Fetch> fetch = std::move(fetches_.front());
  fetches_.pop_front();
  fetch->done.WaitForNotification();
  StartFetches();
  if (!fetch->result.ok()) return Annotate(fetch->result.status(), StrCat("reading ", url_));
  chunk_ = std::move(*fetch->result);
  chunk_offset_ = fetch->offset;
  if (chunk_.size() != fetch->length) {
    return absl::DataLossError(StrCat(url_, ": read ", chunk_.size(), " bytes at offset ",
                                      fetch->offset, ", expected ", fetch->length,
                                      " (object changed or truncated?)"));
  }
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
