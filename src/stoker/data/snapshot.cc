#include "stoker/data/snapshot.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

#ifdef STOKER_HAVE_FORMAT
#include "stoker/core/logging.h"
#include "stoker/format/manifest.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/shard_writer.h"
#include "stoker/io/url.h"
#endif

namespace stoker::data {

using json = nlohmann::json;

absl::StatusOr<std::string> EncodeSnapshotMeta(const Element& e) {
  if (e.keys.empty() || e.keys.front().empty())
    return absl::InvalidArgumentError(
        "a snapshot stores elements with keys; this element has none (a record needs a key)");
  json tensors = json::object();
  for (const auto& [name, t] : e.fields) {
    if (name == kSnapshotMetaField)
      return absl::InvalidArgumentError(StrCat("element ", e.FirstKey(), ": field name ", name,
                                               " is reserved for the snapshot's own use"));
    if (t.device >= 0)
      return absl::InvalidArgumentError(StrCat("element ", e.FirstKey(), ": field ", name,
                                               " is in GPU memory; a snapshot stores host tensors "
                                               "(leave to_device out of the spec)"));
    tensors[name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}};
  }
  return json{{"keys", e.keys}, {"tensors", std::move(tensors)}}.dump();
}

absl::StatusOr<Element> DecodeSnapshotElement(std::string_view meta,
                                              std::vector<std::pair<std::string, Buffer>> fields,
                                              std::string_view where) {
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(
        StrCat(where, ": snapshot record: ", what, " (the snapshot is damaged; write it again)"));
  };
  json doc = json::parse(meta, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array() || doc["keys"].empty() ||
      !doc.contains("tensors") || !doc["tensors"].is_object())
    return bad(StrCat(kSnapshotMetaField, " is not {\"keys\": [...], \"tensors\": {...}}"));
  Element e;
  for (const json& k : doc["keys"]) {
    if (!k.is_string()) return bad("a key is not a string");
    e.keys.push_back(k.get<std::string>());
  }
  const json& tensors = doc["tensors"];
  size_t matched = 0;
  for (auto& [name, value] : fields) {
    if (name == kSnapshotMetaField) continue;
    auto it = tensors.find(name);
    if (it == tensors.end()) return bad(StrCat("field ", name, " is not described"));
    ++matched;
    const json& d = *it;
    if (!d.is_object() || !d.contains("dtype") || !d["dtype"].is_string() || !d.contains("shape") ||
        !d["shape"].is_array())
      return bad(StrCat("field ", name, ": expected {\"dtype\": ..., \"shape\": [...]}"));
    std::optional<DType> dtype = DTypeFromName(d["dtype"].get<std::string>());
    if (!dtype) return bad(StrCat("field ", name, ": unknown dtype"));
    Tensor t;
    t.dtype = *dtype;
    uint64_t values = 1;
    for (const json& n : d["shape"]) {
      constexpr uint64_t kMax = uint64_t{1} << 40;
      if (!n.is_number_unsigned() || n.get<uint64_t>() > kMax)
        return bad(StrCat("field ", name, ": a dimension is not an integer in [0, 2^40]"));
      const uint64_t dim = n.get<uint64_t>();
      if (dim != 0 && values > kMax / dim)
        return bad(StrCat("field ", name, ": the shape holds more than 2^40 values"));
      values *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (t.dtype == DType::kBytes) {
      if (!t.shape.empty()) return bad(StrCat("field ", name, ": a bytes field has shape []"));
    } else if (values * DTypeSize(t.dtype) != value.size()) {
      return bad(StrCat("field ", name, ": ", value.size(), " bytes for ", DTypeName(t.dtype),
                        " of shape ", t.ShapeString()));
    }
    // Fields read from a shard are slices of what was read: copy one that is not aligned for
    // its dtype, so that its values can be read in place.
    if (reinterpret_cast<uintptr_t>(value.data()) % DTypeSize(t.dtype) != 0)
      value = Buffer::Copy(value.view());
    t.data = std::move(value);
    e.fields[name] = std::move(t);
  }
  if (matched != tensors.size()) return bad("a described field is missing from the record");
  return e;
}

#ifdef STOKER_HAVE_FORMAT
namespace {

class PartWriter : public SnapshotPartWriter {
 public:
  explicit PartWriter(std::unique_ptr<format::ShardWriter> w) : w_(std::move(w)) {}
  absl::Status Add(const Element& e) override {
    ASSIGN_OR_RETURN(std::string meta, EncodeSnapshotMeta(e));
    format::Sample s;
    s.key = e.keys.front();
    for (const auto& [name, t] : e.fields) s.fields.push_back({name, t.data});
    s.fields.push_back({std::string(kSnapshotMetaField), Buffer::FromString(std::move(meta))});
    return w_->Add(s);
  }
  absl::StatusOr<SnapshotPart> Close() override {
    std::set<std::string> fields = w_->fields();
    ASSIGN_OR_RETURN(format::ManifestShard shard, w_->Close());
    return SnapshotPart{shard.name, shard.samples, shard.bytes, std::move(fields)};
  }

 private:
  std::unique_ptr<format::ShardWriter> w_;
};

format::Manifest ManifestOf(const std::vector<SnapshotPart>& parts) {
  format::Manifest m;
  std::set<std::string> fields;
  for (const SnapshotPart& p : parts) {
    m.shards.push_back({p.name, p.records, p.bytes});
    m.total_samples += p.records;
    m.total_bytes += p.bytes;
    fields.insert(p.fields.begin(), p.fields.end());
  }
  m.fields.assign(fields.begin(), fields.end());
  return m;
}

// The parts a reader may read now: manifest.json's (final) or else the progress file's; none yet
// when neither exists.
struct Listing {
  std::vector<format::ManifestShard> shards;
  bool final = false;
};

absl::StatusOr<Listing> ReadListing(io::ObjectStore& store, const std::string& prefix) {
  for (std::string_view name : {format::kManifestName, kSnapshotProgressName}) {
    const std::string key = StrCat(prefix, name);
    absl::StatusOr<Buffer> bytes = store.Read(key);
    if (absl::IsNotFound(bytes.status())) continue;
    if (!bytes.ok()) return bytes.status();
    ASSIGN_OR_RETURN(format::Manifest m, format::ParseManifest(bytes->view(), store.Url(key)));
    return Listing{std::move(m.shards), name == format::kManifestName};
  }
  return Listing{};
}

class WaitingStream : public ElementStream {
 public:
  WaitingStream(io::StoreAndKey target, std::string url, std::chrono::milliseconds timeout,
                bool skip_corrupt)
      : target_(std::move(target)), url_(std::move(url)), timeout_(timeout) {
    options_.on_corrupt = skip_corrupt ? format::OnCorrupt::kSkip : format::OnCorrupt::kFail;
    options_.report = std::make_shared<format::CorruptionReport>();
  }

  absl::StatusOr<std::optional<Element>> Next() override {
    while (true) {
      if (part_) {
        ASSIGN_OR_RETURN(std::optional<format::Sample> s, part_->Next());
        if (s) {
          const std::string where = StrCat(target_.store->Url(part_key_), " key ", s->key);
          const Buffer* meta = s->Find(kSnapshotMetaField);
          if (meta == nullptr)
            return absl::DataLossError(
                StrCat(where, ": not a snapshot record (no ", kSnapshotMetaField, " field)"));
          std::vector<std::pair<std::string, Buffer>> fields;
          for (format::Field& f : s->fields) fields.emplace_back(f.name, std::move(f.value));
          ASSIGN_OR_RETURN(Element e,
                           DecodeSnapshotElement(meta->view(), std::move(fields), where));
          e.sample_index = index_++;
          return e;
        }
        part_.reset();
        ++next_part_;
      }
      if (next_part_ < shards_.size()) {
        part_key_ = StrCat(target_.key, shards_[next_part_].name);
        ASSIGN_OR_RETURN(part_, format::OpenSampleStream(target_.store->Url(part_key_), options_));
        continue;
      }
      if (final_) return std::nullopt;
      RETURN_IF_ERROR(Poll());
    }
  }
  int64_t skipped() const override { return static_cast<int64_t>(options_.report->count()); }

 private:
  // Waits for the listing to grow (or become final), up to the timeout since the last growth.
  absl::Status Poll() {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      ASSIGN_OR_RETURN(Listing l, ReadListing(*target_.store, target_.key));
      if (l.shards.size() < shards_.size() ||
          !std::equal(shards_.begin(), shards_.end(), l.shards.begin()))
        return absl::FailedPreconditionError(
            StrCat("snapshot ", url_,
                   ": its list of parts changed under the reader (was the "
                   "snapshot written again?)"));
      if (l.shards.size() > shards_.size() || l.final) {
        shards_ = std::move(l.shards);
        final_ = l.final;
        return absl::OkStatus();
      }
      // No new part: did the writer give up?
      const std::string error_key = StrCat(target_.key, kSnapshotErrorName);
      absl::StatusOr<Buffer> error = target_.store->Read(error_key);
      if (error.ok())
        return absl::AbortedError(StrCat("snapshot ", url_, " failed (",
                                         target_.store->Url(error_key), "): ", error->view()));
      if (std::chrono::steady_clock::now() >= deadline)
        return absl::DeadlineExceededError(
            StrCat("snapshot ", url_, ": no new part for ",
                   std::chrono::duration<double>(timeout_).count(), " s and no ",
                   format::kManifestName, " yet (", shards_.size(),
                   " parts read); is `stoker snapshot` still writing it? "
                   "(\"wait_timeout_s\" sets how long to wait)"));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the store
    }
  }

  io::StoreAndKey target_;
  std::string url_;
  std::chrono::milliseconds timeout_;
  format::StreamOptions options_;
  std::vector<format::ManifestShard> shards_;
  bool final_ = false;
  size_t next_part_ = 0;
  std::string part_key_;
  std::unique_ptr<format::SampleStream> part_;
  uint64_t index_ = 0;
};

class WaitingSource : public StreamSource {
 public:
  WaitingSource(io::StoreAndKey target, std::string url, std::chrono::milliseconds timeout,
                bool skip_corrupt)
      : target_(std::move(target)),
        url_(std::move(url)),
        timeout_(timeout),
        skip_corrupt_(skip_corrupt) {}
  int num_shards() const override { return 1; }
  absl::StatusOr<std::unique_ptr<ElementStream>> OpenShard(int shard) const override {
    return std::unique_ptr<ElementStream>(
        new WaitingStream(target_, url_, timeout_, skip_corrupt_));
  }

 private:
  io::StoreAndKey target_;
  std::string url_;
  std::chrono::milliseconds timeout_;
  bool skip_corrupt_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotPartWriter>> SnapshotPartWriter::Open(
    std::string_view prefix_url, std::string name) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, format::OpenDatasetPrefix(prefix_url));
  std::string key = StrCat(target.key, name);
  ASSIGN_OR_RETURN(auto w, format::ShardWriter::Open(target.store, key, std::move(name)));
  return std::unique_ptr<SnapshotPartWriter>(new PartWriter(std::move(w)));
}

absl::Status CheckSnapshotDestination(std::string_view url) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, format::OpenDatasetPrefix(url));
  io::ListOptions list;
  list.prefix = target.key;
  list.max_objects = 1;
  ASSIGN_OR_RETURN(io::ListResult found, target.store->List(list));
  if (found.objects.empty()) return absl::OkStatus();
  const std::string& key = found.objects.front().key;
  const bool snapshot = key.ends_with(format::kManifestName) ||
                        key.ends_with(kSnapshotProgressName) || key.ends_with(kSnapshotErrorName);
  return absl::FailedPreconditionError(
      StrCat("snapshot destination ", url, " is not empty (it holds ", target.store->Url(key),
             snapshot ? ", so it already holds a dataset or snapshot" : "",
             "); give a new folder or prefix, or delete what is there"));
}

absl::Status WriteSnapshotProgress(std::string_view url, const std::vector<SnapshotPart>& parts) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, format::OpenDatasetPrefix(url));
  const std::string key = StrCat(target.key, kSnapshotProgressName);
  absl::Status s =
      target.store->Put(key, Buffer::FromString(format::SerializeManifest(ManifestOf(parts))));
  return s.ok() ? s : Annotate(s, StrCat("writing ", target.store->Url(key)));
}

void WriteSnapshotError(std::string_view url, std::string_view message) {
  absl::StatusOr<io::StoreAndKey> target = format::OpenDatasetPrefix(url);
  if (!target.ok()) return;
  const std::string key = StrCat(target->key, kSnapshotErrorName);
  absl::Status s = target->store->Put(key, Buffer::Copy(message));
  if (!s.ok())
    spdlog::warn("could not record the snapshot's failure at {}: {}", target->store->Url(key),
                 s.ToString());
}

absl::StatusOr<int64_t> FinishSnapshot(std::string_view url,
                                       const std::vector<SnapshotPart>& parts) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, format::OpenDatasetPrefix(url));
  const std::string manifest_key = StrCat(target.key, format::kManifestName);
  const format::Manifest m = ManifestOf(parts);
  absl::Status s =
      target.store->Put(manifest_key, Buffer::FromString(format::SerializeManifest(m)));
  if (!s.ok()) return Annotate(s, StrCat("writing ", target.store->Url(manifest_key)));
  std::set<std::string> keep = {manifest_key};
  for (const SnapshotPart& p : parts) keep.insert(StrCat(target.key, p.name));
  io::ListOptions list;
  list.prefix = target.key;
  ASSIGN_OR_RETURN(io::ListResult found, target.store->List(list));
  int64_t deleted = 0;
  for (const io::ObjectInfo& o : found.objects) {
    if (keep.count(o.key)) continue;
    absl::Status d = target.store->Delete(o.key);
    if (!d.ok()) return Annotate(d, StrCat("deleting ", target.store->Url(o.key)));
    ++deleted;
  }
  return deleted;
}

absl::StatusOr<std::shared_ptr<StreamSource>> OpenSnapshotStream(const std::string& url,
                                                                 std::chrono::milliseconds timeout,
                                                                 bool skip_corrupt) {
  ASSIGN_OR_RETURN(io::StoreAndKey target, format::OpenDatasetPrefix(url));
  return std::shared_ptr<StreamSource>(
      new WaitingSource(std::move(target), url, timeout, skip_corrupt));
}

#else

absl::StatusOr<std::unique_ptr<SnapshotPartWriter>> SnapshotPartWriter::Open(
    std::string_view prefix_url, std::string name) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}
absl::Status CheckSnapshotDestination(std::string_view url) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}
absl::Status WriteSnapshotProgress(std::string_view url, const std::vector<SnapshotPart>& parts) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}
void WriteSnapshotError(std::string_view url, std::string_view message) {}
absl::StatusOr<int64_t> FinishSnapshot(std::string_view url,
                                       const std::vector<SnapshotPart>& parts) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}
absl::StatusOr<std::shared_ptr<StreamSource>> OpenSnapshotStream(const std::string& url,
                                                                 std::chrono::milliseconds timeout,
                                                                 bool skip_corrupt) {
  return absl::UnimplementedError("this build has no shard format layer (stoker_format)");
}

#endif

}  // namespace stoker::data
