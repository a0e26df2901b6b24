// The registration function of each built-in op family (internal to stoker_data); called once by
// RegisterBuiltinOps (op_registry.h).
#pragma once

#include <memory>

#include "stoker/data/op_registry.h"
#include "stoker/data/transform.h"

namespace stoker::data {

void RegisterShuffleOp();
void RegisterBatchOps();
void RegisterControlOps();
void RegisterDeviceOp();
void RegisterImageTransforms();
void RegisterFieldTransforms();

// The factory of a Transform class T with a constructor T(ParamReader&).
template <typename T>
TransformFactory TransformFactoryOf() {
  return [](ParamReader& p) -> absl::StatusOr<std::unique_ptr<Transform>> {
    return std::unique_ptr<Transform>(new T(p));
  };
}

}  // namespace stoker::data
