// A weighted mix of indexed sources (`{"source": {"mix": [...]}}`, docs/pipeline.md): every epoch
// is made of a quota of samples from each stream, drawn from (seed, epoch).
//
// Quotas: a stream with "repeat": r contributes floor(r * size) samples an epoch, one with
// "choose": n contributes n; the streams with a "weight" share the rest of "epoch_size" (default:
// the sum of their sizes) in proportion to their weights, rounded down, and the samples left by the
// rounding go one each to weighted streams drawn from (seed, epoch) by weight. The epoch's size is
// the same every epoch. A stream's samples are drawn without replacement from a permutation of the
// stream for (seed, epoch); a quota larger than the stream takes whole passes (each a new
// permutation) and then part of one more.
//
// Order: the epoch's samples are shuffled from (seed, epoch); with "stratified": true they are
// interleaved instead so that every run of consecutive positions holds each stream's share of it
// to within 2 (each prefix is within 1 of its share), each stream in its drawn order: every batch
// holds each stream's share ±1. A later shuffle op permutes positions again (and undoes the
// stratification).
//
// The source's size() is the epoch size; Read() takes the sample indices of EpochIndices(), which
// number the streams' samples one after another (stream k's sample j is offset_k + j).
//
// Thread safety: thread-safe (immutable after creation).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/source.h"

namespace stoker::data {

struct MixStream {
  std::shared_ptr<IndexedSource> source;
  std::optional<double> weight;  // exactly one of weight, repeat, choose
  std::optional<double> repeat;
  std::optional<int64_t> choose;
};

struct MixOptions {
  std::optional<int64_t> epoch_size;
  bool stratified = false;
  uint64_t seed = 0;  // the pipeline's seed
};

class MixSource : public IndexedSource {
 public:
  // Errors name the stream ($.source.mix[i]) and what is wrong (a weight that is not positive, a
  // fixed quota over epoch_size, an empty stream).
  static absl::StatusOr<std::shared_ptr<MixSource>> Create(std::vector<MixStream> streams,
                                                           const MixOptions& options);

  int64_t size() const override { return epoch_size_; }
  absl::StatusOr<std::vector<Element>> Read(std::span<const int64_t> indices) const override;
  // The sample index (as Read takes it) at each position of `epoch`, before any shuffle op.
  std::vector<int64_t> EpochIndices(int64_t epoch) const override;
  // How many samples each stream contributes to `epoch`.
  std::vector<int64_t> Quotas(int64_t epoch) const;

 private:
  MixSource() = default;
  std::vector<MixStream> streams_;
  std::vector<int64_t> offsets_;  // of each stream in the sample index space
  std::vector<int64_t> fixed_;    // quota of each stream without its share of the remainder
  MixOptions options_;
  int64_t epoch_size_ = 0;
};

}  // namespace stoker::data
