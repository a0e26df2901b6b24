// Pipeline: a validated, fingerprinted dataset graph built from a JSON spec (docs/pipeline.md),
// and PipelineIterator, which runs it and checkpoints it.
//
//   ASSIGN_OR_RETURN(auto pipeline, Pipeline::FromFile("spec.json"));
//   auto it = pipeline->MakeIterator(/*epoch=*/0);
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<Element> e, it->GetNext());
//     if (!e) break;  // end of the epoch
//   }
//   std::string token = it->Save().value();     // later, in another process:
//   auto resumed = pipeline->MakeIterator(0);  resumed->Restore(token);
//
// Every spec error is reported before anything runs, naming the JSON path ("$.ops[3].size"),
// the expected type and the allowed values.
//
// Thread safety: Pipeline is immutable and thread-safe (many iterators may run at once).
// A PipelineIterator is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/dataset.h"
#include "stoker/data/source.h"

namespace stoker::data {

class PipelineIterator;

// Which plugin libraries (the spec's "plugins") a pipeline may load: a plugin runs as native code
// in the process that builds the pipeline (docs/security.md). The default lets a spec load any
// path: right where the spec is the user's own (`stoker run`, the Python package). A worker builds
// pipelines from specs that clients send, so it uses OnlyFrom(its --plugin-dir folders): a
// library is loaded only when its real path (symbolic links resolved) lies inside one of those
// folders, and with no folder at all (a worker's default) no plugin is loaded.
struct PluginPolicy {
  static PluginPolicy Anywhere() { return PluginPolicy{}; }
  static PluginPolicy OnlyFrom(std::vector<std::string> dirs) {
    return PluginPolicy{false, std::move(dirs)};
  }
  bool anywhere = true;
  std::vector<std::string> dirs;  // used when !anywhere
};

class Pipeline : public std::enable_shared_from_this<Pipeline> {
 public:
  static absl::StatusOr<std::shared_ptr<const Pipeline>> FromJson(
      const nlohmann::json& spec, const PluginPolicy& plugins = PluginPolicy::Anywhere());
  static absl::StatusOr<std::shared_ptr<const Pipeline>> FromString(
      std::string_view text, const PluginPolicy& plugins = PluginPolicy::Anywhere());
  static absl::StatusOr<std::shared_ptr<const Pipeline>> FromFile(const std::string& path);

  // Stable hex digest of the spec (key order and whitespace do not matter; "threads" is left
  // out because it does not change the output).
  const std::string& fingerprint() const { return fingerprint_; }
  // The same digest from the spec's JSON alone, without building the pipeline (which opens its
  // source): what the dispatcher checks a client's fingerprint against.
  static std::string Fingerprint(const nlohmann::json& spec);
  const nlohmann::json& spec() const { return spec_; }
  bool deterministic() const { return deterministic_; }
  // Threads of the CPU pool an iterator gets ("threads" in the spec, else the machine's cores).
  int threads() const { return threads_; }
  // Number of elements per epoch when known without running the pipeline.
  std::optional<int64_t> Cardinality() const { return root_->Cardinality(); }

  // Samples per epoch of an indexed source (what splits index into); nullopt for streams.
  std::optional<int64_t> source_size() const { return source_size_; }
  // What the source's block cache did so far, over every iterator of this pipeline; nullopt when
  // the source does not read through one (docs/pipeline.md, "Block cache").
  std::optional<SourceCacheStats> source_cache_stats() const;

  // An iterator over epoch `epoch` with its own CPU pool; threads > 0 overrides the spec. With
  // `splits` (not owned, outlives the iterator) the source reads only the splits it hands out
  // (dynamic sharding, see dataset.h).
  std::unique_ptr<PipelineIterator> MakeIterator(int64_t epoch = 0, int threads = 0,
                                                 SplitProvider* splits = nullptr) const;

 private:
  Pipeline() = default;
  nlohmann::json spec_;
  std::string fingerprint_;
  NodePtr root_;
  bool deterministic_ = true;
  int threads_ = 1;
  int64_t memory_budget_bytes_ = 0;
  std::optional<int64_t> source_size_;
  std::shared_ptr<IndexedSource> indexed_source_;  // null for streams
  friend class PipelineIterator;
  friend struct PipelineBuilder;
};

class PipelineIterator {
 public:
  PipelineIterator(std::shared_ptr<const Pipeline> pipeline, int64_t epoch, int threads,
                   SplitProvider* splits = nullptr);
  ~PipelineIterator();

  // The next element; nullopt at the end of the epoch.
  absl::StatusOr<std::optional<Element>> GetNext();
  // An opaque token for the position after the last element returned (needs deterministic mode).
  absl::StatusOr<std::string> Save();
  // Continues from `token` (which names its epoch), so that the following GetNext calls return
  // exactly the elements that had not been returned when it was saved.
  absl::Status Restore(std::string_view token);

  int64_t epoch() const { return epoch_; }
  const Runtime& runtime() const { return *runtime_; }

 private:
  std::shared_ptr<const Pipeline> pipeline_;
  int64_t epoch_;
  SplitProvider* splits_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Iterator> root_;
};

}  // namespace stoker::data
