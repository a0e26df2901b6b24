// The op registry: every name a spec's "ops" array may use, built-in or from a plugin, in one
// table. There are two kinds of op:
//  - element-wise ops (Transform, see transform.h): consecutive ones are fused into one parallel
//    map stage; plugins add these with STOKER_REGISTER_TRANSFORM;
//  - dataset ops (shuffle, batch, repeat, prefetch, ...): each turns the graph built so far into a
//    new node, through a DatasetOpFactory.
//
// Adding a built-in op: write its node and iterator in one file under ops/ (or a Transform), give
// the file a `void RegisterXxxOps()` that calls RegisterDatasetOp / RegisterTransform, and add
// one line calling it to RegisterBuiltinOps (ops/builtin_ops.cc). docs/pipeline.md shows an
// example.
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

// One registered op: exactly one of the two factories is set.
struct OpDefinition {
  TransformFactory transform;  // element-wise
  DatasetOpFactory dataset;
};

// Registers a dataset op. Returns AlreadyExists if the name is taken (by either kind).
absl::Status RegisterDatasetOp(const std::string& name, DatasetOpFactory factory);
// The op named `name`, or nullptr.
const OpDefinition* FindOp(const std::string& name);
// Every registered name: dataset ops in registration order, then element-wise ops by name.
std::vector<std::string> RegisteredOpNames();

// Registers the built-in ops (idempotent).
void RegisterBuiltinOps();

}  // namespace stoker::data
