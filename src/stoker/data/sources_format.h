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

// A converted stoker dataset (prefix, manifest.json or one .stk shard), read by sample index.
// skip_corrupt: leave corrupt records out (counted by the format layer) instead of failing.
// direct_io: "auto", "on" or "off": O_DIRECT for local files (format::DatasetOptions::direct_io).
absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(
    const std::string& url, bool skip_corrupt = false, const std::string& direct_io = "auto");

// TFRecord (tar = false) or WebDataset tar (tar = true) files, one shard per URL, each read with
// `read_ahead` chunks in flight (format::StreamOptions::read_ahead).
absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt = false,
                                                               int read_ahead = 1);

}  // namespace stoker::data
