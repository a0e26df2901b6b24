#include "stoker/format/sample_stream.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "absl/synchronization/notification.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/format/byte_source.h"
#include "stoker/format/shard_format.h"
#include "stoker/format/shard_index.h"
#include "stoker/format/sniff.h"
#include "stoker/format/tar.h"
#include "stoker/format/tfrecord.h"
#include "stoker/io/url.h"

namespace stoker::format {
namespace {

// The file name up to its first '.'; TensorFlow Datasets' shard suffix after a TFRecord extension
// is kept ("mnist-train.tfrecord-00000-of-00004" -> "mnist-train-00000-of-00004"), so that the
// shards of one split give different keys.
std::string FileStem(std::string_view key) {
  size_t slash = key.rfind('/');
  std::string_view base = slash == std::string_view::npos ? key : key.substr(slash + 1);
  size_t dot = base.find('.');
  if (dot == std::string_view::npos) return std::string(base);
  std::string_view rest = base.substr(dot);
  for (std::string_view ext : {".tfrecords-", ".tfrecord-", ".tfrec-", ".tfr-"}) {
    if (rest.starts_with(ext) && rest.find('.', 1) == std::string_view::npos) {
      return StrCat(base.substr(0, dot), rest.substr(ext.size() - 1));
    }
  }
  return std::string(base.substr(0, dot));
}

// `error` from the header at `offset` of a stream read as `expected`: at offset 0, when the file
// holds another format stoker reads, the message says so (a tar given as a TFRecord file, ...).
absl::Status ExplainStart(absl::Status error, ByteSource& source, uint64_t offset,
                          StreamFormat expected) {
  if (offset != 0 || error.ok()) return error;
  auto head = source.ReadAt(0, std::min<uint64_t>(source.size(), kSniffBytes));
  if (!head.ok()) return error;
  Sniffed sniffed = SniffFormat(head->view(), source.size());
  if (sniffed.format == StreamFormat::kAuto || sniffed.format == expected) return error;
  return absl::Status(error.code(),
                      StrCat(error.message(), ": the file is a ", StreamFormatName(sniffed.format),
                             ", not a ", StreamFormatName(expected), "; read it as one"));
}

// Shared by the stream classes: on_corrupt handling of a DataLoss error for one sample.
// Returns true when the sample should be skipped, false when `error` must be returned.
bool SkipCorrupt(const StreamOptions& options, const absl::Status& error) {
  if (options.on_corrupt != OnCorrupt::kSkip || !absl::IsDataLoss(error)) return false;
  if (options.report != nullptr) options.report->Add(error);
  spdlog::warn("skipping corrupt sample: {}", std::string(error.message()));
  return true;
}

class ShardStream : public SampleStream {
 public:
  ShardStream(std::unique_ptr<ByteSource> source, ShardIndex index, StreamOptions options)
      : source_(std::move(source)), footer_(index.footer), options_(std::move(options)) {
    entries_.reserve(footer_.record_count);
    index_status_ = shard::ParseIndex(index.index.view(), footer_, source_->url(),
                                      [&](uint64_t offset, uint32_t length, std::string_view key) {
                                        entries_.push_back({offset, length, std::string(key)});
                                      });
  }

  absl::Status Start() {
    RETURN_IF_ERROR(index_status_);
    ASSIGN_OR_RETURN(Buffer header, source_->Read(shard::kHeaderSize));
    return shard::CheckHeader(header.view(), source_->url());
  }

  absl::StatusOr<std::optional<Sample>> Next() override {
    while (next_ < entries_.size()) {
      const Entry& entry = entries_[next_++];
      ASSIGN_OR_RETURN(Buffer record, source_->Read(entry.length));
      auto sample = shard::DecodeRecord(record, source_->url(), entry.offset, entry.key);
      if (sample.ok()) {
        sample->index = next_ - 1;
        return std::optional<Sample>(std::move(*sample));
      }
      if (!SkipCorrupt(options_, sample.status())) return sample.status();
    }
    return std::optional<Sample>();
  }

 private:
  struct Entry {
    uint64_t offset;
    uint32_t length;
    std::string key;
  };
  std::unique_ptr<ByteSource> source_;
  shard::Footer footer_;
  StreamOptions options_;
  absl::Status index_status_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

class TfRecordStream : public SampleStream {
 public:
  TfRecordStream(std::unique_ptr<ByteSource> source, StreamOptions options)
      : source_(std::move(source)), options_(std::move(options)), stem_(FileStem(source_->url())) {}

  absl::StatusOr<std::optional<Sample>> Next() override {
    while (source_->remaining() > 0) {
      uint64_t offset = source_->position();
      if (source_->remaining() < tfrecord::kHeaderSize) {
        return absl::DataLossError(
            StrCat(source_->url(), ": truncated TFRecord at offset ", offset));
      }
      ASSIGN_OR_RETURN(Buffer header, source_->Read(tfrecord::kHeaderSize));
      // A bad length cannot be skipped over (the next record's position is unknown): fail.
      absl::StatusOr<uint64_t> parsed =
          tfrecord::ParseHeader(header.view(), source_->url(), offset);
      if (!parsed.ok()) {
        return ExplainStart(parsed.status(), *source_, offset, StreamFormat::kTfRecord);
      }
      uint64_t length = *parsed;
      if (length + 4 > source_->remaining()) {
        return absl::DataLossError(StrCat(source_->url(), ": truncated TFRecord at offset ", offset,
                                          " (needs ", length + 4, " more bytes, ",
                                          source_->remaining(), " remain)"));
      }
      ASSIGN_OR_RETURN(Buffer data, source_->Read(length));
      ASSIGN_OR_RETURN(Buffer crc, source_->Read(4));
      uint64_t number = record_number_++;
      absl::Status checked = tfrecord::CheckData(data.view(), crc.view(), source_->url(), offset);
      absl::StatusOr<Sample> sample = absl::UnknownError("unset");
      if (!checked.ok()) {
        sample = checked;
      } else {
        char suffix[32];
        std::snprintf(suffix, sizeof(suffix), "/%08llu", static_cast<unsigned long long>(number));
        sample = tfrecord::ExampleToSample(data.view(), StrCat(stem_, suffix));
        if (!sample.ok()) {
          sample = absl::DataLossError(StrCat(source_->url(), ": TFRecord at offset ", offset, ": ",
                                              sample.status().message()));
        }
      }
      if (sample.ok()) {
        sample->index = emitted_++;
        return std::optional<Sample>(std::move(*sample));
      }
      if (!SkipCorrupt(options_, sample.status())) return sample.status();
    }
    return std::optional<Sample>();
  }

 private:
  std::unique_ptr<ByteSource> source_;
  StreamOptions options_;
  std::string stem_;
  uint64_t record_number_ = 0;
  uint64_t emitted_ = 0;
};

class TarStream : public SampleStream {
 public:
  TarStream(std::unique_ptr<ByteSource> source, StreamOptions options)
      : source_(std::move(source)), options_(std::move(options)) {}

  absl::StatusOr<std::optional<Sample>> Next() override {
    if (!done_) {
      while (true) {
        ASSIGN_OR_RETURN(std::optional<Member> member, NextMember());
        if (!member.has_value()) {
          done_ = true;
          break;
        }
        if (pending_.has_value() && pending_->key != member->key) {
          std::optional<Sample> out = std::move(pending_);
          RETURN_IF_ERROR(StartSample(std::move(*member)));
          out->index = emitted_++;
          return out;
        }
        if (!pending_.has_value()) {
          RETURN_IF_ERROR(StartSample(std::move(*member)));
          continue;
        }
        if (pending_->Find(member->field) != nullptr) {
          return absl::InvalidArgumentError(StrCat(source_->url(), ": tar member at offset ",
                                                   member->offset, ": sample ", member->key,
                                                   " has field ", member->field, " twice"));
        }
        pending_->fields.push_back({std::move(member->field), std::move(member->data)});
      }
    }
    if (!pending_.has_value()) return std::optional<Sample>();
    std::optional<Sample> out = std::move(pending_);
    pending_.reset();
    out->index = emitted_++;
    return out;
  }

 private:
  struct Member {
    std::string key, field;
    Buffer data;
    uint64_t offset;
  };

  // A sample's members must be adjacent (docs/format.md): a key that comes back after another
  // key would otherwise become two half samples with the same key.
  absl::Status StartSample(Member member) {
    auto [it, inserted] = first_offset_.emplace(member.key, member.offset);
    if (!inserted) {
      return absl::InvalidArgumentError(StrCat(
          source_->url(), ": the members of sample '", member.key,
          "' are not adjacent: one at offset ", it->second, ", another at offset ", member.offset,
          " after other samples' members. A WebDataset tar keeps each sample's files together; "
          "re-create it with the files sorted by name (GNU tar: --sort=name)"));
    }
    pending_ = Sample();
    pending_->key = std::move(member.key);
    pending_->fields.push_back({std::move(member.field), std::move(member.data)});
    return absl::OkStatus();
  }

  // The next regular member (or hard link, resolved to its target's bytes) with a field name, or
  // nullopt at the end of the archive.
  absl::StatusOr<std::optional<Member>> NextMember() {
    std::string long_name, long_link;
    while (true) {
      uint64_t offset = source_->position();
      if (source_->remaining() == 0) return std::optional<Member>();  // no end marker: accept
      if (source_->remaining() < tar::kBlockSize) {
        return ExplainStart(absl::DataLossError(StrCat(
                                source_->url(), ": truncated tar header at offset ", offset)),
                            *source_, offset, StreamFormat::kTar);
      }
      ASSIGN_OR_RETURN(Buffer block, source_->Read(tar::kBlockSize));
      if (tar::IsZeroBlock(block.view())) return std::optional<Member>();
      absl::StatusOr<tar::MemberHeader> parsed =
          tar::ParseHeader(block.view(), source_->url(), offset);
      if (!parsed.ok()) return ExplainStart(parsed.status(), *source_, offset, StreamFormat::kTar);
      tar::MemberHeader header = std::move(*parsed);
      // Links carry no data of their own, whatever their size field says.
      if (header.type == '1' || header.type == '2') header.size = 0;
      uint64_t padded = header.size + tar::Padding(header.size);
      if (header.size > tar::kMaxMemberSize || padded > source_->remaining()) {
        return absl::DataLossError(StrCat(source_->url(), ": tar member at offset ", offset, " (",
                                          header.path, ") claims ", header.size, " bytes; only ",
                                          source_->remaining(), " remain"));
      }
      if (header.type == 'L' || header.type == 'K' || header.type == 'x') {
        ASSIGN_OR_RETURN(Buffer data, source_->Read(header.size));
        RETURN_IF_ERROR(source_->Skip(tar::Padding(header.size)));
        if (header.type == 'L') {
          long_name = std::string(data.view().substr(0, data.view().find('\0')));
        } else if (header.type == 'K') {
          long_link = std::string(data.view().substr(0, data.view().find('\0')));
        } else {
          auto path = tar::PaxValue(data.view(), "path");
          auto link = tar::PaxValue(data.view(), "linkpath");
          if (!path.ok() || !link.ok()) {
            return absl::DataLossError(StrCat(source_->url(), ": pax header at offset ", offset,
                                              ": ", (path.ok() ? link : path).status().message()));
          }
          if (!path->empty()) long_name = *path;
          if (!link->empty()) long_link = *link;
        }
        continue;
      }
      std::string raw_path = long_name.empty() ? header.path : long_name;
      std::string raw_link = long_link.empty() ? header.link : long_link;
      long_name.clear();
      long_link.clear();
      if (header.ignorable()) {
        RETURN_IF_ERROR(source_->Skip(padded));
        continue;
      }
      if (header.type == '2') {
        return absl::InvalidArgumentError(StrCat(
            source_->url(), ": tar member at offset ", offset, " (", raw_path,
            ") is a symbolic link (to ", raw_link,
            "); stoker reads regular files and hard links "
            "only: re-create the tar with the files the links point to (GNU tar: --dereference)"));
      }
      if (!header.regular() && header.type != '1') {
        return absl::InvalidArgumentError(
            StrCat(source_->url(), ": tar member at offset ", offset, " (", raw_path,
                   ") has type '", std::string(1, header.type),
                   "', which stoker does not read (only regular files, hard links and "
                   "directories); re-create the tar without it"));
      }
      ASSIGN_OR_RETURN(std::string path, tar::CleanPath(raw_path, source_->url(), offset));
      tar::KeyAndField kf = tar::SplitKeyField(path);
      if (kf.field.empty() || kf.key.empty() || kf.key.ends_with("/")) {
        spdlog::warn("{}: tar member {} has no field extension; ignored", source_->url(), path);
        RETURN_IF_ERROR(source_->Skip(padded));
        continue;
      }
      Buffer data;
      if (header.type == '1') {
        ASSIGN_OR_RETURN(std::string target, tar::CleanPath(raw_link, source_->url(), offset));
        auto found = regular_members_.find(target);
        if (found == regular_members_.end()) {
          return absl::InvalidArgumentError(StrCat(source_->url(), ": tar member at offset ",
                                                   offset, " (", path, ") is a hard link to ",
                                                   target,
                                                   ", which is not a regular file earlier in "
                                                   "the archive"));
        }
        ASSIGN_OR_RETURN(data, source_->ReadAt(found->second.first, found->second.second));
      } else {
        regular_members_[path] = {source_->position(), header.size};
        ASSIGN_OR_RETURN(data, source_->Read(header.size));
        RETURN_IF_ERROR(source_->Skip(tar::Padding(header.size)));
      }
      return std::optional<Member>(
          Member{std::move(kf.key), std::move(kf.field), std::move(data), offset});
    }
  }

  std::unique_ptr<ByteSource> source_;
  StreamOptions options_;
  std::optional<Sample> pending_;
  bool done_ = false;
  uint64_t emitted_ = 0;
  // Every key seen so far, with the offset of its first member (adjacency check).
  std::unordered_map<std::string, uint64_t> first_offset_;
  // Regular members' paths -> (data offset, size), for hard links to them.
  std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> regular_members_;
};

class ConcatStream : public SampleStream {
 public:
  ConcatStream(std::vector<std::string> urls, StreamOptions options)
      : urls_(std::move(urls)), options_(std::move(options)) {}

  absl::StatusOr<std::optional<Sample>> Next() override {
    while (true) {
      if (current_ == nullptr) {
        if (next_url_ >= urls_.size()) return std::optional<Sample>();
        ASSIGN_OR_RETURN(current_, OpenSampleStream(urls_[next_url_++], options_));
      }
      ASSIGN_OR_RETURN(std::optional<Sample> sample, current_->Next());
      if (sample.has_value()) {
        sample->index = emitted_++;
        return sample;
      }
      current_.reset();
    }
  }

 private:
  std::vector<std::string> urls_;
  StreamOptions options_;
  size_t next_url_ = 0;
  std::unique_ptr<SampleStream> current_;
  uint64_t emitted_ = 0;
};

}  // namespace

absl::StatusOr<StreamFormat> DetectStreamFormat(std::string_view url) {
  StreamFormat format = FormatFromName(url);
  if (format != StreamFormat::kAuto) return format;
  return absl::InvalidArgumentError(
      StrCat("cannot tell the format of ", url,
             " from its name (expected .tar, .tfrecord, .tfrecords, .tfr, .tfrec or .stk)"));
}

absl::StatusOr<std::unique_ptr<SampleStream>> OpenSampleStream(std::string_view url,
                                                               StreamOptions options) {
  StreamFormat format = options.format;
  if (format == StreamFormat::kAuto) format = FormatFromName(url);
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(url));
  auto reader = std::make_shared<io::RangedReader>(target.store);
  std::string object_url = target.store->Url(target.key);
  ASSIGN_OR_RETURN(
      std::unique_ptr<ByteSource> source,
      ByteSource::Open(reader, target.key, object_url, options.chunk_bytes, options.read_ahead));
  if (format == StreamFormat::kAuto) {
    // Not from the name: from the content (sniff.h).
    ASSIGN_OR_RETURN(Buffer head,
                     source->ReadAt(0, std::min<uint64_t>(source->size(), kSniffBytes)));
    ASSIGN_OR_RETURN(format,
                     DecideFormat(head.view(), source->size(), object_url, StreamFormat::kAuto));
  }
  switch (format) {
    case StreamFormat::kShard: {
      absl::Notification loaded;
      absl::StatusOr<ShardIndex> index;
      LoadShardIndexAsync(*reader, target.key, object_url, source->size(),
                          [&](absl::StatusOr<ShardIndex> result) {
                            index = std::move(result);
                            loaded.Notify();
                          });
      loaded.WaitForNotification();
      RETURN_IF_ERROR(index.status());
      auto stream = std::make_unique<ShardStream>(std::move(source), std::move(*index), options);
      RETURN_IF_ERROR(stream->Start());
      return stream;
    }
    case StreamFormat::kTfRecord:
      return std::make_unique<TfRecordStream>(std::move(source), options);
    case StreamFormat::kTar:
      return std::make_unique<TarStream>(std::move(source), options);
    case StreamFormat::kAuto:
      break;
  }
  return absl::InternalError("unreachable");
}

std::unique_ptr<SampleStream> OpenSampleStreams(std::vector<std::string> urls,
                                                StreamOptions options) {
  return std::make_unique<ConcatStream>(std::move(urls), std::move(options));
}

}  // namespace stoker::format
