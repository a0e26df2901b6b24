// An example stoker plugin: a user transform compiled into a shared library.
//
// Build it as a shared library against stoker's headers (see src/stoker/data/CMakeLists.txt,
// target stoker_example_plugin), then name it in a spec:
//
//   {"plugins": ["/path/libstoker_invert.so"],
//    "source": {...},
//    "ops": [{"op": "decode_image", "field": "jpg"}, {"op": "invert", "field": "jpg"}]}
//
// "invert" replaces every uint8 value v of the field by 255 - v (with probability "p", default
// 1, drawn from the element's own random generator, so the result is reproducible).
#include <cstring>

#include "stoker/data/transform.h"

namespace {

class Invert : public stoker::data::Transform {
 public:
  // Read parameters through `params`: unknown fields and wrong types are reported with their
  // JSON path before the pipeline runs.
  explicit Invert(stoker::data::ParamReader& params)
      : field_(params.String("field")), p_(params.Number("p", 1.0, 0.0, 1.0)) {}

  absl::StatusOr<std::optional<stoker::data::Element>> Apply(
      stoker::data::Element element, stoker::data::Rng& rng) const override {
    auto found = element.fields.find(field_);
    if (found == element.fields.end()) {
      return absl::NotFoundError("invert: no field '" + field_ + "' in sample '" +
                                 element.FirstKey() + "'");
    }
    const stoker::data::Tensor& in = found->second;
    if (in.dtype != stoker::data::DType::kUint8) {
      return absl::InvalidArgumentError("invert: field '" + field_ + "' must be uint8");
    }
    if (rng.Uniform() >= p_) return element;
    stoker::MutableBuffer out(in.data.size());
    for (size_t i = 0; i < in.data.size(); ++i) out.data()[i] = 255 - in.data.data()[i];
    found->second = stoker::data::Tensor{in.dtype, in.shape, std::move(out).Finish()};
    return element;
  }

 private:
  std::string field_;
  double p_;
};

}  // namespace

STOKER_REGISTER_TRANSFORM("invert", Invert);
