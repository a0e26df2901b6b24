#include "stoker/format/shard_writer.h"

#include <cstdio>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/format/shard_format.h"

namespace stoker::format {

absl::StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Open(
    std::shared_ptr<io::ObjectStore> store, std::string key, std::string name,
    ShardWriterOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<io::ObjectWriter> writer, store->OpenWriter(key));
  return std::unique_ptr<ShardWriter>(new ShardWriter(std::move(store), std::move(key),
                                                      std::move(name), std::move(writer), options));
}

ShardWriter::ShardWriter(std::shared_ptr<io::ObjectStore> store, std::string key, std::string name,
                         std::unique_ptr<io::ObjectWriter> writer, ShardWriterOptions options)
    : store_(std::move(store)),
      key_(std::move(key)),
      name_(std::move(name)),
      writer_(std::move(writer)),
      options_(options) {
  shard::AppendHeader(&pending_);
  offset_ = pending_.size();
}

ShardWriter::~ShardWriter() = default;

absl::Status ShardWriter::Flush() {
  if (pending_.empty()) return absl::OkStatus();
  absl::Status status = writer_->Append(Buffer::FromString(std::move(pending_)));
  pending_.clear();
  if (!status.ok()) return Annotate(status, StrCat("writing shard ", store_->Url(key_)));
  return absl::OkStatus();
}

absl::Status ShardWriter::Add(const Sample& sample) {
  if (closed_) return absl::FailedPreconditionError("ShardWriter::Add after Close");
  ASSIGN_OR_RETURN(uint32_t length, shard::AppendRecord(sample, options_.zstd_level, &pending_));
  shard::AppendIndexEntry(offset_, length, sample.key, &index_);
  offset_ += length;
  ++samples_;
  for (const Field& field : sample.fields) {
    if (!fields_.contains(field.name)) fields_.insert(field.name);
  }
  if (pending_.size() >= options_.append_bytes) return Flush();
  return absl::OkStatus();
}

absl::StatusOr<ManifestShard> ShardWriter::Close() {
  if (closed_) return absl::FailedPreconditionError("ShardWriter closed twice");
  closed_ = true;
  shard::Footer footer{offset_, index_.size(), samples_};
  pending_.append(index_);
  shard::AppendFooter(footer, index_, &pending_);
  uint64_t size = offset_ + index_.size() + shard::kFooterSize;
  index_.clear();
  index_.shrink_to_fit();
  RETURN_IF_ERROR(Flush());
  absl::Status status = writer_->Close();
  if (!status.ok()) return Annotate(status, StrCat("closing shard ", store_->Url(key_)));
  return ManifestShard{name_, samples_, size};
}

absl::StatusOr<io::StoreAndKey> OpenDatasetPrefix(std::string_view url) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
  if (!target.key.empty() && !target.key.ends_with("/")) target.key += "/";
  return target;
}

absl::StatusOr<Manifest> WriteManifest(io::ObjectStore& store, std::string_view prefix_key,
                                       std::vector<ManifestShard> shards,
                                       const std::set<std::string>& fields,
                                       std::vector<std::string> classes) {
  Manifest manifest;
  manifest.shards = std::move(shards);
  manifest.classes = std::move(classes);
  manifest.fields.assign(fields.begin(), fields.end());
  for (const ManifestShard& s : manifest.shards) {
    manifest.total_samples += s.samples;
    manifest.total_bytes += s.bytes;
  }
  std::string key = StrCat(prefix_key, kManifestName);
  absl::Status status = store.Put(key, Buffer::FromString(SerializeManifest(manifest)));
  if (!status.ok()) return Annotate(status, StrCat("writing ", store.Url(key)));
  return manifest;
}

DatasetWriter::DatasetWriter(std::shared_ptr<io::ObjectStore> store, std::string prefix_key,
                             DatasetWriterOptions options)
    : store_(std::move(store)), prefix_key_(std::move(prefix_key)), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::Open(std::string_view url,
                                                                   DatasetWriterOptions options) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, OpenDatasetPrefix(url));
  return std::unique_ptr<DatasetWriter>(
      new DatasetWriter(std::move(target.store), std::move(target.key), std::move(options)));
}

absl::Status DatasetWriter::Add(const Sample& sample) {
  if (current_ != nullptr && current_->bytes() >= options_.shard_bytes) {
    ASSIGN_OR_RETURN(ManifestShard done, current_->Close());
    fields_.insert(current_->fields().begin(), current_->fields().end());
    shards_.push_back(std::move(done));
    current_.reset();
  }
  if (current_ == nullptr) {
    char number[32];
    std::snprintf(number, sizeof(number), "%05zu", shards_.size());
    std::string name = StrCat(options_.shard_name_prefix, number, ".stk");
    ASSIGN_OR_RETURN(current_,
                     ShardWriter::Open(store_, StrCat(prefix_key_, name), name, options_.shard));
  }
  return current_->Add(sample);
}

absl::StatusOr<Manifest> DatasetWriter::Close() {
  if (current_ != nullptr) {
    ASSIGN_OR_RETURN(ManifestShard done, current_->Close());
    fields_.insert(current_->fields().begin(), current_->fields().end());
    shards_.push_back(std::move(done));
    current_.reset();
  }
  return WriteManifest(*store_, prefix_key_, shards_, fields_);
}

}  // namespace stoker::format
