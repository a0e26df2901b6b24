// Dataset nodes for the pipeline ops (built by pipeline.cc from a spec; usable directly in C++).
//
// Thread safety: every node is immutable and thread-safe; see dataset.h for iterators.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/data/dataset.h"
#include "stoker/data/source.h"
#include "stoker/data/transform.h"

namespace stoker::data {

// Reads an indexed source in order, or in a full permutation from (shuffle_seed, epoch) when
// shuffle_seed is set (the same permutation every epoch if !reshuffle_each_epoch), with up to
// `read_ahead` reads of 32 samples in flight (0: autotuned within the memory budget).
NodePtr MakeIndexedSourceNode(std::shared_ptr<IndexedSource> source,
                              std::optional<uint64_t> shuffle_seed, bool reshuffle_each_epoch,
                              int read_ahead = 0);
// Reads a stream source shard by shard; the shard order is shuffled from (seed, epoch) when
// shard_shuffle_seed is set.
NodePtr MakeStreamSourceNode(std::shared_ptr<StreamSource> source,
                             std::optional<uint64_t> shard_shuffle_seed);

// One element-wise op inside a fused map stage.
struct MapStep {
  std::string name;  // for stats, e.g. "ops[1].decode_image"
  std::shared_ptr<const Transform> transform;
  uint64_t seed = 0;  // derived from (pipeline seed, op index)
};
// A transform whose output field has a fixed size and can be written straight into memory the map
// stage hands it: a slot of the batch buffer being filled, so the batch needs no copy. Apply
// (allocating its own output) stays available for every other use.
class SlotWriter : public Transform {
 public:
  // Bytes of the output field per element (the same for every element).
  virtual size_t slot_bytes() const = 0;
  // As Apply, but writes the output field's values to `slot` (slot_bytes() long, not read) and
  // gives the field `slot_view`, a Buffer over the same bytes that keeps them alive.
  virtual absl::StatusOr<std::optional<Element>> ApplyInto(Element element, Rng& rng, uint8_t* slot,
                                                           Buffer slot_view) const = 0;
};

// Runs `steps` on each element on the runtime's pool. parallelism 0 = autotuned. With
// batch_size > 0 (the map is followed directly by a batch of that size) and a SlotWriter as the
// last step, outputs are written into consecutive slots of one buffer per batch, in input order,
// so that Collate finds them contiguous and does not copy them.
NodePtr MakeMapNode(NodePtr input, std::vector<MapStep> steps, int parallelism,
                    int64_t batch_size = 0);

NodePtr MakeShuffleBufferNode(NodePtr input, int64_t buffer_size, uint64_t seed,
                              bool reshuffle_each_epoch);

struct BatchOptions {
  int64_t size = 1;
  bool drop_remainder = false;
  bool padded = false;  // pad each field to the largest shape in the batch
  double padding_value = 0;
};
NodePtr MakeBatchNode(NodePtr input, BatchOptions options);

// Groups elements by the length (first dimension) of `field` into buckets split at `boundaries`
// (bucket i holds lengths < boundaries[i]); emits a padded batch of batch_sizes[i] when bucket i
// fills, and the partial buckets at the end unless drop_remainder.
NodePtr MakeBucketByLengthNode(NodePtr input, std::string field, std::vector<int64_t> boundaries,
                               std::vector<int64_t> batch_sizes, double padding_value,
                               bool drop_remainder);

NodePtr MakeRepeatNode(NodePtr input, int64_t count);  // count < 0: forever
NodePtr MakeTakeNode(NodePtr input, int64_t count);
NodePtr MakeSkipNode(NodePtr input, int64_t count);
// Runs the input ahead on a background thread, keeping up to `buffer` elements ready
// (0 = autotuned within the memory budget).
NodePtr MakePrefetchNode(NodePtr input, int64_t buffer);

// Stacks elements into one contiguous tensor per field (shape [n, ...]). Fields must agree in
// name and dtype; shapes must be equal unless `padded`. Undecoded bytes fields that hold decimal
// integers (labels such as WebDataset's "cls") become int64 [n]; other bytes are an error. Errors
// name the field and the samples. A field whose values already lie back to back in one buffer
// (written there by a SlotWriter) becomes a view of that buffer, without a copy.
absl::StatusOr<Element> Collate(std::vector<Element>& elements, bool padded, double padding_value);

}  // namespace stoker::data
