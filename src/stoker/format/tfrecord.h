// TFRecord files and tf.train.Example records (docs/format.md, "TFRecord").
//
// Record framing: u64 length, u32 masked CRC32C of the length bytes, data, u32 masked CRC32C of the
// data. Reading is streaming (see sample_stream.h, StreamFormat::kTfRecord); this header has the
// writer and the pure pieces (framing, Example ↔ Sample) that the reader and the fuzzers use.
//
// Thread safety: pure functions; a TfRecordWriter is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/format/sample.h"
#include "stoker/io/object_store.h"

namespace stoker::format::tfrecord {

inline constexpr uint64_t kHeaderSize = 12;  // length + its CRC
inline constexpr uint64_t kMaxRecordLength = uint64_t{1} << 30;

// Appends one framed record.
void AppendRecord(std::string_view data, std::string* out);

// Parses the 12-byte record header at `offset` of `url`: the data length, or DataLoss when its
// CRC does not match or it exceeds kMaxRecordLength.
absl::StatusOr<uint64_t> ParseHeader(std::string_view header, std::string_view url,
                                     uint64_t offset);
// Why `head`, the first bytes of an object of `size` bytes, does not start with a TFRecord record
// header, or "" when it does: its length CRC32C matches and the length is at most 1 GiB (content
// sniffing, sniff.h; the record itself is checked by the reader).
std::string NotATfRecord(std::string_view head, uint64_t size);
// Checks the data CRC (the 4 bytes after the data).
absl::Status CheckData(std::string_view data, std::string_view crc, std::string_view url,
                       uint64_t offset);

// Decodes a serialized tf.train.Example into a sample (fields sorted by name). The key is the
// `__key__` feature when present, else `default_key`. DataLoss when it is not an Example.
absl::StatusOr<Sample> ExampleToSample(std::string_view example, std::string default_key);
// Encodes a sample as a tf.train.Example: each field a one-value bytes_list, the key in __key__.
std::string SampleToExample(const Sample& sample);

// Streams TFRecord records to an object; committed by Close().
class TfRecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TfRecordWriter>> Open(std::string_view url);
  absl::Status Write(std::string_view record);
  absl::Status WriteSample(const Sample& sample) { return Write(SampleToExample(sample)); }
  absl::Status Close();

 private:
  explicit TfRecordWriter(std::unique_ptr<io::ObjectWriter> writer, std::string url)
      : writer_(std::move(writer)), url_(std::move(url)) {}
  absl::Status Flush();
  std::unique_ptr<io::ObjectWriter> writer_;
  std::string url_;
  std::string pending_;
};

}  // namespace stoker::format::tfrecord
