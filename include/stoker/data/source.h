// Sources: where a pipeline's samples come from. This is the narrow interface the engine needs
// from the format layer; adapters wrap the format layer's dataset and stream readers.
//
// An IndexedSource has a known sample count and reads samples by index (so shuffle is a full
// permutation); a StreamSource is a list of shards, each read front to back (so shuffle is a
// shard-order shuffle plus a buffer). Sources produce elements with one key each; undecoded
// fields have dtype kBytes.
//
// Thread safety: both interfaces are thread-safe (Read / StartRead / OpenShard may be called
// concurrently); an ElementStream and a PendingRead are used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/core/thread_pool.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

// A read started by IndexedSource::StartRead, in flight until Wait() returns its result.
// Destroying it without Wait() waits for it (its I/O and CPU work reference the source).
class PendingRead {
 public:
  virtual ~PendingRead() = default;
  // Blocks until the samples are read and returns what Read() would have; call it once.
  virtual absl::StatusOr<std::vector<Element>> Wait() = 0;
  // After Wait(): whether it had to block for bytes still on their way (more reads in flight
  // would have helped).
  virtual bool waited_for_io() const = 0;
};

// What a source's reads through a block cache found (docs/pipeline.md, "Block cache"), counted
// since the source was opened.
struct SourceCacheStats {
  uint64_t hits = 0;          // blocks served from the cache (RAM or disk)
  uint64_t misses = 0;        // blocks fetched from the store
  uint64_t remote_bytes = 0;  // bytes those fetches read from the store
  uint64_t budget_bytes = 0;  // the cache's RAM plus disk budget
};

class IndexedSource {
 public:
  virtual ~IndexedSource() = default;
  virtual int64_t size() const = 0;
  // Reads the samples at `indices` (each in [0, size())), in that order, as few large reads.
  virtual absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const = 0;
  // Starts reading `indices` and returns at once, so that a caller can keep several reads in
  // flight (read-ahead). The CPU work a read needs once its bytes arrive (record checks,
  // decompression) runs as tasks on `pool`, or on the thread in Wait() when the pool has not
  // started them yet; never on an I/O thread. `pool` (not owned) and the source outlive the read.
  // The default reads synchronously inside Wait() (right for in-memory sources).
  virtual std::unique_ptr<PendingRead> StartRead(std::vector<int64_t> indices,
                                                 ThreadPool* pool) const;
  // A source whose samples change from epoch to epoch (a weighted mix, mix_source.h): the sample
  // index to read at each of the size() positions of `epoch`, before any shuffle. Empty (the
  // default): position i reads sample i.
  virtual std::vector<int64_t> EpochIndices(int64_t epoch) const { return {}; }
  // Thread-safe; nullopt when the source does not read through a block cache.
  virtual std::optional<SourceCacheStats> cache_stats() const { return std::nullopt; }
};

class ElementStream {
 public:
  virtual ~ElementStream() = default;
  virtual absl::StatusOr<std::optional<Element>> Next() = 0;
  // Corrupt samples this stream has left out so far (on_corrupt: skip); the run report counts them.
  virtual int64_t skipped() const { return 0; }
};

class StreamSource {
 public:
  virtual ~StreamSource() = default;
  virtual int num_shards() const = 0;
  virtual absl::StatusOr<std::unique_ptr<ElementStream>> OpenShard(int shard) const = 0;
};

// Samples 0..n-1: key "<i>" (decimal), field "value" = int64 scalar i.
std::shared_ptr<IndexedSource> MakeRangeSource(int64_t n);

// In-memory datasets, for tests and examples: `{"source": {"memory": "<name>"}}`.
// Thread-safe.
void RegisterMemoryDataset(const std::string& name, std::vector<Element> samples);
std::shared_ptr<IndexedSource> FindMemoryDataset(const std::string& name);

// The same samples as a stream of `num_shards` shards (contiguous runs), for tests.
std::shared_ptr<StreamSource> MakeMemoryStreamSource(const std::string& name, int num_shards);

}  // namespace stoker::data
