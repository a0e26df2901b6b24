// A sample: a key plus named fields (WebDataset-style: "jpg", "cls", "txt", ...), each a Buffer.
// Fields read from an uncompressed shard are zero-copy slices of the bytes that were read.
//
// Thread safety: plain values; distinct objects may be used from different threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/buffer.h"

namespace stoker::format {

struct Field {
  std::string name;
  Buffer value;
  bool operator==(const Field& other) const {
    return name == other.name && value.view() == other.value.view();
  }
};

struct Sample {
  std::string key;
  std::vector<Field> fields;
  // Position in its dataset (ReadSamples) or in its stream (SampleStream); for messages and order.
  uint64_t index = 0;

  // The field named `name`, or nullptr.
  const Buffer* Find(std::string_view name) const {
    for (const Field& field : fields) {
      if (field.name == name) return &field.value;
    }
    return nullptr;
  }
  // Bytes of all fields (not counting the key).
  uint64_t ByteSize() const {
    uint64_t n = 0;
    for (const Field& field : fields) n += field.value.size();
    return n;
  }
};

// What a reader does with a corrupt record (bad CRC, malformed body, key mismatch).
enum class OnCorrupt {
  kFail,  // return DataLoss naming the shard URL, record offset and key
  kSkip,  // leave the sample out, count it and keep its description for a report
};

// Parses "fail" / "skip" (InvalidArgument otherwise).
absl::StatusOr<OnCorrupt> ParseOnCorrupt(std::string_view text);

// What was skipped under OnCorrupt::kSkip. Thread-safe.
class CorruptionReport {
 public:
  void Add(const absl::Status& error);
  uint64_t count() const;
  // The first few descriptions (at most kMaxKept), each naming shard URL, offset and key.
  std::vector<std::string> descriptions() const;
  static constexpr size_t kMaxKept = 100;

 private:
  mutable absl::Mutex mu_;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> descriptions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stoker::format
