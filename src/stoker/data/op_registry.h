// The op registry: every name a spec's "ops" array may use, built-in or from a plugin, in one
// table. There are two kinds of op:
//  - element-wise ops (Transform, see transform.h): consecutive ones are fused into one parallel
//    map stage; plugins add these with STOKER_REGISTER_TRANSFORM;
//  - dataset ops (shuffle, batch, repeat, prefetch, ...): each turns the graph built so far into a
//    new node, through a DatasetOpFactory.
//
// Adding a built-in op: write its node and iterator in one file under ops/ (or a Transform), give
// the file a `void RegisterXxxOps()` that calls RegisterDatasetOp / RegisterBuiltinTransform with
// the op's OpTraits, and add one line calling it to RegisterBuiltinOps (ops/builtin_ops.cc).
// docs/pipeline.md shows an example.
//
// What an op does to the number of elements is declared once, in its OpTraits, and read from here
// by the fusion pass (pipeline.cc), the service client (which positions a batch covers) and
// Python's len() (through ElementsPerEpoch).
//
// Thread safety: the registry is thread-safe; entries are never removed, so the pointer FindOp
// returns stays valid.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/dataset.h"
#include "stoker/data/params.h"
#include "stoker/data/transform.h"

namespace stoker::data {

// What a dataset op sees of the pipeline being built. Valid only during the factory call.
struct OpContext {
  std::string name;            // the op's name as written in the spec, e.g. "padded_batch"
  size_t index = 0;            // the op's position in $.ops
  bool last = false;           // the op is the last one in $.ops
  uint64_t pipeline_seed = 0;  // $.seed
  // The graph built so far as one node (pending element-wise ops are first fused into a map
  // stage). Call it only after the parameters are read and checked.
  std::function<NodePtr()> input;
  // True when no op has been applied to the source yet. Then `source` may be called instead of
  // `input`: it makes the source node itself, reading an indexed source in a full permutation from
  // shuffle_seed (or a stream source in a shuffled shard order).
  bool at_source = false;
  bool stream_source = false;  // the source is a stream (TFRecord, tar), not indexed
  std::function<NodePtr(std::optional<uint64_t> shuffle_seed, bool reshuffle_each_epoch)> source;
};

// Builds a dataset op from its spec object: reads its parameters through `params` (unknown fields
// and bad values are reported by params.Finish(), which the factory checks before taking its
// input), then returns the new node.
using DatasetOpFactory =
    std::function<absl::StatusOr<NodePtr>(ParamReader& params, const OpContext& context)>;

// What an op does to the number of elements that pass through it.
enum class CountEffect {
  kUndeclared,    // not declared (a plugin's transform): it may drop elements
  kKeeps,         // one element out for each element in
  kMayDrop,       // drops elements depending on their data (filter)
  kBatches,       // "size" elements in, one batch out; "drop_remainder" drops a last partial one
  kGroupsByData,  // groups elements into batches whose sizes depend on the data
  kTakes,         // the first "count" elements
  kSkips,         // all but the first "count" elements
  kRepeats,       // the input "count" times ("count" -1 or absent: forever)
};

// An op's properties, declared with it when it is registered.
struct OpTraits {
  CountEffect count = CountEffect::kUndeclared;
  // With "on_error": "skip" the op drops the elements it cannot process (then it may drop).
  bool drops_on_error_skip = false;
  // Element-wise: runs on each element by itself, in the pipeline's parallel map stage.
  bool per_sample = false;
  // decode_image may take it into its fused image chain when it follows decode_image on the
  // same field (random_resized_crop, flip, normalize: decoded, cropped, flipped and converted in
  // one pass; pipeline.cc, "the fusion pass").
  bool fusable = false;
};

// One registered op: exactly one of the two factories is set.
struct OpDefinition {
  TransformFactory transform;  // element-wise
  DatasetOpFactory dataset;
  OpTraits traits;
  bool plugin = false;  // registered through RegisterTransform (transform.h), not built in
};

// Registers a dataset op with its traits. Returns AlreadyExists if the name is taken (by either
// kind).
absl::Status RegisterDatasetOp(const std::string& name, DatasetOpFactory factory, OpTraits traits);
// Registers a built-in element-wise op with its traits (per_sample is set here). Plugins use
// RegisterTransform (transform.h), whose ops have undeclared counts.
absl::Status RegisterBuiltinTransform(const std::string& name, TransformFactory factory,
                                      OpTraits traits);
// The op named `name`, or nullptr.
const OpDefinition* FindOp(const std::string& name);
// Every registered name: dataset ops in registration order, then element-wise ops by name.
std::vector<std::string> RegisteredOpNames();

// Registers the built-in ops (idempotent).
void RegisterBuiltinOps();

// What the op `op` (one object of a spec's "ops") does to the count, with its parameters taken
// into account (decode_image with "on_error": "skip" may drop). An unknown op: kUndeclared.
CountEffect CountEffectOf(const nlohmann::json& op);

// Elements per epoch of a pipeline whose source yields `source_elements` (one rank's share) and
// whose "ops" are `ops`: from each op's declared count effect. FailedPrecondition naming the op
// (`ops[2] (filter) drops elements depending on their data`) when the data decides the count.
absl::StatusOr<int64_t> ElementsPerEpoch(const nlohmann::json& ops, int64_t source_elements);

}  // namespace stoker::data
