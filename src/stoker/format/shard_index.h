// Loading a shard's footer and index (docs/format.md): one ranged read of the shard's tail (with
// its 16-byte header, which is checked as well), and a second one only when the index is larger
// than the tail. Used by ShardedDataset and the shard stream.
//
// Thread safety: thread-safe (the reader is).
#pragma once

#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/format/shard_format.h"
#include "stoker/io/read/ranged_reader.h"

namespace stoker::format {

struct ShardIndex {
  shard::Footer footer;
  Buffer index;  // exactly footer.index_length bytes, CRC not yet checked (ParseIndex does)
};

inline constexpr uint64_t kShardTailBytes = 256 << 10;

// `size` is the shard's size as the manifest (or a Stat) says; a shard of another size fails with
// a message naming both. `done` runs exactly once, on any thread.
void LoadShardIndexAsync(io::RangedReader& reader, std::string key, std::string url, uint64_t size,
                         absl::AnyInvocable<void(absl::StatusOr<ShardIndex>) &&> done);

}  // namespace stoker::format
