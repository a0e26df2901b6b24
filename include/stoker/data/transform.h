// Transform: an element-wise pipeline op (decode, crop, normalize, a user's own). Consecutive
// transforms are fused into one parallel map stage that runs them on the shared CPU pool.
//
// This header is also the plugin API: a plugin is a shared library that defines Transform
// subclasses and registers each with one STOKER_REGISTER_TRANSFORM line (see
// examples/plugins/). A spec loads it with "plugins": ["/path/libfoo.so"] and then uses the
// registered name as an op. The executable loading plugins must export its symbols
// (CMake ENABLE_EXPORTS), because plugins call back into stoker (Buffer, ParamReader).
//
// Transforms share one registry with the other ops (op_registry.h); a plugin's name must not be
// taken by a built-in op.
//
// Thread safety: Apply is called concurrently for different elements and must be thread-safe
// (a transform is immutable once built). The registry is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/params.h"
#include "stoker/data/random.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms one element. `rng` is seeded from (seed, op index, epoch, sample index), so every
  // random choice is reproducible whatever the thread count. Returning nullopt drops the element
  // (a filter, or on_error: skip).
  virtual absl::StatusOr<std::optional<Element>> Apply(Element element, Rng& rng) const = 0;
};

// Builds a transform from its spec object. Read parameters through `params` (which rejects
// unknown fields and names the JSON path in errors); the builder checks params.Finish().
using TransformFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transform>>(ParamReader& params)>;

// Registers `name` as an op. Returns AlreadyExists if the name is taken. Thread-safe.
absl::Status RegisterTransform(const std::string& name, TransformFactory factory);
// The factory for `name` if it is an element-wise op, or nullptr. Thread-safe.
const TransformFactory* FindTransform(const std::string& name);
// The names of the element-wise ops, sorted.
std::vector<std::string> RegisteredTransformNames();

namespace internal {
struct TransformRegistrar {
  TransformRegistrar(const char* name, TransformFactory factory);
};
}  // namespace internal

}  // namespace stoker::data

// STOKER_REGISTER_TRANSFORM(name, Class): registers `Class` (a Transform with a constructor
// `Class(stoker::data::ParamReader&)` that reads its parameters) as op `name` when the library
// containing this line is loaded.
#define STOKER_REGISTER_TRANSFORM(name, Class)                                  \
  static ::stoker::data::internal::TransformRegistrar stoker_registrar_##Class( \
      name,                                                                     \
      [](::stoker::data::ParamReader& params)                                   \
          -> ::absl::StatusOr<std::unique_ptr<::stoker::data::Transform>> {     \
        return std::unique_ptr<::stoker::data::Transform>(new Class(params));   \
      })
