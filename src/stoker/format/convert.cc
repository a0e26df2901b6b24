#include "stoker/format/convert.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "absl/synchronization/mutex.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread_pool.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/shard_writer.h"
#include "stoker/format/sniff.h"
#include "stoker/io/url.h"

namespace stoker::format {
namespace {

struct FileRef {
  std::string key;  // store key
  uint64_t size = 0;
};

// A folder-tree sample before its files are read.
struct PlannedSample {
  std::string key;  // <class>/<stem>
  uint32_t cls = 0;
  std::vector<std::pair<std::string, FileRef>> files;  // field name → file
  uint64_t bytes = 0;
};

std::string ShardName(std::string_view stem, size_t a, std::optional<size_t> b = std::nullopt) {
  char name[64];
  if (b.has_value()) {
    std::snprintf(name, sizeof(name), "-%05zu-%05zu.stk", a, *b);
  } else {
    std::snprintf(name, sizeof(name), "-%05zu.stk", a);
  }
  return StrCat(stem, name);
}

// Runs tasks on a pool and collects the first error.
class TaskGroup {
 public:
  explicit TaskGroup(int threads) : pool_("convert", std::max(threads, 1)) {}
  void Run(absl::AnyInvocable<absl::Status() &&> task) {
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    pool_.Schedule([this, task = std::move(task)]() mutable {
      bool failed;
      {
        absl::MutexLock lock(&mu_);
        failed = !error_.ok();
      }
      absl::Status status = failed ? absl::OkStatus() : std::move(task)();
      absl::MutexLock lock(&mu_);
      if (!status.ok() && error_.ok()) error_ = status;
      --pending_;
    });
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    mu_.Await(absl::Condition(&idle));
    return error_;
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  ThreadPool pool_;  // last: its destructor drains tasks that still use mu_
};

struct Output {
  std::shared_ptr<io::ObjectStore> store;
  std::string prefix_key;
  ShardWriterOptions writer_options;
};

absl::Status Note(ConvertProgress* progress, const Sample& sample) {
  if (progress != nullptr) {
    progress->samples.fetch_add(1, std::memory_order_relaxed);
    progress->input_bytes.fetch_add(sample.ByteSize(), std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::StatusOr<ConvertSummary> ConvertFolderTree(io::ObjectStore& source,
                                                 const std::vector<FileRef>& files,
                                                 std::string_view root_key,
                                                 const std::vector<std::string>& class_folders,
                                                 const Output& out, const ConvertOptions& options) {
  std::map<std::string, PlannedSample> by_key;
  // Every class folder, empty ones included, so indices match torchvision's ImageFolder.
  std::set<std::string> classes(class_folders.begin(), class_folders.end());
  for (const FileRef& file : files) {
    std::string_view rel = std::string_view(file.key).substr(root_key.size());
    size_t slash = rel.find('/');
    if (slash == std::string_view::npos || rel.find('/', slash + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat(source.Url(file.key),
                 " is not of the form <root>/<class>/<file>; a folder tree "
                 "holds one sub-folder per class (or give .tar / .tfrecord files)"));
    }
    std::string cls(rel.substr(0, slash));
    std::string_view name = rel.substr(slash + 1);
    size_t dot = name.find('.');
    if (dot == std::string_view::npos || dot == 0 || dot + 1 == name.size()) {
      return absl::InvalidArgumentError(
          StrCat(source.Url(file.key), " has no extension to name its field (e.g. .jpg)"));
    }
    std::string field = FolderFieldName(name.substr(dot + 1));
    if (field == "cls") {
      return absl::InvalidArgumentError(
          StrCat(source.Url(file.key), ": the field 'cls' is reserved for the class index"));
    }
    classes.insert(cls);
    PlannedSample& s = by_key[StrCat(cls, "/", name.substr(0, dot))];
    s.key = StrCat(cls, "/", name.substr(0, dot));
    for (const auto& [existing, ref] : s.files) {
      if (existing == field) {
        return absl::InvalidArgumentError(
            StrCat("two files give sample ", s.key, " field ", field));
      }
    }
    s.files.push_back({field, file});
    s.bytes += file.size;
  }
  std::map<std::string, uint32_t> class_index;
  for (const std::string& c : classes) class_index.emplace(c, class_index.size());

  // Plan shards by cumulative size (the sizes come from the listing).
  std::vector<std::vector<const PlannedSample*>> shards;
  uint64_t current = 0, total = 0;
  for (auto& [key, s] : by_key) {
    s.cls = class_index[key.substr(0, key.find('/'))];
    if (shards.empty() || current >= options.shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&s);
    current += s.bytes + s.key.size() + 64;
    total += s.bytes;
  }
  if (options.progress != nullptr) options.progress->total_input_bytes = total;

  std::vector<std::optional<ManifestShard>> written(shards.size());
  std::vector<std::set<std::string>> fields(shards.size());
  {
    TaskGroup group(options.parallelism);
    for (size_t j = 0; j < shards.size(); ++j) {
      group.Run([&, j]() -> absl::Status {
        std::string name = ShardName("shard", j);
        ASSIGN_OR_RETURN(
            std::unique_ptr<ShardWriter> writer,
            ShardWriter::Open(out.store, StrCat(out.prefix_key, name), name, out.writer_options));
        for (const PlannedSample* planned : shards[j]) {
          Sample sample;
          sample.key = planned->key;
          std::vector<std::pair<std::string, FileRef>> sorted = planned->files;
          std::sort(sorted.begin(), sorted.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
          sample.fields.push_back({"cls", Buffer::Copy(std::to_string(planned->cls))});
          for (const auto& [field, ref] : sorted) {
            ASSIGN_OR_RETURN(Buffer bytes, source.Read(ref.key));
            sample.fields.push_back({field, std::move(bytes)});
          }
          RETURN_IF_ERROR(writer->Add(sample));
          RETURN_IF_ERROR(Note(options.progress, sample));
        }
        fields[j] = writer->fields();
        ASSIGN_OR_RETURN(written[j], writer->Close());
        if (options.progress != nullptr) options.progress->shards.fetch_add(1);
        return absl::OkStatus();
      });
    }
    RETURN_IF_ERROR(group.Wait());
  }
  ConvertSummary summary;
  summary.kind = SourceKind::kFolderTree;
  summary.inputs = files.size();
  std::vector<ManifestShard> list;
  std::set<std::string> all_fields;
  for (size_t j = 0; j < shards.size(); ++j) {
    list.push_back(*written[j]);
    all_fields.insert(fields[j].begin(), fields[j].end());
  }
  ASSIGN_OR_RETURN(summary.manifest,
                   WriteManifest(*out.store, out.prefix_key, list, all_fields,
                                 std::vector<std::string>(classes.begin(), classes.end())));
  return summary;
}

absl::StatusOr<ConvertSummary> ConvertStreams(SourceKind kind, std::vector<std::string> urls,
                                              uint64_t total_bytes, const Output& out,
                                              const ConvertOptions& options) {
  if (options.progress != nullptr) options.progress->total_input_bytes = total_bytes;
  std::vector<std::vector<ManifestShard>> written(urls.size());
  std::vector<std::set<std::string>> fields(urls.size());
  {
    TaskGroup group(options.parallelism);
    for (size_t i = 0; i < urls.size(); ++i) {
      group.Run([&, i]() -> absl::Status {
        StreamOptions stream_options;
        stream_options.format =
            kind == SourceKind::kTar ? StreamFormat::kTar : StreamFormat::kTfRecord;
        ASSIGN_OR_RETURN(std::unique_ptr<SampleStream> stream,
                         OpenSampleStream(urls[i], stream_options));
        std::unique_ptr<ShardWriter> writer;
        auto close = [&]() -> absl::Status {
          fields[i].insert(writer->fields().begin(), writer->fields().end());
          ASSIGN_OR_RETURN(ManifestShard done, writer->Close());
          written[i].push_back(std::move(done));
          writer.reset();
          if (options.progress != nullptr) options.progress->shards.fetch_add(1);
          return absl::OkStatus();
        };
        while (true) {
          ASSIGN_OR_RETURN(std::optional<Sample> sample, stream->Next());
          if (!sample.has_value()) break;
          if (writer != nullptr && writer->bytes() >= options.shard_bytes) RETURN_IF_ERROR(close());
          if (writer == nullptr) {
            std::string name = ShardName("shard", i, written[i].size());
            ASSIGN_OR_RETURN(writer, ShardWriter::Open(out.store, StrCat(out.prefix_key, name),
                                                       name, out.writer_options));
          }
          RETURN_IF_ERROR(writer->Add(*sample));
          RETURN_IF_ERROR(Note(options.progress, *sample));
        }
        if (writer != nullptr) RETURN_IF_ERROR(close());
        return absl::OkStatus();
      });
    }
    RETURN_IF_ERROR(group.Wait());
  }
  ConvertSummary summary;
  summary.kind = kind;
  summary.inputs = urls.size();
  std::vector<ManifestShard> list;
  std::set<std::string> all_fields;
  for (size_t i = 0; i < urls.size(); ++i) {
    list.insert(list.end(), written[i].begin(), written[i].end());
    all_fields.insert(fields[i].begin(), fields[i].end());
  }
  ASSIGN_OR_RETURN(summary.manifest, WriteManifest(*out.store, out.prefix_key, list, all_fields));
  return summary;
}

}  // namespace

std::string FolderFieldName(std::string_view extension) {
  std::string field(extension);
  for (char& c : field) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t last = field.rfind('.');
  last = last == std::string::npos ? 0 : last + 1;
  std::string_view tail = std::string_view(field).substr(last);
  if (tail == "jpeg") field = StrCat(field.substr(0, last), "jpg");
  if (tail == "tiff") field = StrCat(field.substr(0, last), "tif");
  return field;
}

namespace {

// Symbolic links under a local folder whose target is missing (the listing cannot see them).
void FindBrokenLinks(const std::string& root_path, ConvertSummary* summary) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root_path, ec)) return;
  for (auto it = fs::recursive_directory_iterator(
           root_path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code link_ec;
    if (!it->is_symlink(link_ec) || fs::exists(it->path(), link_ec)) continue;
    std::string rel = fs::relative(it->path(), root_path, link_ec).string();
    if (rel.starts_with(".") || rel.find("/.") != std::string::npos) continue;  // hidden anyway
    ++summary->broken_links;
    if (summary->broken_link_examples.size() < 5) {
      summary->broken_link_examples.push_back(
          StrCat(rel, " -> ", fs::read_symlink(it->path(), link_ec).string()));
    }
  }
}

bool IsLocal(const io::ObjectStore& store) {
  std::string root = store.Url("");
  return root.find("://") == std::string::npos;
}

}  // namespace

const char* SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kFolderTree:
      return "folder tree";
    case SourceKind::kTar:
      return "WebDataset tar";
    case SourceKind::kTfRecord:
      return "TFRecord";
  }
  return "?";
}

absl::StatusOr<SourceKind> ParseSourceKind(std::string_view name) {
  if (name == "tfrecord") return SourceKind::kTfRecord;
  if (name == "tar" || name == "wds") return SourceKind::kTar;
  if (name == "tree") return SourceKind::kFolderTree;
  return absl::InvalidArgumentError(StrCat(
      "--input-format: expected tfrecord, tar (or its synonym wds) or tree; got '", name, "'"));
}

namespace {

StreamFormat ToStreamFormat(SourceKind kind) {
  return kind == SourceKind::kTar ? StreamFormat::kTar : StreamFormat::kTfRecord;
}

// A file of the source folder and what its first bytes say.
struct Candidate {
  FileRef file;
  std::string rel;  // the path below the source root
  std::string head;
  bool head_read = false;
  StreamFormat format = StreamFormat::kAuto;  // after sniffing: kAuto when not recognised
  std::string why_not;
};

// Reads the first bytes of each file that has not been read yet, several at a time.
absl::Status ReadHeads(io::ObjectStore& store, const std::vector<Candidate*>& files,
                       int parallelism) {
  TaskGroup group(std::max(parallelism, 8));
  for (Candidate* c : files) {
    if (c->head_read) continue;
    group.Run([&store, c]() -> absl::Status {
      ASSIGN_OR_RETURN(c->head, ReadHead(store, c->file.key, c->file.size));
      c->head_read = true;
      return absl::OkStatus();
    });
  }
  return group.Wait();
}

// The path with each run of digits as one '#': the shards of one set ("train-00000-of-01024",
// "train-00001-of-01024", "shard-000007") give the same.
std::string DigitBlind(std::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    bool digit = path[i] >= '0' && path[i] <= '9';
    if (!digit) {
      out.push_back(path[i]);
    } else if (i == 0 || path[i - 1] < '0' || path[i - 1] > '9') {
      out.push_back('#');
    }
  }
  return out;
}

// True when the file name (after the last '/') has no '.' but at its start: no extension, so no
// folder-tree field name.
bool NoExtension(std::string_view rel) {
  size_t slash = rel.rfind('/');
  std::string_view base = slash == std::string_view::npos ? rel : rel.substr(slash + 1);
  return base.find('.', 1) == std::string_view::npos;
}

struct StreamPlan {
  SourceKind kind = SourceKind::kTfRecord;
  std::vector<std::string> urls;  // in name order
  uint64_t total_bytes = 0;
  uint64_t unrecognised = 0;
  std::vector<std::string> unrecognised_examples;
};

// A folder whose files `stoker convert` was told are all of `want` (TFRecord or tar): each must
// be (an empty one holds no samples); the first that is not, in name order, is the error.
absl::StatusOr<StreamPlan> PlanAsked(io::ObjectStore& store, std::vector<Candidate>& files,
                                     SourceKind want, int parallelism) {
  std::vector<Candidate*> all;
  for (Candidate& c : files) all.push_back(&c);
  RETURN_IF_ERROR(ReadHeads(store, all, parallelism));
  StreamPlan plan;
  plan.kind = want;
  for (const Candidate& c : files) {
    std::string url = store.Url(c.file.key);
    RETURN_IF_ERROR(DecideFormat(c.head, c.file.size, url, ToStreamFormat(want)).status());
    plan.urls.push_back(std::move(url));
    plan.total_bytes += c.file.size;
  }
  return plan;
}

// A folder read with no --input-format: nullopt when it is a folder tree, else the TFRecord or
// tar files to convert (docs/format.md, "Telling the input formats apart").
absl::StatusOr<std::optional<StreamPlan>> PlanAuto(io::ObjectStore& store, std::string_view src,
                                                   std::vector<Candidate>& files, int parallelism) {
  // Files a folder tree cannot hold, or whose name says a stream format: the candidates. Only
  // they are read first, so a tree of a million images costs no reads here.
  std::vector<Candidate*> candidates;
  bool named = false;
  for (Candidate& c : files) {
    StreamFormat by_name = FormatFromName(c.rel);
    bool stream_name = by_name == StreamFormat::kTar || by_name == StreamFormat::kTfRecord;
    named |= stream_name;
    if (stream_name || c.rel.find('/') == std::string::npos || NoExtension(c.rel)) {
      candidates.push_back(&c);
    }
  }
  if (candidates.empty()) return std::nullopt;
  RETURN_IF_ERROR(ReadHeads(store, candidates, parallelism));
  auto sniff = [&](Candidate& c) -> absl::Status {
    StreamFormat by_name = FormatFromName(c.rel);
    if (by_name == StreamFormat::kTar || by_name == StreamFormat::kTfRecord) {
      // Named as one: it must be one (or empty).
      ASSIGN_OR_RETURN(
          c.format, DecideFormat(c.head, c.file.size, store.Url(c.file.key), StreamFormat::kAuto));
      return absl::OkStatus();
    }
    Sniffed sniffed = SniffFormat(c.head, c.file.size);
    c.format = sniffed.format == StreamFormat::kShard ? StreamFormat::kAuto : sniffed.format;
    c.why_not = sniffed.format == StreamFormat::kShard ? "a stoker shard" : sniffed.why_not;
    return absl::OkStatus();
  };
  const Candidate* first_tfrecord = nullptr;
  const Candidate* first_tar = nullptr;
  auto note = [&](const Candidate& c) {
    if (c.format == StreamFormat::kTfRecord && first_tfrecord == nullptr) first_tfrecord = &c;
    if (c.format == StreamFormat::kTar && first_tar == nullptr) first_tar = &c;
  };
  for (Candidate* c : candidates) {
    RETURN_IF_ERROR(sniff(*c));
    note(*c);
  }
  if (first_tfrecord == nullptr && first_tar == nullptr && !named) return std::nullopt;
  // A folder of TFRecord or tar files: what else it holds is read too.
  std::vector<Candidate*> rest;
  for (Candidate& c : files) {
    if (!c.head_read) rest.push_back(&c);
  }
  RETURN_IF_ERROR(ReadHeads(store, rest, parallelism));
  for (Candidate* c : rest) {
    RETURN_IF_ERROR(sniff(*c));
    note(*c);
  }
  if (first_tfrecord != nullptr && first_tar != nullptr) {
    return absl::InvalidArgumentError(StrCat(src, " holds TFRecord files (", first_tfrecord->rel,
                                             ") and WebDataset tars (", first_tar->rel,
                                             "); convert them separately"));
  }
  StreamPlan plan;
  plan.kind = first_tar != nullptr ? SourceKind::kTar : SourceKind::kTfRecord;
  std::set<std::string> shapes;  // the digit-blind names of the recognised files
  for (const Candidate& c : files) {
    if (c.format != StreamFormat::kAuto) shapes.insert(DigitBlind(c.rel));
  }
  for (const Candidate& c : files) {
    if (c.format == StreamFormat::kAuto) {
      bool sibling = shapes.contains(DigitBlind(c.rel));
      if (sibling && c.file.size > 0) {
        // One of the set by its name, but not readable: a damaged shard, not a stray file.
        return absl::DataLossError(
            StrCat(store.Url(c.file.key), ": named like the other ", SourceKindName(plan.kind),
                   " files of ", src, " but it is not one: ", c.why_not,
                   ". Replace the damaged file, or move it away to convert the others"));
      }
      if (!sibling) {
        ++plan.unrecognised;
        if (plan.unrecognised_examples.size() < 5) plan.unrecognised_examples.push_back(c.rel);
        continue;
      }
      // An empty sibling holds no samples in either format: read as an empty input.
    }
    plan.urls.push_back(store.Url(c.file.key));
    plan.total_bytes += c.file.size;
  }
  return std::optional<StreamPlan>(std::move(plan));
}

}  // namespace

absl::StatusOr<ConvertSummary> Convert(std::string_view src, std::string_view dst,
                                       const ConvertOptions& options) {
  if (options.shard_bytes == 0) return absl::InvalidArgumentError("--shard-size must be positive");
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(src));
  ASSIGN_OR_RETURN(io::StoreAndKey destination, OpenDatasetPrefix(dst));
  Output out{destination.store, destination.key, ShardWriterOptions{options.zstd_level}};
  const std::optional<SourceKind> want = options.input_format;

  // One file, or a folder (prefix)? A local folder and an S3 prefix are not objects; what else
  // keeps the Stat from answering, the listing reports too.
  std::optional<io::ObjectInfo> file;
  if (!source.key.empty() && !source.key.ends_with("/")) {
    absl::StatusOr<io::ObjectInfo> info = source.store->Stat(source.key);
    if (info.ok()) file = std::move(*info);
  }

  absl::StatusOr<ConvertSummary> summary;
  if (file.has_value()) {
    if (want == SourceKind::kFolderTree) {
      return absl::InvalidArgumentError(
          StrCat(src, " is a file; --input-format tree reads a folder (root/<class>/<file>)"));
    }
    ASSIGN_OR_RETURN(std::string head, ReadHead(*source.store, source.key, file->size));
    ASSIGN_OR_RETURN(StreamFormat format,
                     DecideFormat(head, file->size, source.store->Url(source.key),
                                  want.has_value() ? ToStreamFormat(*want) : StreamFormat::kAuto));
    if (format == StreamFormat::kShard) {
      return absl::InvalidArgumentError(
          StrCat(src,
                 " is a stoker shard already: nothing to convert (read it as a dataset, "
                 "{\"dataset\": \"",
                 src, "\"})"));
    }
    SourceKind kind = format == StreamFormat::kTar ? SourceKind::kTar : SourceKind::kTfRecord;
    summary = ConvertStreams(kind, {std::string(src)}, file->size, out, options);
  } else {
    std::string root = source.key;
    if (!root.empty() && !root.ends_with("/")) root += "/";
    ASSIGN_OR_RETURN(io::ListResult listing, source.store->List({root, "", 0}));
    std::vector<Candidate> files;
    uint64_t hidden = 0;
    std::vector<std::string> hidden_examples;
    for (const io::ObjectInfo& info : listing.objects) {
      std::string_view rel = std::string_view(info.key).substr(root.size());
      // Hidden files and folders (".DS_Store", ".git/...") are not data: left out, counted.
      if (rel.starts_with(".") || rel.find("/.") != std::string_view::npos) {
        ++hidden;
        if (hidden_examples.size() < 5) hidden_examples.emplace_back(rel);
        continue;
      }
      Candidate c;
      c.file = {info.key, info.size};
      c.rel = std::string(rel);
      files.push_back(std::move(c));
    }
    if (files.empty()) {
      return absl::NotFoundError(StrCat("no input files under ", src));
    }
    std::optional<StreamPlan> plan;
    if (want == SourceKind::kTar || want == SourceKind::kTfRecord) {
      ASSIGN_OR_RETURN(plan, PlanAsked(*source.store, files, *want, options.parallelism));
    } else if (!want.has_value()) {
      ASSIGN_OR_RETURN(plan, PlanAuto(*source.store, src, files, options.parallelism));
    }
    if (plan.has_value()) {
      summary = ConvertStreams(plan->kind, std::move(plan->urls), plan->total_bytes, out, options);
      if (summary.ok()) {
        summary->unrecognised_files = plan->unrecognised;
        summary->unrecognised_examples = std::move(plan->unrecognised_examples);
      }
    } else {
      std::vector<FileRef> refs;
      refs.reserve(files.size());
      for (const Candidate& c : files) refs.push_back(c.file);
      // The class folders: the first level below the root (an empty folder is a class too).
      ASSIGN_OR_RETURN(io::ListResult top, source.store->List({root, "/", 0}));
      std::vector<std::string> class_folders;
      for (const std::string& folder : top.common_prefixes) {
        std::string name = folder.substr(root.size(), folder.size() - root.size() - 1);
        if (!name.empty() && !name.starts_with(".")) class_folders.push_back(std::move(name));
      }
      summary = ConvertFolderTree(*source.store, refs, root, class_folders, out, options);
    }
    if (summary.ok()) {
      summary->hidden_files = hidden;
      summary->hidden_examples = std::move(hidden_examples);
      if (IsLocal(*source.store)) FindBrokenLinks(source.store->Url(root), &*summary);
    }
  }
  RETURN_IF_ERROR(summary.status());
  summary->manifest_url = destination.store->Url(StrCat(destination.key, kManifestName));
  return summary;
}

}  // namespace stoker::format
