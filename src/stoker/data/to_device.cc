#include "stoker/data/to_device.h"

#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::data {

using json = nlohmann::json;

ToDeviceOptions ParseToDeviceOptions(ParamReader& p) {
  ToDeviceOptions o;
  o.device = static_cast<int>(p.Int("device", 0, 0, 1023));
  o.own_stream = p.String("stream", "own", {"own", "default"}) == "own";
  o.in_flight = p.Int("in_flight", 2, 1, 64);
  if (p.Has("fields")) o.fields = p.StringList("fields", std::nullopt);
  o.field = p.String("field", "");
  const bool image = !o.field.empty();
  // The transform's parameters mean nothing without the image field to apply them to.
  for (const char* key : {"dtype", "layout", "crop", "crop_position", "flip_p", "flip_direction",
                          "mean", "std", "scale"}) {
    if (!image && p.Has(key)) {
      p.Fail(key, StrCat("\"", key, "\" transforms an image: name it with \"field\""));
    }
  }
  if (p.Has("dtype")) {
    o.dtype =
        DTypeFromName(p.String("dtype", std::nullopt, {"uint8", "int32", "int64", "float32"}));
  }
  o.chw = p.String("layout", "HWC", {"HWC", "CHW"}) == "CHW";
  if (p.Has("crop")) o.crop = p.Size("crop");
  o.random_crop = p.String("crop_position", "center", {"center", "random"}) == "random";
  o.flip_p = p.Number("flip_p", 0.0, 0.0, 1.0);
  o.flip_vertical =
      p.String("flip_direction", "horizontal", {"horizontal", "vertical"}) == "vertical";
  if (p.Has("mean") != p.Has("std")) {
    p.Fail(p.Has("mean") ? "std" : "mean", "normalizing needs both \"mean\" and \"std\"");
  }
  o.mean = p.NumberList("mean", std::vector<double>{}, 0, 4);
  o.std = p.NumberList("std", std::vector<double>{}, 0, 4, 1e-12, 1e12);
  if (p.Has("mean") && (o.mean.empty() || o.std.empty())) {
    p.Fail("mean", "expected 1 value or one per channel (at most 4)");
  }
  o.scale = p.Number("scale", 1.0 / 255.0);
  if (!o.mean.empty() && o.dtype && *o.dtype != DType::kFloat32) {
    p.Fail("dtype", "normalizing (mean/std) gives float32: leave \"dtype\" out or set \"float32\"");
  }
  return o;
}

DeviceSplit SplitDeviceOp(const json& spec) {
  DeviceSplit split{spec, json(), 0};
  if (!spec.is_object() || !spec.contains("ops") || !spec["ops"].is_array() ||
      spec["ops"].empty()) {
    return split;
  }
  const json& last = spec["ops"].back();
  if (!last.is_object() || last.value("op", json()) != "to_device") return split;
  split.device_op = last;
  split.op_index = spec["ops"].size() - 1;
  split.host_spec["ops"].erase(split.op_index);
  return split;
}

#ifndef STOKER_HAVE_CUDA
// The build without CUDA: the op is validated but refused.
namespace {
absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "this stoker was built without CUDA: build it with -DSTOKER_CUDA=ON (needs nvcc, see "
      "docs/gpu.md) to move batches to a GPU");
}
}  // namespace

bool CudaBuilt() { return false; }
absl::StatusOr<std::unique_ptr<DeviceStage>> DeviceStage::Create(const ToDeviceOptions&, uint64_t) {
  return NoCuda();
}
absl::Status WaitForDeviceTensor(const Tensor&, int64_t) { return NoCuda(); }
absl::Status SynchronizeDeviceTensor(const Tensor&) { return NoCuda(); }
absl::StatusOr<std::vector<uint8_t>> CopyDeviceTensorToHost(const Tensor&) { return NoCuda(); }
#endif

}  // namespace stoker::data
