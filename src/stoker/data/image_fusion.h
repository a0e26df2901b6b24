// The fusion pass of pipeline building (pipeline.cc): a plan over the spec's "ops", made before
// anything is built, of which ops each decode_image takes into one fused step. Internal.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace stoker::data {

// One decode_image and the ops it fuses with, by their indices in "ops" (in order).
struct ImageChainPlan {
  size_t decode = 0;                // decode_image
  std::optional<size_t> crop;       // random_resized_crop right after it: a region decode
  std::vector<size_t> flips;        // then flips ...
  std::optional<size_t> normalize;  // ... and a normalize, converted in the same pass
  size_t last() const {
    if (normalize) return *normalize;
    if (!flips.empty()) return flips.back();
    return crop.value_or(decode);
  }
};

// The chain of every decode_image in `ops`, keyed by its index: the ops that follow it on the same
// field and whose traits say they are fusable (op_registry.h). random_resized_crop always joins;
// flips and a normalize only when `fuse_image_ops` (the spec's "fuse_image_ops", default true).
// Ops that are not well-formed objects are left out (the builder reports them). Pure: reads only
// `ops` and the op registry.
std::map<size_t, ImageChainPlan> PlanImageChains(const nlohmann::json& ops, bool fuse_image_ops);

}  // namespace stoker::data
