// The to_device op on a CUDA build: a DeviceStage over gpu::DeviceBatcher.
#include <algorithm>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/random.h"
#include "stoker/data/to_device.h"
#include "stoker/gpu/device_batcher.h"

namespace stoker::data {
namespace {

std::optional<gpu::ScalarType> ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return gpu::ScalarType::kUint8;
    case DType::kInt32:
      return gpu::ScalarType::kInt32;
    case DType::kInt64:
      return gpu::ScalarType::kInt64;
    case DType::kFloat32:
      return gpu::ScalarType::kFloat32;
    case DType::kBytes:
      break;
  }
  return std::nullopt;
}

Tensor DeviceTensor(DType dtype, const gpu::DeviceArray& array) {
  Tensor t;
  t.dtype = dtype;
  t.shape = array.shape;
  t.device = array.block->device();
  t.data =
      Buffer::Wrap(array.block, static_cast<const uint8_t*>(array.data()), array.block->size());
  return t;
}

const gpu::DeviceBlock* BlockOf(const Tensor& tensor) {
  if (tensor.device < 0 || !tensor.data.owner()) return nullptr;
  // Device tensors are made only by CudaDeviceStage, whose buffers are owned by a DeviceBlock.
  return static_cast<const gpu::DeviceBlock*>(tensor.data.owner().get());
}

class CudaDeviceStage : public DeviceStage {
 public:
  CudaDeviceStage(const ToDeviceOptions& options, uint64_t seed,
                  std::unique_ptr<gpu::DeviceBatcher> batcher)
      : options_(options), seed_(seed), batcher_(std::move(batcher)) {}

  absl::StatusOr<Element> Apply(Element e) override {
    if (!options_.field.empty()) RETURN_IF_ERROR(e.Field(options_.field).status());
    for (auto& [name, tensor] : e.fields) {
      if (tensor.device >= 0 || tensor.dtype == DType::kBytes) continue;
      if (options_.fields && std::find(options_.fields->begin(), options_.fields->end(), name) ==
                                 options_.fields->end()) {
        continue;
      }
      const gpu::ScalarType type = *ScalarTypeOf(tensor.dtype);
      const gpu::HostArray host{tensor.data.data(), type, tensor.shape};
      if (host.ByteSize() != tensor.data.size()) {
        return absl::InternalError(StrCat("field '", name, "' of ", e.FirstKey(), " has ",
                                          tensor.data.size(), " bytes for shape ",
                                          tensor.ShapeString()));
      }
      if (name == options_.field) {
        ASSIGN_OR_RETURN(tensor, Transform(e, name, tensor, host));
      } else {
        ASSIGN_OR_RETURN(gpu::DeviceArray array, batcher_->Submit(host));
        tensor = DeviceTensor(tensor.dtype, array);
      }
    }
    return e;
  }

 private:
  absl::StatusOr<Tensor> Transform(const Element& e, const std::string& name, const Tensor& t,
                                   gpu::HostArray host) {
    const bool single = t.shape.size() == 3;
    if (t.shape.size() != 3 && t.shape.size() != 4) {
      return absl::InvalidArgumentError(
          StrCat("field '", name,
                 "' must be a batch of images [n, height, width, channels] or one image "
                 "[height, width, channels], got ",
                 DTypeName(t.dtype), " ", t.ShapeString(), " (", e.FirstKey(), ")"));
    }
    if (single) host.shape.insert(host.shape.begin(), 1);
    gpu::TransformParams p;
    p.n = static_cast<int32_t>(host.shape[0]);
    p.in_h = static_cast<int32_t>(host.shape[1]);
    p.in_w = static_cast<int32_t>(host.shape[2]);
    p.channels = static_cast<int32_t>(host.shape[3]);
    p.out_h = options_.crop.first > 0 ? options_.crop.first : p.in_h;
    p.out_w = options_.crop.second > 0 ? options_.crop.second : p.in_w;
    p.out_chw = options_.chw;
    const bool normalize = !options_.mean.empty();
    if (normalize) {
      const size_t c = static_cast<size_t>(p.channels);
      if ((options_.mean.size() != 1 && options_.mean.size() != c) ||
          (options_.std.size() != 1 && options_.std.size() != c)) {
        return absl::InvalidArgumentError(
            StrCat("field '", name, "' has ", c, " channels but mean/std have ",
                   options_.mean.size(), "/", options_.std.size(), " values"));
      }
      p.affine = true;
      const double pixel_scale = t.dtype == DType::kUint8 ? options_.scale : 1.0;
      for (size_t k = 0; k < c && k < gpu::kMaxChannels; ++k) {
        gpu::NormalizeCoefficients(options_.mean.size() == 1 ? options_.mean[0] : options_.mean[k],
                                   options_.std.size() == 1 ? options_.std[0] : options_.std[k],
                                   pixel_scale, &p.scale[k], &p.shift[k]);
      }
    }
    const DType out_dtype = options_.dtype ? *options_.dtype
                            : normalize    ? DType::kFloat32
                                           : t.dtype;
    // Random choices: from the op's seed, the epoch and the element's first sample.
    Rng rng(MixSeed({seed_, static_cast<uint64_t>(e.epoch), e.sample_index}));
    std::vector<gpu::SampleParams> samples(p.n);
    for (auto& s : samples) {
      const int32_t spare_h = std::max(0, p.in_h - p.out_h),
                    spare_w = std::max(0, p.in_w - p.out_w);
      if (options_.random_crop) {
        s.y0 = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(spare_h) + 1));
        s.x0 = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(spare_w) + 1));
      } else {
        s.y0 = spare_h / 2;
        s.x0 = spare_w / 2;
      }
      if (rng.Uniform() < options_.flip_p) {
        s.flip = options_.flip_vertical ? gpu::kFlipVertical : gpu::kFlipHorizontal;
      }
    }
    const gpu::ScalarType out_type = *ScalarTypeOf(out_dtype);
    if (std::string why = gpu::CheckTransform(p, nullptr, host.type, out_type); !why.empty()) {
      return absl::InvalidArgumentError(StrCat("field '", name, "' (", DTypeName(t.dtype), " ",
                                               t.ShapeString(), ", ", e.FirstKey(), "): ", why));
    }
    ASSIGN_OR_RETURN(gpu::DeviceArray array, batcher_->SubmitTransform(host, p, samples, out_type));
    if (single) array.shape.erase(array.shape.begin());
    return DeviceTensor(out_dtype, array);
  }

  ToDeviceOptions options_;
  uint64_t seed_;
  std::unique_ptr<gpu::DeviceBatcher> batcher_;
};

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<std::unique_ptr<DeviceStage>> DeviceStage::Create(const ToDeviceOptions& options,
                                                                 uint64_t seed) {
  gpu::DeviceBatcherOptions o;
  o.device = options.device;
  o.own_stream = options.own_stream;
  // One staging buffer more than the batches queued ahead, so the next copy can start while
  // every queued batch is held.
  o.slots = static_cast<int>(options.in_flight) + 1;
  ASSIGN_OR_RETURN(auto batcher, gpu::DeviceBatcher::Create(o));
  return std::unique_ptr<DeviceStage>(new CudaDeviceStage(options, seed, std::move(batcher)));
}

absl::Status WaitForDeviceTensor(const Tensor& tensor, int64_t stream) {
  const gpu::DeviceBlock* block = BlockOf(tensor);
  if (block == nullptr) return absl::InvalidArgumentError("not a device tensor");
  return block->WaitOnStream(static_cast<uintptr_t>(stream));
}

absl::Status SynchronizeDeviceTensor(const Tensor& tensor) {
  const gpu::DeviceBlock* block = BlockOf(tensor);
  if (block == nullptr) return absl::InvalidArgumentError("not a device tensor");
  return block->Synchronize();
}

absl::StatusOr<std::vector<uint8_t>> CopyDeviceTensorToHost(const Tensor& tensor) {
  const gpu::DeviceBlock* block = BlockOf(tensor);
  if (block == nullptr) return absl::InvalidArgumentError("not a device tensor");
  return block->CopyToHost();
}

}  // namespace stoker::data
