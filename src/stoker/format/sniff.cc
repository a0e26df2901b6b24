#include "stoker/format/sniff.h"

#include <algorithm>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/format/shard_format.h"
#include "stoker/format/tar.h"
#include "stoker/format/tfrecord.h"

namespace stoker::format {
namespace {

// How a reader or `stoker convert` is told to read a file as `format`.
const char* HowToAsk(StreamFormat format) {
  switch (format) {
    case StreamFormat::kTfRecord:
      return "stoker convert --input-format tfrecord, or a pipeline source {\"tfrecord\": [...]}";
    case StreamFormat::kTar:
      return "stoker convert --input-format tar, or a pipeline source {\"tar\": [...]}";
    case StreamFormat::kShard:
      return "a pipeline source {\"dataset\": URL}; it needs no conversion";
    case StreamFormat::kAuto:
      break;
  }
  return "";
}

}  // namespace

const char* StreamFormatName(StreamFormat format) {
  switch (format) {
    case StreamFormat::kTfRecord:
      return "TFRecord";
    case StreamFormat::kTar:
      return "WebDataset tar";
    case StreamFormat::kShard:
      return "stoker shard";
    case StreamFormat::kAuto:
      break;
  }
  return "unknown";
}

namespace {

// "<digits>-of-<digits>", the shard suffix of TensorFlow Datasets' names.
bool IsShardSuffix(std::string_view s) {
  auto digits = [&s]() {
    size_t n = 0;
    while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
    s.remove_prefix(n);
    return n > 0;
  };
  if (!digits() || !s.starts_with("-of-")) return false;
  s.remove_prefix(4);
  return digits() && s.empty();
}

}  // namespace

StreamFormat FormatFromName(std::string_view url) {
  if (url.ends_with(".tar")) return StreamFormat::kTar;
  size_t slash = url.rfind('/');
  std::string_view base = slash == std::string_view::npos ? url : url.substr(slash + 1);
  for (std::string_view ext : {".tfrecord", ".tfrecords", ".tfr", ".tfrec"}) {
    if (base.ends_with(ext)) return StreamFormat::kTfRecord;
    // TensorFlow Datasets: "mnist-train.tfrecord-00000-of-00001".
    size_t at = base.rfind(StrCat(ext, "-"));
    if (at != std::string_view::npos && IsShardSuffix(base.substr(at + ext.size() + 1))) {
      return StreamFormat::kTfRecord;
    }
  }
  if (url.ends_with(".stk")) return StreamFormat::kShard;
  return StreamFormat::kAuto;
}

std::string NotFormat(StreamFormat format, std::string_view head, uint64_t size) {
  switch (format) {
    case StreamFormat::kTfRecord:
      return tfrecord::NotATfRecord(head, size);
    case StreamFormat::kTar:
      return tar::NotATar(head, size);
    case StreamFormat::kShard:
      if (size == 0) return "empty file";
      if (head.size() < shard::kHeaderSize) {
        return StrCat("only ", size, " bytes; a shard header takes ", shard::kHeaderSize);
      }
      if (!head.starts_with(shard::kHeaderMagic)) return "no STKSHARD magic at offset 0";
      return "";
    case StreamFormat::kAuto:
      break;
  }
  return "no format asked for";
}

Sniffed SniffFormat(std::string_view head, uint64_t size) {
  Sniffed out;
  if (size == 0) {
    out.why_not = "empty file (0 bytes): it holds no samples in any format";
    return out;
  }
  // The shard first: its magic is the most specific. A tar header could pass as a TFRecord one
  // only if bytes 8..11 of its member name held the masked CRC32C of bytes 0..7 (odds of 2^-32)
  // and those 8 bytes read as a length under 1 GiB, so the order of the other two hardly matters.
  std::string why;
  for (StreamFormat format : {StreamFormat::kShard, StreamFormat::kTfRecord, StreamFormat::kTar}) {
    std::string not_it = NotFormat(format, head, size);
    if (not_it.empty()) {
      out.format = format;
      return out;
    }
    if (format == StreamFormat::kShard) continue;  // not worth a reason unless asked for
    why += StrCat(why.empty() ? "" : "; ", "not a ", StreamFormatName(format), " (", not_it, ")");
  }
  if (head.starts_with("\x1f\x8b")) {
    why =
        "gzip-compressed (it starts with 1f 8b); stoker reads TFRecord and tar files "
        "uncompressed: decompress it first";
  } else if (head.starts_with("\x28\xb5\x2f\xfd")) {
    why =
        "zstd-compressed (it starts with 28 b5 2f fd); stoker reads TFRecord and tar files "
        "uncompressed: decompress it first";
  }
  out.why_not = std::move(why);
  return out;
}

absl::StatusOr<StreamFormat> DecideFormat(std::string_view head, uint64_t size,
                                          std::string_view url, StreamFormat want) {
  bool by_name = false;
  if (want == StreamFormat::kAuto) {
    want = FormatFromName(url);
    by_name = want != StreamFormat::kAuto;
  }
  if (want == StreamFormat::kAuto) {
    Sniffed sniffed = SniffFormat(head, size);
    if (sniffed.format != StreamFormat::kAuto) return sniffed.format;
    return absl::InvalidArgumentError(
        StrCat(url, ": cannot tell its format from its name or its content: ", sniffed.why_not,
               ". If it is one, say which (stoker convert --input-format tfrecord|tar, or a "
               "pipeline source {\"tfrecord\": [...]} / {\"tar\": [...]})"));
  }
  if (size == 0 && want != StreamFormat::kShard) return want;  // no records: fine in both
  std::string not_it = NotFormat(want, head, size);
  if (not_it.empty()) return want;
  std::string what =
      StrCat(url, ": ", by_name ? "named like a " : "asked for as a ", StreamFormatName(want),
             " file, but its content is not one (", not_it, ")");
  Sniffed sniffed = SniffFormat(head, size);
  if (sniffed.format != StreamFormat::kAuto) {
    return absl::InvalidArgumentError(StrCat(what, ": it is a ", StreamFormatName(sniffed.format),
                                             "; read it as one (", HowToAsk(sniffed.format), ")"));
  }
  return absl::InvalidArgumentError(StrCat(what,
                                           "; nor is it a file of another format stoker "
                                           "reads: corrupt, or not a dataset file"));
}

absl::StatusOr<std::string> ReadHead(io::ObjectStore& store, std::string_view key, uint64_t size) {
  if (size == 0) return std::string();
  ASSIGN_OR_RETURN(Buffer head,
                   store.Read(key, io::ByteRange{0, std::min<uint64_t>(size, kSniffBytes)}));
  return head.ToString();
}

absl::StatusOr<StreamFormat> DetectObjectFormat(io::ObjectStore& store, std::string_view key,
                                                uint64_t size, std::string_view url,
                                                StreamFormat want) {
  ASSIGN_OR_RETURN(std::string head, ReadHead(store, key, size));
  return DecideFormat(head, size, url, want);
}

}  // namespace stoker::format
