// ByteSource: reads one object front to back in large chunks through the RangedReader (which splits
// each chunk into concurrent parts), prefetching the next `read_ahead` chunks while the current one
// is parsed. Parsers take exactly the bytes they need; a request that spans chunks is served by one
// copy. A Skip past the chunks in flight drops them and restarts at the new position.
//
// Thread safety: used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "stoker/core/buffer.h"
#include "stoker/io/read/ranged_reader.h"

namespace stoker::format {

class ByteSource {
 public:
  // Stats the object (NotFound names the URL).
  static absl::StatusOr<std::unique_ptr<ByteSource>> Open(std::shared_ptr<io::RangedReader> reader,
                                                          std::string key, std::string url,
                                                          uint64_t chunk_bytes, int read_ahead = 1);
  ~ByteSource();

  // Exactly `n` bytes from the current position, or OutOfRange-free DataLoss when fewer than `n`
  // remain (callers check remaining() first for a clean "truncated" message). Never allocates more
  // than remaining() bytes.
  absl::StatusOr<Buffer> Read(uint64_t n);
  absl::Status Skip(uint64_t n);
  // `n` bytes at `offset` (anywhere in the object), read on their own; the position does not move.
  absl::StatusOr<Buffer> ReadAt(uint64_t offset, uint64_t n);
  uint64_t position() const { return position_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - position_; }
  const std::string& url() const { return url_; }

 private:
  struct Fetch;
  ByteSource(std::shared_ptr<io::RangedReader> reader, std::string key, std::string url,
             uint64_t size, std::string etag, uint64_t chunk_bytes, int read_ahead);
  // Makes `chunk_` hold the bytes at position_ (taking them from the fetches in flight).
  absl::Status Refill();
  // Starts fetches at next_fetch_ until read_ahead_ are in flight.
  void StartFetches();
  // Waits for every fetch in flight and forgets them.
  void DropFetches();

  std::shared_ptr<io::RangedReader> reader_;
  std::string key_;
  std::string url_;
  uint64_t size_;
  std::string etag_;
  uint64_t chunk_bytes_;
  size_t read_ahead_;
  uint64_t position_ = 0;
  Buffer chunk_;  // bytes [chunk_offset_, chunk_offset_ + chunk_.size())
  uint64_t chunk_offset_ = 0;
  std::deque<std::shared_ptr<Fetch>> fetches_;  // the next chunks, in flight or done, in order
  uint64_t next_fetch_ = 0;                     // offset after the last fetch started
};

}  // namespace stoker::format
