// Telling the formats stoker streams apart by content, not only by name (docs/format.md, "Telling
// the input formats apart"): a TFRecord file starts with a record header whose length CRC32C
// matches, a WebDataset tar with a 512-byte header whose checksum matches, a stoker shard with the
// magic STKSHARD. So `train-00000-of-01024`, `mnist-train.tfrecord-00000-of-00001`, `kaggle.tfrec`
// and `shard-000000` are read for what they hold.
//
// Thread safety: pure functions, except DetectObjectFormat (thread-safe: one read of the store).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/format/sample_stream.h"
#include "stoker/io/object_store.h"

namespace stoker::format {

// How many bytes of an object the sniffing looks at (a tar header; a TFRecord header is 12).
inline constexpr uint64_t kSniffBytes = 512;

// "TFRecord", "WebDataset tar", "stoker shard" ("unknown" for kAuto).
const char* StreamFormatName(StreamFormat format);

// The format a name says: *.tar → kTar; *.tfrecord, *.tfrecords, *.tfr, *.tfrec and TensorFlow
// Datasets' *.tfrecord-NNNNN-of-NNNNN → kTfRecord; *.stk → kShard; else kAuto.
StreamFormat FormatFromName(std::string_view url);

struct Sniffed {
  StreamFormat format = StreamFormat::kAuto;  // kAuto: none recognised
  std::string why_not;  // when kAuto: why it is none of them, one reason per format
};

// What the first min(size, kSniffBytes) bytes `head` of an object of `size` bytes hold. An empty
// object is none of them (it would be an empty TFRecord file as much as an empty tar).
Sniffed SniffFormat(std::string_view head, uint64_t size);

// Why `head` does not start like `format` ("" when it does); kAuto is never matched.
std::string NotFormat(StreamFormat format, std::string_view head, uint64_t size);

// The format to read the object at `url` (`size` bytes, starting with `head`) as, for a reader
// told `want` (kAuto: work it out), or InvalidArgument naming the URL and why:
//   - want set: the content must start like `want` (an empty object holds no samples and is
//     accepted for kTfRecord and kTar); when it holds another format, the message says which;
//   - kAuto and a name that says a format (FormatFromName): the same, for that format;
//   - kAuto otherwise: what SniffFormat recognises; nothing recognised is an error with the
//   reasons.
absl::StatusOr<StreamFormat> DecideFormat(std::string_view head, uint64_t size,
                                          std::string_view url, StreamFormat want);

// Reads the first kSniffBytes of `key` (`size` bytes; its URL `url`) and decides (DecideFormat).
absl::StatusOr<StreamFormat> DetectObjectFormat(io::ObjectStore& store, std::string_view key,
                                                uint64_t size, std::string_view url,
                                                StreamFormat want);

// The first min(size, kSniffBytes) bytes of `key`.
absl::StatusOr<std::string> ReadHead(io::ObjectStore& store, std::string_view key, uint64_t size);

}  // namespace stoker::format
