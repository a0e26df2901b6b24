// Writing stoker shards and datasets (docs/format.md) to any ObjectStore URL. Bytes are streamed
// through ObjectWriter (S3 multipart is the S3 store's business); nothing is visible under a
// shard's key until it is closed, and manifest.json is written last, so a reader never sees half a
// dataset.
//
// Thread safety: ShardWriter and DatasetWriter are used by one thread at a time; distinct writers
// may run in parallel (that is how `stoker convert` parallelises).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/format/manifest.h"
#include "stoker/format/sample.h"
#include "stoker/io/object_store.h"
#include "stoker/io/url.h"

namespace stoker::format {

struct ShardWriterOptions {
  // zstd level for each record's payload (1–19); 0 stores records uncompressed. A record is only
  // stored compressed when that makes it smaller.
  int zstd_level = 0;
  // Bytes collected before each ObjectWriter::Append.
  uint64_t append_bytes = 8 << 20;
};

class ShardWriter {
 public:
  // Starts shard `key` in `store`; `name` is what the manifest calls it (relative to the dataset).
  static absl::StatusOr<std::unique_ptr<ShardWriter>> Open(std::shared_ptr<io::ObjectStore> store,
                                                           std::string key, std::string name,
                                                           ShardWriterOptions options = {});
  ~ShardWriter();

  // InvalidArgument for a sample the format cannot hold (docs/format.md), errors of the store.
  absl::Status Add(const Sample& sample);
  uint64_t bytes() const { return offset_; }  // shard size so far (records + header)
  uint64_t samples() const { return samples_; }
  const std::set<std::string>& fields() const { return fields_; }
  // Writes the index and footer and commits the object. Returns the shard's manifest entry.
  absl::StatusOr<ManifestShard> Close();

 private:
  ShardWriter(std::shared_ptr<io::ObjectStore> store, std::string key, std::string name,
              std::unique_ptr<io::ObjectWriter> writer, ShardWriterOptions options);
  absl::Status Flush();

  std::shared_ptr<io::ObjectStore> store_;
  std::string key_;
  std::string name_;
  std::unique_ptr<io::ObjectWriter> writer_;
  ShardWriterOptions options_;
  std::string pending_;
  std::string index_;
  uint64_t offset_ = 0;
  uint64_t samples_ = 0;
  std::set<std::string> fields_;
  bool closed_ = false;
};

struct DatasetWriterOptions {
  // A new shard is started once the current one reaches this size (64–256 MiB recommended).
  uint64_t shard_bytes = 256 << 20;
  ShardWriterOptions shard;
  // Shard object names: <prefix><5-digit number>.stk
  std::string shard_name_prefix = "shard-";
};

// Writes samples into consecutive shards under a dataset prefix and manifest.json at Close().
class DatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<DatasetWriter>> Open(std::string_view url,
                                                             DatasetWriterOptions options = {});
  absl::Status Add(const Sample& sample);
  // Closes the last shard and writes manifest.json.
  absl::StatusOr<Manifest> Close();

 private:
  DatasetWriter(std::shared_ptr<io::ObjectStore> store, std::string prefix_key,
                DatasetWriterOptions options);
  std::shared_ptr<io::ObjectStore> store_;
  std::string prefix_key_;  // the dataset prefix's key, "" or ending in '/'
  DatasetWriterOptions options_;
  std::unique_ptr<ShardWriter> current_;
  std::vector<ManifestShard> shards_;
  std::set<std::string> fields_;
};

// The store key of the dataset prefix at `url`: "" or a key ending in '/'.
absl::StatusOr<io::StoreAndKey> OpenDatasetPrefix(std::string_view url);

// Builds the manifest of `shards` (in dataset order) and writes it as <prefix>manifest.json.
// `classes`: the class names of a folder tree, index order (see Manifest::classes).
absl::StatusOr<Manifest> WriteManifest(io::ObjectStore& store, std::string_view prefix_key,
                                       std::vector<ManifestShard> shards,
                                       const std::set<std::string>& fields,
                                       std::vector<std::string> classes = {});

}  // namespace stoker::format
