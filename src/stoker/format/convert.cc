#include "stoker/format/convert.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "absl/synchronization/mutex.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread_pool.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/shard_writer.h"
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

bool IsTfRecordName(std::string_view key) {
  return key.ends_with(".tfrecord") || key.ends_with(".tfrecords") || key.ends_with(".tfr");
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

absl::StatusOr<ConvertSummary> Convert(std::string_view src, std::string_view dst,
                                       const ConvertOptions& options) {
  if (options.shard_bytes == 0) return absl::InvalidArgumentError("--shard-size must be positive");
  ASSIGN_OR_RETURN(io::StoreAndKey source, io::OpenUrl(src));
  ASSIGN_OR_RETURN(io::StoreAndKey destination, OpenDatasetPrefix(dst));
  Output out{destination.store, destination.key, ShardWriterOptions{options.zstd_level}};

  absl::StatusOr<ConvertSummary> summary;
  // One file?
  if (source.key.ends_with(".tar") || IsTfRecordName(source.key)) {
    ASSIGN_OR_RETURN(io::ObjectInfo info, source.store->Stat(source.key));
    SourceKind kind = source.key.ends_with(".tar") ? SourceKind::kTar : SourceKind::kTfRecord;
    summary = ConvertStreams(kind, {std::string(src)}, info.size, out, options);
  } else {
    std::string root = source.key;
    if (!root.empty() && !root.ends_with("/")) root += "/";
    ASSIGN_OR_RETURN(io::ListResult listing, source.store->List({root, "", 0}));
    std::vector<FileRef> files;
    size_t tars = 0, tfrecords = 0;
    uint64_t total = 0;
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
      files.push_back({info.key, info.size});
      tars += info.key.ends_with(".tar");
      tfrecords += IsTfRecordName(info.key);
      total += info.size;
    }
    if (files.empty()) {
      return absl::NotFoundError(StrCat("no input files under ", src));
    }
    if (tars == files.size() || tfrecords == files.size()) {
      std::vector<std::string> urls;
      urls.reserve(files.size());
      for (const FileRef& f : files) urls.push_back(source.store->Url(f.key));
      summary = ConvertStreams(tars == files.size() ? SourceKind::kTar : SourceKind::kTfRecord,
                               std::move(urls), total, out, options);
    } else {
      if (tars + tfrecords > 0) {
        return absl::InvalidArgumentError(
            StrCat(src, " mixes .tar/.tfrecord files with other files; convert them separately"));
      }
      // The class folders: the first level below the root (an empty folder is a class too).
      ASSIGN_OR_RETURN(io::ListResult top, source.store->List({root, "/", 0}));
      std::vector<std::string> class_folders;
      for (const std::string& folder : top.common_prefixes) {
        std::string name = folder.substr(root.size(), folder.size() - root.size() - 1);
        if (!name.empty() && !name.starts_with(".")) class_folders.push_back(std::move(name));
      }
      summary = ConvertFolderTree(*source.store, files, root, class_folders, out, options);
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
