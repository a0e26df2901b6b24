#include "stoker/data/sources_format.h"

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

#ifdef STOKER_HAVE_FORMAT
#include "stoker/format/sample_stream.h"
#include "stoker/format/sharded_dataset.h"
#endif

namespace stoker::data {

#ifdef STOKER_HAVE_FORMAT
namespace {

Element ToElement(format::Sample sample) {
  Element e;
  for (format::Field& f : sample.fields) e.fields[f.name] = Tensor::Bytes(std::move(f.value));
  e.keys.push_back(std::move(sample.key));
  e.sample_index = sample.index;
  return e;
}

class FormatIndexedSource : public IndexedSource {
 public:
  explicit FormatIndexedSource(std::shared_ptr<format::ShardedDataset> ds) : ds_(std::move(ds)) {}
  int64_t size() const override { return static_cast<int64_t>(ds_->size()); }
  absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const override {
    std::vector<uint64_t> wanted(indices.begin(), indices.end());
    ASSIGN_OR_RETURN(std::vector<format::Sample> samples, ds_->ReadSamples(wanted));
    std::vector<Element> out;
    out.reserve(samples.size());
    for (format::Sample& s : samples) out.push_back(ToElement(std::move(s)));
    return out;
  }

 private:
  std::shared_ptr<format::ShardedDataset> ds_;
};

class FormatStream : public ElementStream {
 public:
  FormatStream(std::unique_ptr<format::SampleStream> s,
               std::shared_ptr<format::CorruptionReport> report)
      : s_(std::move(s)), report_(std::move(report)) {}
  absl::StatusOr<std::optional<Element>> Next() override {
    ASSIGN_OR_RETURN(std::optional<format::Sample> s, s_->Next());
    if (!s) return std::nullopt;
    return ToElement(std::move(*s));
  }
  int64_t skipped() const override { return static_cast<int64_t>(report_->count()); }

 private:
  std::unique_ptr<format::SampleStream> s_;
  std::shared_ptr<format::CorruptionReport> report_;
};

class FormatStreamSource : public StreamSource {
 public:
  FormatStreamSource(std::vector<std::string> urls, bool tar, bool skip_corrupt)
      : urls_(std::move(urls)), tar_(tar), skip_corrupt_(skip_corrupt) {}
  int num_shards() const override { return static_cast<int>(urls_.size()); }
  absl::StatusOr<std::unique_ptr<ElementStream>> OpenShard(int shard) const override {
    format::StreamOptions options;
    options.format = tar_ ? format::StreamFormat::kTar : format::StreamFormat::kTfRecord;
    options.on_corrupt = skip_corrupt_ ? format::OnCorrupt::kSkip : format::OnCorrupt::kFail;
    options.report = std::make_shared<format::CorruptionReport>();
    ASSIGN_OR_RETURN(auto s, format::OpenSampleStream(urls_[shard], options));
    return std::unique_ptr<ElementStream>(new FormatStream(std::move(s), options.report));
  }

 private:
  std::vector<std::string> urls_;
  bool tar_;
  bool skip_corrupt_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(const std::string& url,
                                                                 bool skip_corrupt,
                                                                 const std::string& direct_io) {
  format::DatasetOptions options;
  options.on_corrupt = skip_corrupt ? format::OnCorrupt::kSkip : format::OnCorrupt::kFail;
  if (direct_io == "on") options.direct_io = format::DatasetOptions::DirectIo::kOn;
  if (direct_io == "off") options.direct_io = format::DatasetOptions::DirectIo::kOff;
  ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
                   format::ShardedDataset::Open(url, options));
  return std::shared_ptr<IndexedSource>(new FormatIndexedSource(std::move(ds)));
}

absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt) {
  return std::shared_ptr<StreamSource>(new FormatStreamSource(std::move(urls), tar, skip_corrupt));
}

#else

absl::StatusOr<std::shared_ptr<IndexedSource>> OpenFormatDataset(const std::string& url,
                                                                 bool skip_corrupt,
                                                                 const std::string& direct_io) {
  return absl::UnimplementedError(
      StrCat("cannot open '", url, "': this build has no shard format layer (stoker_format)"));
}

absl::StatusOr<std::shared_ptr<StreamSource>> OpenFormatStream(std::vector<std::string> urls,
                                                               bool tar, bool skip_corrupt) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}

#endif

}  // namespace stoker::data
