// Conversion into stoker shards (`stoker convert`): a folder tree root/<class>/<file>, WebDataset
// tar files or TFRecord files → shards + manifest.json under a destination prefix.
//
// Source kinds (docs/format.md, "Telling the input formats apart"), when not given
// (ConvertOptions::input_format):
//   - one file (an object): a TFRecord file or a WebDataset tar by its content (sniff.h); a name
//     that says a format (.tar, .tfrecord, .tfrecords, .tfr, .tfrec, *.tfrecord-NNNNN-of-NNNNN)
//     must hold it;
//   - a folder or prefix: the files a folder tree cannot hold (directly in it, or without an
//     extension) and those named as TFRecord/tar are sniffed. When one of them is a TFRecord file
//     or a tar (or named as one), every file is, and the folder is a set of them: those files, in
//     name order; files of neither format are left out and counted in the summary, except an
//     unreadable one named like the recognised ones (only its digits differ: a damaged shard of
//     the set), which is an error. TFRecord files and tars together are an error.
//   - otherwise a folder tree: every file is root/<class>/<name>.<ext>; samples are keyed
//     "<class>/<name>" (files sharing that key become fields of one sample, named by extension),
//     and get a field "cls" holding the class index (sorted class names) as ASCII decimal.
//     Extensions are matched case-insensitively and named canonically (FolderFieldName:
//     "photo.JPEG" -> field "jpg"). Hidden files and folders (name starting with '.') and, in
//     local folders, symbolic links whose target is missing are left out and counted in the
//     summary (the CLI reports them).
// Given an input format, a file or every file of a folder must hold it (an empty file holds no
// samples); the first that does not is an error naming it and why.
// Samples of a folder tree are written in key order; those of tar/TFRecord files in file order.
// Shards are written in parallel (one writer per shard, `parallelism` at a time).
//
// Thread safety: Convert may run concurrently with other calls; progress counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/format/manifest.h"

namespace stoker::format {

enum class SourceKind { kFolderTree, kTar, kTfRecord };

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
  // What the input is (`--input-format`); nullopt: work it out (see above).
  std::optional<SourceKind> input_format;
};

const char* SourceKindName(SourceKind kind);
// `--input-format`'s names: "tfrecord", "tar" (or "wds"), "tree".
absl::StatusOr<SourceKind> ParseSourceKind(std::string_view name);

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
  // Files of a folder of TFRecord files or tars that are neither, left out (up to 5 examples).
  uint64_t unrecognised_files = 0;
  std::vector<std::string> unrecognised_examples;
};

// The field name of a folder-tree file's extension (the text after the first '.' of its name):
// lower-cased, and "jpeg" -> "jpg", "tiff" -> "tif" in the last part, so "JPEG", "jpeg", "Jpg"
// all give "jpg" (as torchvision's ImageFolder accepts .jpg/.jpeg/.JPEG alike).
std::string FolderFieldName(std::string_view extension);

absl::StatusOr<ConvertSummary> Convert(std::string_view src, std::string_view dst,
                                       const ConvertOptions& options = {});

}  // namespace stoker::format
