// The DLPack C ABI (the struct layout every DLPack consumer reads: torch.from_dlpack,
// numpy.from_dlpack, CuPy, JAX), unversioned form, as the DLPack specification defines it. Only
// what stoker exports is declared.
#pragma once

#include <cstdint>

namespace stoker::python::dlpack {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2 };
enum TypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2 };

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// Capsule names: a fresh export, and one a consumer has taken (and will delete itself).
inline constexpr const char* kCapsuleName = "dltensor";
inline constexpr const char* kUsedCapsuleName = "used_dltensor";

}  // namespace stoker::python::dlpack
