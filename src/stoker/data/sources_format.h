// Adapters from the format layer (src/stoker/format/) to the pipeline's source interfaces.
// In a build without the format layer they return Unimplemented.
//
// Thread safety: the functions and the returned sources are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/source.h"

namespace stoker::data {

struct DatasetSourceOptions {
  // Leave corrupt records out (counted by the format layer) instead of failing.
  bool skip_corrupt = false;
  // "auto", "on" or "off": O_DIRECT for local files (format::DatasetOptions::direct_io).
  std::string direct_io = "auto";
  // Reads of a network dataset (s3://, http(s)://) through a block cache (docs/pipeline.md,
  // "Block cache"): "auto" when the dataset's bytes fit in the cache (RAM plus disk tier), "on",
  // or "off". Local datasets never use it (the page cache does that job).
  std::string cache = "auto";
  // 0: the process-wide cache (io::DefaultBlockCache: STOKER_CACHE_BYTES, STOKER_CACHE_DIR). Else
  // a cache of this many bytes of RAM for this source alone (with a disk tier when
  // STOKER_CACHE_DIR is set).
  int64_t cache_bytes = 0;
};

// A converted stoker dataset (prefix, manifest.json or one .stk shard), read by sample index.
absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(
    const std::string& url, const DatasetSourceOptions& options = {});

// TFRecord (tar = false) or WebDataset tar (tar = true) files, one shard per URL, each read with
// `read_ahead` chunks in flight (format::StreamOptions::read_ahead).
absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt = false,
                                                               int read_ahead = 1);

}  // namespace stoker::data
