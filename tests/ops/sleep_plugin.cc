// A test plugin: {"op": "sleep", "ms": M} passes every element through after M milliseconds, a
// fixed per-element cost that takes no CPU (as a remote read would). The autoscaler test and
// benchmark use it to make a worker's throughput known and independent of the machine's load.
#include <chrono>
#include <thread>

#include "stoker/data/transform.h"

namespace {

class Sleep : public stoker::data::Transform {
 public:
  explicit Sleep(stoker::data::ParamReader& params)
      : ms_(params.Number("ms", 10.0, 0.0, 10000.0)) {}

  absl::StatusOr<std::optional<stoker::data::Element>> Apply(stoker::data::Element element,
                                                             stoker::data::Rng&) const override {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms_));
    return element;
  }

 private:
  double ms_;
};

}  // namespace

STOKER_REGISTER_TRANSFORM("sleep", Sleep);
