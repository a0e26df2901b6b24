// The built-in ops, registered once. Each family lives in its own file beside this one; a new
// family is one file plus one line here.
#include "stoker/data/ops/builtin_ops.h"

#include <mutex>

#include "stoker/data/op_registry.h"

namespace stoker::data {

void RegisterBuiltinOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Dataset ops (this order is the order error messages list them in).
    RegisterShuffleOp();   // shuffle_op.cc: shuffle
    RegisterBatchOps();    // batch_ops.cc: batch, padded_batch, bucket_by_length
    RegisterControlOps();  // control_ops.cc: repeat, take, skip, prefetch
    RegisterDeviceOp();    // device_op.cc: to_device
    // Element-wise ops (transforms).
    RegisterImageTransforms();  // image_transforms.cc: decode_image, resize, center_crop,
                                // random_resized_crop, flip, normalize
    RegisterFieldTransforms();  // field_transforms.cc: cast, filter, map_field
  });
}

}  // namespace stoker::data
