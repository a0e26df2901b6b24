// The built-in element-wise ops (decode_image, resize, center_crop, random_resized_crop, flip,
// normalize in ops/image_transforms.cc; cast, filter, map_field in ops/field_transforms.cc),
// registered by RegisterBuiltinOps (op_registry.h); docs/pipeline.md lists their parameters.
//
// Thread safety: the transforms are immutable and their Apply is thread-safe.
#pragma once

#include <memory>

#include "stoker/data/transform.h"

namespace stoker::data {

// decode_image immediately followed by random_resized_crop on the same field: decodes only the
// JPEG region under the crop, at a reduced DCT scale (1/2, 1/4, 1/8) when the crop still has the
// output's pixels at it. `decode` and `crop` are the two ops' spec objects; the crop's
// randomness is used.
absl::StatusOr<std::unique_ptr<Transform>> MakeDecodeRandomResizedCrop(ParamReader& decode,
                                                                       ParamReader& crop);

}  // namespace stoker::data
