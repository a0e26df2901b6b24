// to_device: the pipeline's last op, which hands batches to the consumer in CUDA device memory
// (docs/gpu.md). It needs a build with -DSTOKER_CUDA=ON and a visible GPU; this header and the
// spec validation are in every build, so a spec is checked the same everywhere and a build without
// CUDA refuses the op with an error that says so.
//
//   {"op": "to_device", "device": 0, "field": "jpg", "crop": [224, 224], "crop_position": "random",
//    "flip_p": 0.5, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "layout": "CHW"}
//
// Every numeric field of an element goes to the device (`fields` narrows that); undecoded bytes
// stay on the host. The image field `field` ([n, h, w, c] batches or one [h, w, c] image) is
// cropped, flipped, converted and normalized by one fused kernel on the way; random choices come
// from the op's seed, the epoch and the element's sample index, like the CPU ops'.
//
// In the service, workers never run to_device: the consumer (ServiceClient) sends the spec without
// it and applies it to what it receives; a worker given a spec that ends with it refuses the job.
//
// Thread safety: ToDeviceOptions is a value; a DeviceStage is used by one thread at a time;
// WaitForDeviceTensor is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "stoker/data/dataset.h"
#include "stoker/data/params.h"
#include "stoker/data/tensor.h"

namespace stoker::data {

struct ToDeviceOptions {
  int device = 0;
  bool own_stream = true;  // "stream": "own" (a non-blocking stream) or "default" (legacy default)
  int64_t in_flight = 2;   // batches queued ahead of the consumer (each in device memory)
  std::optional<std::vector<std::string>> fields;  // to move (default: every numeric field)
  // The image transform of `field` (none when `field` is empty).
  std::string field;
  std::optional<DType> dtype;  // output dtype (default: float32 with mean/std, else the input's)
  bool chw = false;            // "layout": "HWC" or "CHW" per sample
  std::pair<int, int> crop{0, 0};  // [height, width]; 0: no crop
  bool random_crop = false;        // "crop_position": "center" or "random"
  double flip_p = 0;               // probability of mirroring each sample
  bool flip_vertical = false;      // "flip_direction": "horizontal" or "vertical"
  std::vector<double> mean, std;   // normalize when given (1 value or one per channel)
  double scale = 1.0 / 255.0;      // multiplies uint8 pixels before normalizing
};

// Reads the op's parameters (everything but "op"); errors name the JSON path.
ToDeviceOptions ParseToDeviceOptions(ParamReader& params);

// Whether this build includes the CUDA device path (-DSTOKER_CUDA=ON).
bool CudaBuilt();

// A spec split at a trailing to_device op: the spec without it (what service workers run), and the
// op's object (null when the spec does not end with one) and index in "ops".
struct DeviceSplit {
  nlohmann::json host_spec;
  nlohmann::json device_op;
  size_t op_index = 0;
};
DeviceSplit SplitDeviceOp(const nlohmann::json& spec);

// Moves elements to the device. Create fails without CUDA (a build without it) or without the
// device ("no CUDA device is visible (...)").
class DeviceStage {
 public:
  // `seed` is the op's seed (MixSeed of the pipeline seed and the op's index).
  static absl::StatusOr<std::unique_ptr<DeviceStage>> Create(const ToDeviceOptions& options,
                                                             uint64_t seed);
  virtual ~DeviceStage() = default;
  // Queues the copies (and the transform) of `host` and returns at once: the returned element's
  // device tensors (Tensor::device >= 0) become ready on the device when their event fires; read
  // them after WaitForDeviceTensor on the reading stream.
  virtual absl::StatusOr<Element> Apply(Element host) = 0;
};

// Makes CUDA stream `stream` (a cudaStream_t value; 1 = the legacy default stream, 2 = per-thread
// default, -1 = none, as in DLPack) wait until `tensor`'s data is ready, without blocking the
// host; the memory is then freed in that stream's order. Thread-safe.
absl::Status WaitForDeviceTensor(const Tensor& tensor, int64_t stream);
// Blocks until `tensor`'s data is ready.
absl::Status SynchronizeDeviceTensor(const Tensor& tensor);
// The bytes of a device tensor, copied back to the host (waits): for tests and checks.
absl::StatusOr<std::vector<uint8_t>> CopyDeviceTensorToHost(const Tensor& tensor);

}  // namespace stoker::data
