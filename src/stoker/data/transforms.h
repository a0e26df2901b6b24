// The built-in element-wise ops (decode_image, resize, center_crop, random_resized_crop, flip,
// normalize in ops/image_transforms.cc; cast, filter, map_field in ops/field_transforms.cc),
// registered by RegisterBuiltinOps (op_registry.h); docs/pipeline.md lists their parameters.
//
// Thread safety: the transforms are immutable and their Apply is thread-safe.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "stoker/data/transform.h"

namespace stoker::data {

// decode_image immediately followed by random_resized_crop on the same field: decodes only the
// JPEG region under the crop, at a reduced DCT scale (1/2, 1/4, 1/8) when the crop still has the
// output's pixels at it. `decode` and `crop` are the two ops' spec objects; the crop's
// randomness is used.
absl::StatusOr<std::unique_ptr<Transform>> MakeDecodeRandomResizedCrop(ParamReader& decode,
                                                                       ParamReader& crop);

// decode_image (followed by random_resized_crop when `crop` is given), then the flip ops in
// `flips`, then normalize when `normalize` is given, all on one field, as one op: the decoded
// image is flipped, converted and laid out in one pass, written straight into the batch buffer
// when a batch follows (a SlotWriter, ops.h; with a crop, so the size is known). Each op keeps its
// own random stream: `decode_seed` is the decode's (the crop's when fused), each flip's is given
// with it. The output is bit for bit that of the ops run one by one.
absl::StatusOr<std::unique_ptr<Transform>> MakeImageChain(
    ParamReader& decode, ParamReader* crop, uint64_t decode_seed,
    const std::vector<std::pair<ParamReader*, uint64_t>>& flips, ParamReader* normalize);

}  // namespace stoker::data
