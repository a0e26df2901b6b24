// The dataset graph and its iterators (docs/pipeline.md, "Execution" and "Checkpoints").
//
// A DatasetNode is an immutable node of the graph built from a spec (see pipeline.h); it makes
// Iterators, which are stateful. GetNext returns the next element, nullopt at the end of the
// sequence (never an error), or an error. Save() captures the position after the last element
// returned; a freshly made iterator of the same node and epoch, after Restore(state), returns
// exactly the elements that had not yet been returned.
//
// Thread safety: DatasetNode is immutable and thread-safe. An Iterator is used by one thread at a
// time (GetNext, Save and Restore must not be called concurrently); it may run work on the
// Runtime's pool internally.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/thread_pool.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

// Per-stage counters, reported by `stoker run`. Thread-safe (atomics).
struct StageStats {
  std::string name;
  std::atomic<int64_t> busy_ns{0};      // thread CPU time spent in the stage's own work
  std::atomic<int64_t> elements{0};     // elements produced
  std::atomic<int64_t> bytes{0};        // bytes of the elements produced
  std::atomic<int64_t> skipped{0};      // elements dropped by on_error: skip
  std::atomic<int64_t> parallelism{0};  // current setting (map stages), for reports
};

// Shared by every iterator of one pipeline run: the CPU pool, options and stats.
class Runtime {
 public:
  Runtime(int threads, bool deterministic, int64_t memory_budget_bytes);
  ThreadPool& pool() { return pool_; }
  int threads() const { return pool_.num_threads(); }
  bool deterministic() const { return deterministic_; }
  int64_t memory_budget_bytes() const { return memory_budget_bytes_; }
  // Stats for a stage (created on first use; stable pointer). Thread-safe.
  StageStats* Stats(const std::string& name);
  std::vector<const StageStats*> AllStats() const;

 private:
  ThreadPool pool_;
  const bool deterministic_;
  const int64_t memory_budget_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<StageStats>> stats_ ABSL_GUARDED_BY(mu_);
};

class Iterator {
 public:
  virtual ~Iterator() = default;
  virtual absl::StatusOr<std::optional<Element>> GetNext() = 0;
  virtual absl::StatusOr<nlohmann::json> Save() = 0;
  virtual absl::Status Restore(const nlohmann::json& state) = 0;
};

// Dynamic sharding (the service): a split is a contiguous run [begin, end) of positions in the
// epoch's sample order (the permutation of an indexed source after its shuffle). With a provider,
// an indexed source reads only the positions of the splits it is given, one split after another,
// until the provider has no more. Called only from the thread driving the source; the provider
// must outlive the iterator.
struct Split {
  int64_t begin = 0;
  int64_t end = 0;
};
class SplitProvider {
 public:
  virtual ~SplitProvider() = default;
  // The next split, or nullopt when there are no more.
  virtual absl::StatusOr<std::optional<Split>> GetNext() = 0;
};

// Hands out one split, then no more: a worker's split of a job, a rank's share of an epoch.
class SingleSplit : public SplitProvider {
 public:
  explicit SingleSplit(Split split) : split_(split) {}
  absl::StatusOr<std::optional<Split>> GetNext() override {
    if (given_) return std::nullopt;
    given_ = true;
    return split_;
  }

 private:
  Split split_;
  bool given_ = false;
};

struct IteratorContext {
  Runtime* runtime = nullptr;  // not owned; outlives the iterator
  int64_t epoch = 0;
  SplitProvider* splits = nullptr;  // not owned; null: the whole epoch
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const = 0;
  // Number of elements per epoch if known cheaply, else nullopt.
  virtual std::optional<int64_t> Cardinality() const { return std::nullopt; }
};

using NodePtr = std::shared_ptr<const DatasetNode>;

}  // namespace stoker::data
