// stoker convert / stoker inspect: the shard format from the shell (docs/format.md).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "stoker/cli/commands.h"
#include "stoker/cli/progress.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/core/thread_pool.h"
#include "stoker/format/convert.h"
#include "stoker/format/sample_stream.h"
#include "stoker/format/sharded_dataset.h"
#include "stoker/format/sniff.h"
#include "stoker/io/url.h"

namespace stoker::cli {
namespace {

// Prints progress of `progress` until stopped: a redrawn bar with rate and ETA on a terminal,
// a plain line every few seconds otherwise. Runs on its own thread.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(const format::ConvertProgress& progress)
      : progress_(progress), tty_(::isatty(STDERR_FILENO) == 1), start_(absl::Now()) {
    thread_ = StartThread("progress", [this] { Loop(); });
  }
  ~ProgressPrinter() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    stop_.Notify();
    thread_.join();
    Print(/*final_line=*/true);
  }

 private:
  void Loop() {
    absl::Duration period = tty_ ? absl::Milliseconds(200) : absl::Seconds(5);
    while (!stop_.WaitForNotificationWithTimeout(period)) Print(false);
  }
  void Print(bool final_line) {
    double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    uint64_t samples = progress_.samples.load();
    uint64_t bytes = progress_.input_bytes.load();
    uint64_t total = progress_.total_input_bytes.load();
    double rate = seconds > 0 ? bytes / seconds : 0;
    double fraction = total > 0 ? std::min(1.0, static_cast<double>(bytes) / total) : 0;
    std::string eta =
        total > 0 && rate > 0 ? HumanDuration((total - std::min(bytes, total)) / rate) : "?";
    std::string stats = StrCat(samples, " samples, ", HumanBytes(bytes), " of ",
                               total > 0 ? HumanBytes(total) : "?", ", ", HumanBytes(rate), "/s, ",
                               progress_.shards.load(), " shards, ETA ", eta);
    if (tty_) {
      constexpr int kWidth = 30;
      int filled = static_cast<int>(fraction * kWidth);
      std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
      std::fprintf(stderr, "\r\033[K[%s] %3.0f%% %s", bar.c_str(), fraction * 100, stats.c_str());
      if (final_line) std::fprintf(stderr, "\n");
    } else if (!final_line) {
      std::fprintf(stderr, "convert: %.0f%% %s\n", fraction * 100, stats.c_str());
    }
    std::fflush(stderr);
  }

  const format::ConvertProgress& progress_;
  const bool tty_;
  const absl::Time start_;
  absl::Notification stop_;
  std::thread thread_;
};

struct ConvertArgs {
  std::string src, dst, shard_size = "256MiB", input_format;
  int zstd = 0;
  int jobs = 4;
  ProgressMode progress = ProgressMode::kAuto;
};

absl::Status Convert(const ConvertArgs& args) {
  ASSIGN_OR_RETURN(uint64_t shard_bytes, ParseByteSizeFlag("--shard-size", args.shard_size));
  format::ConvertProgress progress;
  format::ConvertOptions options;
  options.shard_bytes = shard_bytes;
  options.zstd_level = args.zstd;
  options.parallelism = std::max(1, args.jobs);
  options.progress = &progress;
  if (!args.input_format.empty()) {
    ASSIGN_OR_RETURN(options.input_format, format::ParseSourceKind(args.input_format));
  }
  absl::Time start = absl::Now();
  absl::StatusOr<format::ConvertSummary> summary;
  {
    std::optional<ProgressPrinter> printer;
    if (args.progress != ProgressMode::kOff) printer.emplace(progress);
    summary = format::Convert(args.src, args.dst, options);
  }
  RETURN_IF_ERROR(summary.status());
  double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const format::Manifest& m = summary->manifest;
  std::printf(
      "converted %llu samples (%s) from %zu %s file(s) into %zu shards (%s) in %.1f s "
      "(%.0f samples/s, %s/s)\n",
      static_cast<unsigned long long>(m.total_samples),
      HumanBytes(progress.input_bytes.load()).c_str(), summary->inputs,
      format::SourceKindName(summary->kind), m.shards.size(), HumanBytes(m.total_bytes).c_str(),
      seconds, seconds > 0 ? m.total_samples / seconds : 0.0,
      HumanBytes(seconds > 0 ? progress.input_bytes.load() / seconds : 0).c_str());
  std::string fields;
  for (const std::string& f : m.fields) fields += (fields.empty() ? "" : ", ") + f;
  std::printf("fields: %s\n", fields.c_str());
  if (!m.classes.empty()) {
    std::string classes;
    for (size_t i = 0; i < m.classes.size() && i < 10; ++i) {
      classes += StrCat(i == 0 ? "" : ", ", i, "=", m.classes[i]);
    }
    if (m.classes.size() > 10) classes += ", ...";
    std::printf("classes: %zu (%s)\n", m.classes.size(), classes.c_str());
  }
  std::printf("manifest: %s\n", summary->manifest_url.c_str());
  auto examples = [](const std::vector<std::string>& list, uint64_t count) {
    std::string out;
    for (const std::string& e : list) out += (out.empty() ? "" : ", ") + e;
    return count > list.size() ? out + ", ..." : out;
  };
  if (summary->hidden_files > 0) {
    std::printf("left out %llu hidden file(s) (names starting with '.'): %s\n",
                static_cast<unsigned long long>(summary->hidden_files),
                examples(summary->hidden_examples, summary->hidden_files).c_str());
  }
  if (summary->unrecognised_files > 0) {
    std::printf("left out %llu file(s) that are neither TFRecord nor WebDataset tar: %s\n",
                static_cast<unsigned long long>(summary->unrecognised_files),
                examples(summary->unrecognised_examples, summary->unrecognised_files).c_str());
  }
  if (summary->broken_links > 0) {
    std::printf("left out %llu broken symbolic link(s) (target missing): %s\n",
                static_cast<unsigned long long>(summary->broken_links),
                examples(summary->broken_link_examples, summary->broken_links).c_str());
  }
  return absl::OkStatus();
}

struct InspectArgs {
  std::string url, input_format;
  bool verify = false;
  int keys = 5;
};

// A TFRecord or tar file: read it through (every CRC the format has is checked on the way).
absl::Status InspectStream(const InspectArgs& args, format::StreamFormat format) {
  format::StreamOptions options;
  options.format = format;
  ASSIGN_OR_RETURN(std::unique_ptr<format::SampleStream> stream,
                   format::OpenSampleStream(args.url, options));
  uint64_t samples = 0, bytes = 0;
  std::set<std::string> fields;
  std::vector<std::string> first_keys;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<format::Sample> sample, stream->Next());
    if (!sample.has_value()) break;
    ++samples;
    bytes += sample->ByteSize();
    for (const format::Field& f : sample->fields) fields.insert(f.name);
    if (first_keys.size() < static_cast<size_t>(args.keys)) first_keys.push_back(sample->key);
  }
  std::printf("%s\n  format: %s\n  samples: %llu\n  sample bytes: %s\n  fields:", args.url.c_str(),
              format::StreamFormatName(format), static_cast<unsigned long long>(samples),
              HumanBytes(bytes).c_str());
  for (const std::string& f : fields) std::printf(" %s", f.c_str());
  std::printf("\n  first keys:\n");
  for (const std::string& k : first_keys) std::printf("    %s\n", k.c_str());
  if (args.verify) std::printf("verify: OK (read every record)\n");
  return absl::OkStatus();
}

// The format of URL when it is one TFRecord or tar file (by its content, or as --input-format
// says), nullopt for a dataset (a folder or prefix, its manifest, a shard).
absl::StatusOr<std::optional<format::StreamFormat>> InspectedFileFormat(const InspectArgs& args) {
  std::optional<format::SourceKind> want;
  if (!args.input_format.empty()) {
    ASSIGN_OR_RETURN(want, format::ParseSourceKind(args.input_format));
    if (want == format::SourceKind::kFolderTree) {
      return absl::InvalidArgumentError("stoker inspect: --input-format takes tfrecord or tar");
    }
  }
  if (!want.has_value() && (args.url.ends_with(format::kManifestName) ||
                            format::FormatFromName(args.url) == format::StreamFormat::kShard)) {
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(io::StoreAndKey target, io::OpenUrl(args.url));
  if (target.key.empty() || target.key.ends_with("/")) return std::nullopt;
  absl::StatusOr<io::ObjectInfo> info = target.store->Stat(target.key);
  // Not an object: a folder or prefix (opening it as a dataset says what is wrong, if anything).
  if (!info.ok() && !want.has_value()) return std::nullopt;
  RETURN_IF_ERROR(info.status());
  ASSIGN_OR_RETURN(format::StreamFormat format,
                   format::DetectObjectFormat(
                       *target.store, target.key, info->size, target.store->Url(target.key),
                       want == format::SourceKind::kTar        ? format::StreamFormat::kTar
                       : want == format::SourceKind::kTfRecord ? format::StreamFormat::kTfRecord
                                                               : format::StreamFormat::kAuto));
  if (format == format::StreamFormat::kShard) return std::nullopt;
  return std::optional<format::StreamFormat>(format);
}

absl::Status Inspect(const InspectArgs& args) {
  ASSIGN_OR_RETURN(std::optional<format::StreamFormat> file_format, InspectedFileFormat(args));
  if (file_format.has_value()) return InspectStream(args, *file_format);
  ASSIGN_OR_RETURN(std::shared_ptr<format::ShardedDataset> ds,
                   format::ShardedDataset::Open(args.url));
  const format::Manifest& m = ds->manifest();
  bool single = args.url.ends_with(".stk");
  std::printf("%s\n  format: stoker %s, version 1\n  shards: %zu\n  samples: %llu\n  bytes: %s\n",
              single ? ds->ShardUrl(0).c_str() : ds->url().c_str(), single ? "shard" : "dataset",
              m.shards.size(), static_cast<unsigned long long>(ds->size()),
              HumanBytes(m.total_bytes).c_str());
  if (!single) {
    std::printf("  fields:");
    for (const std::string& f : m.fields) std::printf(" %s", f.c_str());
    std::printf("\n");
  }
  std::printf("  sample directory: %s in memory\n",
              HumanBytes(ds->directory().MemoryBytes()).c_str());
  size_t shown = std::min<size_t>(m.shards.size(), 10);
  for (size_t s = 0; s < shown; ++s) {
    std::printf("  %-24s %8llu samples %12s\n", m.shards[s].name.c_str(),
                static_cast<unsigned long long>(m.shards[s].samples),
                HumanBytes(m.shards[s].bytes).c_str());
  }
  if (shown < m.shards.size()) std::printf("  ... %zu more shards\n", m.shards.size() - shown);
  std::printf("  first keys:\n");
  for (uint64_t i = 0; i < std::min<uint64_t>(ds->size(), args.keys); ++i) {
    std::printf("    %s\n", std::string(ds->key(i)).c_str());
  }
  if (!args.verify) return absl::OkStatus();

  // Verify every shard (several at a time); list every corrupt record with its shard and offset.
  absl::Mutex mu;
  absl::Status first_error;
  uint64_t verified = 0;
  auto report = std::make_shared<format::CorruptionReport>();
  {
    ThreadPool pool("verify", 4);
    for (size_t s = 0; s < m.shards.size(); ++s) {
      pool.Schedule([&, s] {
        absl::StatusOr<uint64_t> count = format::VerifyShard(ds->ShardUrl(s), report);
        absl::MutexLock lock(&mu);
        if (count.ok()) {
          verified += *count;
        } else if (first_error.ok()) {
          first_error = count.status();
        }
      });
    }
  }
  if (!first_error.ok()) return Annotate(first_error, "verify failed");
  if (report->count() > 0) {
    std::vector<std::string> descriptions = report->descriptions();
    for (const std::string& d : descriptions) std::fprintf(stderr, "corrupt: %s\n", d.c_str());
    return absl::DataLossError(StrCat("verify failed: ", report->count(), " corrupt record(s) of ",
                                      verified + report->count(),
                                      "; the first: ", descriptions.front()));
  }
  std::printf("verify: OK, %llu records in %zu shards, every CRC matches\n",
              static_cast<unsigned long long>(verified), m.shards.size());
  return absl::OkStatus();
}

}  // namespace

void RegisterFormatCommands(CLI::App& app, absl::Status* result) {
  auto* convert = app.add_subcommand(
      "convert",
      "Convert a folder tree (root/<class>/<file>), WebDataset .tar files or TFRecord files into "
      "stoker shards + manifest.json at DST (a folder or s3://bucket/prefix)");
  // Static, so the parsed options outlive parsing without a heap object the leak checker flags.
  static ConvertArgs convert_args;
  ConvertArgs* c = &convert_args;
  convert
      ->add_option("SRC", c->src,
                   "folder tree root, a TFRecord file or WebDataset tar, or a folder of them "
                   "(told apart by content, whatever their names)")
      ->required();
  convert->add_option("DST", c->dst, "destination folder or s3://bucket/prefix")->required();
  convert
      ->add_option("--shard-size", c->shard_size,
                   "target shard size in bytes (suffixes K, M, G; 64M–256M recommended)")
      ->capture_default_str();
  convert->add_option("--zstd", c->zstd, "compress each record with zstd at this level (0: off)")
      ->capture_default_str();
  convert->add_option("-j,--jobs", c->jobs, "shards written in parallel")->capture_default_str();
  convert->add_option("--input-format", c->input_format,
                      "what SRC holds: tfrecord, tar (WebDataset; also 'wds') or tree (a folder "
                      "tree); default: worked out from the files' content (docs/format.md)");
  AddProgressFlags(convert, &c->progress);
  convert->callback([=] { *result = Convert(*c); });

  auto* inspect = app.add_subcommand(
      "inspect",
      "Describe a stoker dataset or shard (or a TFRecord file or WebDataset tar): counts, sizes, "
      "fields, first keys; --verify checks every CRC");
  static InspectArgs inspect_args;
  InspectArgs* i = &inspect_args;
  inspect
      ->add_option("URL", i->url,
                   "dataset folder/prefix, manifest.json, shard, TFRecord file or WebDataset tar")
      ->required();
  inspect->add_option("--input-format", i->input_format,
                      "URL is a file of this format: tfrecord or tar (default: from its content)");
  inspect->add_flag("--verify", i->verify, "read every record and check its CRC");
  inspect->add_option("--keys", i->keys, "how many first keys to print")->capture_default_str();
  inspect->callback([=] { *result = Inspect(*i); });
}

}  // namespace stoker::cli
