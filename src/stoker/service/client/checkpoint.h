// The checkpoint token of a service consumer (docs/protocol.md, "Checkpoint and resume"): where a
// consumer stands in its job, in terms that do not depend on the job's splits, workers or timing,
// so that a new job (on any number of workers) continues from it.
//
//   {"format": "stoker-service-checkpoint", "version": 1, "fingerprint": F, "epoch": E,
//    "num_samples": N, "done": [[b, e], ...],
//    "open": [{"begin": b, "end": e, "delivered": [[s, t], ...]}, ...],
//    "elements": K, "samples": S, "spec": {...}}
//
// Positions are those of epoch E's sample order (0 .. N - 1). `done`: positions whose elements
// were all delivered (sorted, disjoint). `open`: splits delivered in part: positions [b, e) run as
// one split, of which the elements with sequence numbers in the ranges [s, t) were delivered.
// `elements` / `samples`: how many elements / samples of epoch E were delivered (informational).
// `spec`: the pipeline spec, so that a token refused for another spec can name the difference.
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::service {

struct ServiceCheckpoint {
  using Range = std::pair<int64_t, int64_t>;  // [first, last)
  struct OpenSplit {
    int64_t begin = 0;
    int64_t end = 0;
    std::vector<Range> delivered;  // sequence numbers, sorted and disjoint
  };
  // A piece of the epoch still to run: an exact one is one split of exactly these positions.
  struct Piece {
    int64_t begin = 0;
    int64_t end = 0;
    bool exact = false;
  };

  std::string fingerprint;  // of the pipeline spec the workers run
  int64_t epoch = 0;
  int64_t num_samples = 0;
  std::vector<Range> done;
  std::vector<OpenSplit> open;
  int64_t elements = 0;
  int64_t samples = 0;
  nlohmann::json spec;  // null when absent

  std::string ToJson() const;
  // What is left of the epoch, in position order: the gaps between `done` and `open` (cut freely
  // into splits) and the open splits (exact).
  std::vector<Piece> Remaining() const;
};

// Parses and checks a token: an error names the field and what is wrong with it.
absl::StatusOr<ServiceCheckpoint> ParseServiceCheckpoint(std::string_view token);

// The first difference between two specs, as a JSON path and both values, e.g.
// "$.source.mix[1].weight is 0.3 in the checkpoint, 0.4 in this spec"; keys the fingerprint
// ignores (threads, source.read_ahead) are left out. Empty if they do not differ.
std::string DescribeSpecDifference(const nlohmann::json& checkpoint, const nlohmann::json& now);

// Sorted, disjoint, merged ranges from any ranges.
std::vector<ServiceCheckpoint::Range> MergeRanges(std::vector<ServiceCheckpoint::Range> ranges);

}  // namespace stoker::service
