#include "stoker/format/sample_directory.h"

#include <algorithm>

namespace stoker::format {

void SampleDirectory::Builder::StartShard() { shard_starts_.push_back(offsets_.size()); }

void SampleDirectory::Builder::Reserve(uint64_t samples, uint64_t key_bytes) {
  offsets_.reserve(samples);
  lengths_.reserve(samples);
  key_ends_.reserve(samples);
  keys_.reserve(key_bytes);
}

void SampleDirectory::Builder::Add(uint64_t offset, uint32_t length, std::string_view key) {
  if (shard_starts_.empty()) StartShard();
  offsets_.push_back(offset);
  lengths_.push_back(length);
  keys_.append(key);
  key_ends_.push_back(keys_.size());
}

SampleDirectory SampleDirectory::Builder::Build() && {
  SampleDirectory d;
  offsets_.shrink_to_fit();
  lengths_.shrink_to_fit();
  key_ends_.shrink_to_fit();
  keys_.shrink_to_fit();
  d.offsets_ = std::move(offsets_);
  d.lengths_ = std::move(lengths_);
  d.key_ends_ = std::move(key_ends_);
  d.keys_ = std::move(keys_);
  d.shard_starts_ = std::move(shard_starts_);
  return d;
}

SampleLocation SampleDirectory::location(uint64_t index) const {
  // The last shard whose first sample is <= index (empty shards share a start; take the last).
  auto it = std::upper_bound(shard_starts_.begin(), shard_starts_.end(), index);
  uint32_t shard = static_cast<uint32_t>(it - shard_starts_.begin() - 1);
  return SampleLocation{shard, offsets_[index], lengths_[index]};
}

uint64_t SampleDirectory::MemoryBytes() const {
  return sizeof(*this) + offsets_.capacity() * sizeof(uint64_t) +
         lengths_.capacity() * sizeof(uint32_t) + key_ends_.capacity() * sizeof(uint64_t) +
         keys_.capacity() + shard_starts_.capacity() * sizeof(uint64_t);
}

}  // namespace stoker::format
