// Conversion into stoker shards (`stoker convert`): a folder tree root/<class>/<file>, WebDataset
// tar files or TFRecord files → shards + manifest.json under a destination prefix.
//
// Source kinds (detected from SRC):
//   - a URL ending in .tar / .tfrecord / .tfrecords / .tfr: that one file;
//   - a folder or prefix whose files all end in .tar (or all in a TFRecord extension): those files,
//     in name order;
//   - otherwise a folder tree: every file is root/<class>/<name>.<ext>; samples are keyed
//     "<class>/<name>" (files sharing that key become fields of one sample, named by extension),
//     and get a field "cls" holding the class index (sorted class names) as ASCII decimal.
//     Extensions are matched case-insensitively and named canonically (FolderFieldName:
//     "photo.JPEG" -> field "jpg"). Hidden files and folders (name starting with '.') and, in
//     local folders, symbolic links whose target is missing are left out and counted in the
//     summary (the CLI reports them).
// Samples of a folder tree are written in key order; those of tar/TFRecord files in file order.
// Shards are written in parallel (one writer per shard, `parallelism` at a time).
//
// Thread safety: Convert may run concurrently with other calls; progress counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/format/manifest.h"

namespace stoker::format {

struct ConvertProgress {
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> input_bytes{0};        // sample bytes consumed so far
  std::atomic<uint64_t> total_input_bytes{0};  // 0 until known
  std::atomic<uint64_t> shards{0};             // shards finished
};

struct ConvertOptions {
  uint64_t shard_bytes = 256 << 20;
  int zstd_level = 0;
  int parallelism = 4;
  ConvertProgress* progress = nullptr;  // optional; updated while converting
};

enum class SourceKind { kFolderTree, kTar, kTfRecord };
const char* SourceKindName(SourceKind kind);

struct ConvertSummary {
  SourceKind kind = SourceKind::kFolderTree;
  size_t inputs = 0;  // files read
  Manifest manifest;
  std::string manifest_url;
  // Left out of a folder tree (or a folder of .tar/.tfrecord files), with up to 5 examples each
  // (paths relative to the source root; a broken link as "path -> target").
  uint64_t hidden_files = 0;
  std::vector<std::string> hidden_examples;
  uint64_t broken_links = 0;
  std::vector<std::string> broken_link_examples;
};

// The field name of a folder-tree file's extension (the text after the first '.' of its name):
// lower-cased, and "jpeg" -> "jpg", "tiff" -> "tif" in the last part, so "JPEG", "jpeg", "Jpg"
// all give "jpg" (as torchvision's ImageFolder accepts .jpg/.jpeg/.JPEG alike).
std::string FolderFieldName(std::string_view extension);

absl::StatusOr<ConvertSummary> Convert(std::string_view src, std::string_view dst,
                                       const ConvertOptions& options = {});

}  // namespace stoker::format
