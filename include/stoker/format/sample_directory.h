// SampleDirectory: sample index → (shard, record offset, record length, key), for a whole dataset,
// in 20 bytes per sample plus the keys' bytes (docs/format.md, "The sample directory").
//
// Thread safety: immutable once built; every const method is thread-safe. The Builder is not.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::format {

struct SampleLocation {
  uint32_t shard = 0;
  uint64_t offset = 0;  // of the record in its shard
  uint32_t length = 0;  // of the whole record
};

class SampleDirectory {
 public:
  class Builder {
   public:
    // Starts the next shard; samples added after it belong to it.
    void StartShard();
    void Reserve(uint64_t samples, uint64_t key_bytes);
    void Add(uint64_t offset, uint32_t length, std::string_view key);
    SampleDirectory Build() &&;

   private:
    std::vector<uint64_t> offsets_;
    std::vector<uint32_t> lengths_;
    std::vector<uint64_t> key_ends_;
    std::string keys_;
    std::vector<uint64_t> shard_starts_;
  };

  SampleDirectory() = default;

  uint64_t size() const { return offsets_.size(); }
  size_t shard_count() const { return shard_starts_.size(); }
  // Requires index < size().
  SampleLocation location(uint64_t index) const;
  std::string_view key(uint64_t index) const {
    uint64_t begin = index == 0 ? 0 : key_ends_[index - 1];
    return std::string_view(keys_).substr(begin, key_ends_[index] - begin);
  }
  // Index of the first sample of `shard` (shard_count() → size()).
  uint64_t shard_start(size_t shard) const {
    return shard < shard_starts_.size() ? shard_starts_[shard] : size();
  }
  // Heap bytes held (capacity, not size), for the memory budget: ≤ 24 bytes per sample + keys.
  uint64_t MemoryBytes() const;

 private:
  std::vector<uint64_t> offsets_;
  std::vector<uint32_t> lengths_;
  std::vector<uint64_t> key_ends_;  // key i is keys_[key_ends_[i-1], key_ends_[i])
  std::string keys_;
  std::vector<uint64_t> shard_starts_;
};

}  // namespace stoker::format
