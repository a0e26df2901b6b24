// Streaming readers: samples in file order from TFRecord files, WebDataset tar files or stoker
// shards, one URL after another (for datasets that are not converted, or for sequential scans).
//
// Thread safety: a SampleStream is used by one thread at a time. OpenSampleStream is thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/format/sample.h"

namespace stoker::format {

enum class StreamFormat {
  // From the URL: *.tar → kTar; *.tfrecord, *.tfrecords, *.tfr, *.tfrec → kTfRecord; *.stk →
  // kShard; any other name from the content (a TFRecord header whose length CRC matches, a tar
  // header whose checksum matches, the shard magic), else InvalidArgument saying why.
  kAuto,
  kTar,       // WebDataset tar (docs/format.md)
  kTfRecord,  // TFRecord of tf.train.Example
  kShard,     // a stoker shard, records in order
};

struct StreamOptions {
  StreamFormat format = StreamFormat::kAuto;
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  // Receives what kSkip skipped; may be shared by many streams. Null: counted nowhere but logged.
  std::shared_ptr<CorruptionReport> report;
  // Bytes fetched per ranged read while streaming (the read planner splits and parallelises them).
  uint64_t chunk_bytes = 8 << 20;
  // Chunks fetched ahead of the one being parsed (at least 1): up to read_ahead × chunk_bytes in
  // flight, so a store with a long time to first byte streams at the rate of several requests.
  int read_ahead = 1;
};

class SampleStream {
 public:
  virtual ~SampleStream() = default;
  // The next sample (Sample::index counts from 0 per stream), nullopt at the end, or an error
  // naming the URL and offset. After an error the stream is finished.
  virtual absl::StatusOr<std::optional<Sample>> Next() = 0;
};

// Opens one URL. Fails up front when the object cannot be reached or (for shards) is malformed.
absl::StatusOr<std::unique_ptr<SampleStream>> OpenSampleStream(std::string_view url,
                                                               StreamOptions options = {});

// Streams `urls` one after another (each opened when the previous one ends); Sample::index counts
// across all of them.
std::unique_ptr<SampleStream> OpenSampleStreams(std::vector<std::string> urls,
                                                StreamOptions options = {});

// The format `url`'s name says (kAuto resolved from the name alone); InvalidArgument if it says
// none (OpenSampleStream then looks at the content).
absl::StatusOr<StreamFormat> DetectStreamFormat(std::string_view url);

}  // namespace stoker::format
