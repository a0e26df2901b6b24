// Snapshots (docs/format.md, "Snapshots"): a pipeline's output written as a stoker dataset, one
// shard ("part") per split of a service job, so that a later job reads the elements instead of
// computing them again. This header holds the pieces the worker, `stoker snapshot` and the
// `dataset` source share; the format layer stays behind it (the service does not link it). In a
// build without the format layer every function returns Unimplemented.
//
// An element is stored as one record: the record key is the element's first key, each tensor is a
// field holding its raw bytes, and the field "__tensors__" holds the element's keys and each
// tensor's dtype and shape (JSON), so that reading the record gives the element back bit for bit.
//
// Thread safety: functions are thread-safe; a SnapshotPartWriter is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/data/source.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

// The field of a snapshot record that describes its element.
inline constexpr std::string_view kSnapshotMetaField = "__tensors__";
// The progress file `stoker snapshot` rewrites at DST as parts arrive (the manifest's format).
inline constexpr std::string_view kSnapshotProgressName = "snapshot-progress.json";

// What `stoker snapshot` writes at DST when it fails, so that waiting readers fail at once.
inline constexpr std::string_view kSnapshotErrorName = "snapshot-error.txt";

// One committed part of a snapshot.
struct SnapshotPart {
  std::string name;              // relative to the snapshot's prefix
  uint64_t records = 0;          // elements
  uint64_t bytes = 0;            // the shard object's size
  std::set<std::string> fields;  // its record field names (__tensors__ included)
};

// The "__tensors__" text of `e` (its keys, and each field's dtype and shape). InvalidArgument for
// an element the snapshot cannot hold (no key, a field on a GPU, a field named "__tensors__").
absl::StatusOr<std::string> EncodeSnapshotMeta(const Element& e);
// Rebuilds an element from a record's key, fields (name, bytes; "__tensors__" among them) and
// meta text. DataLoss naming `where` (the shard URL and key) when they do not agree.
absl::StatusOr<Element> DecodeSnapshotElement(std::string_view meta,
                                              std::vector<std::pair<std::string, Buffer>> fields,
                                              std::string_view where);

// Writes one part: `<prefix>/<name>`, visible only once Close() succeeds (ObjectWriter).
class SnapshotPartWriter {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotPartWriter>> Open(std::string_view prefix_url,
                                                                  std::string name);
  virtual ~SnapshotPartWriter() = default;
  virtual absl::Status Add(const Element& e) = 0;
  virtual absl::StatusOr<SnapshotPart> Close() = 0;
};

// FailedPrecondition naming `url` unless nothing is stored under the prefix yet.
absl::Status CheckSnapshotDestination(std::string_view url);
// Rewrites the progress file at `url` listing `parts` (in order).
absl::Status WriteSnapshotProgress(std::string_view url, const std::vector<SnapshotPart>& parts);
// Writes `message` as the snapshot's error at `url` (best effort: the writer is failing anyway).
void WriteSnapshotError(std::string_view url, std::string_view message);
// Writes manifest.json listing `parts` (in order), deletes every other object under the prefix
// (parts of attempts that lost, temporary files of killed writers, the progress file) and returns
// how many objects it deleted.
absl::StatusOr<int64_t> FinishSnapshot(std::string_view url,
                                       const std::vector<SnapshotPart>& parts);

// A snapshot read while it is written (`{"dataset": URL, "wait": true}`): one stream that reads
// the parts listed so far, in order, and waits (polling every 100 ms) for more until manifest.json
// appears. Fails with DeadlineExceeded naming `url` when `timeout` passes without a new part, and
// with Aborted (the writer's message) once the writer recorded its failure.
absl::StatusOr<std::shared_ptr<StreamSource>> OpenSnapshotStream(const std::string& url,
                                                                 std::chrono::milliseconds timeout,
                                                                 bool skip_corrupt);

}  // namespace stoker::data
