// The element conversion of stoker._stoker: a data::Element becomes a dict of numpy arrays whose
// memory is the element's stoker::Buffer (no copy); each array's `base` is a Buffer object holding
// a reference to those bytes, so an array stays valid after the iterator is gone. A tensor in GPU
// memory (from the to_device op) becomes a DeviceArray, exported through DLPack (__dlpack__,
// __dlpack_device__) so torch.from_dlpack takes it without a copy; the consumer's stream waits
// for the batch's event on the device (docs/gpu.md). Buffer and DeviceArray are safe to share
// across threads.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "bindings.h"
#include "dlpack_abi.h"
#include "stoker/core/buffer.h"
#include "stoker/data/tensor.h"
#include "stoker/data/to_device.h"

namespace stoker::python {
namespace {

py::dtype NumpyDType(data::DType dtype) {
  switch (dtype) {
    case data::DType::kUint8:
    case data::DType::kBytes:
      return py::dtype::of<uint8_t>();
    case data::DType::kInt32:
      return py::dtype::of<int32_t>();
    case data::DType::kInt64:
      return py::dtype::of<int64_t>();
    case data::DType::kFloat32:
      return py::dtype::of<float>();
  }
  return py::dtype::of<uint8_t>();
}

// A read-only numpy view of `tensor`'s bytes whose base is a Buffer object owning a reference.
py::array TensorToArray(const data::Tensor& tensor) {
  std::vector<py::ssize_t> shape(tensor.shape.begin(), tensor.shape.end());
  if (tensor.dtype == data::DType::kBytes) shape = {static_cast<py::ssize_t>(tensor.data.size())};
  py::object base = py::cast(PyBuffer{tensor.data});
  py::array array(NumpyDType(tensor.dtype), shape, tensor.data.data(), base);
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

// A tensor exported through DLPack: one in device memory (to_device), or a host tensor (for tests
// of the export without a GPU, and for any DLPack consumer).
struct DeviceArray {
  data::Tensor tensor;
};

struct DLPackContext {
  data::Tensor tensor;  // keeps the memory alive until the consumer's deleter runs
  std::vector<int64_t> shape, strides;
  dlpack::DLManagedTensor managed;
};

void DeleteManaged(dlpack::DLManagedTensor* self) {
  delete static_cast<DLPackContext*>(self->manager_ctx);
}

void CapsuleDestructor(PyObject* capsule) {
  // Taken by a consumer: it renamed the capsule and owns the tensor now.
  if (PyCapsule_IsValid(capsule, dlpack::kUsedCapsuleName)) return;
  auto* managed =
      static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
  if (managed == nullptr) {
    PyErr_Clear();
    return;
  }
  managed->deleter(managed);
}

dlpack::DLDataType DLPackType(data::DType dtype) {
  switch (dtype) {
    case data::DType::kInt32:
      return {dlpack::kDLInt, 32, 1};
    case data::DType::kInt64:
      return {dlpack::kDLInt, 64, 1};
    case data::DType::kFloat32:
      return {dlpack::kDLFloat, 32, 1};
    case data::DType::kUint8:
    case data::DType::kBytes:
      break;
  }
  return {dlpack::kDLUInt, 8, 1};
}

py::tuple DLPackDevice(const DeviceArray& a) {
  return a.tensor.device >= 0 ? py::make_tuple(int(dlpack::kDLCUDA), a.tensor.device)
                              : py::make_tuple(int(dlpack::kDLCPU), 0);
}

// __dlpack__(stream=None, max_version=None, dl_device=None, copy=None), as the Python array API
// defines it. For a device tensor, `stream` is the consumer's CUDA stream (None and 1: the legacy
// default stream; 2: per-thread default; -1: no synchronization): it is made to wait, on the
// device, for the batch's copies and kernel. The capsule is the unversioned kind, which every
// consumer accepts whatever max_version it offers.
py::capsule ToDLPack(const DeviceArray& a, py::object stream, py::object max_version,
                     py::object dl_device, py::object copy) {
  if (!copy.is_none() && copy.cast<bool>()) {
    PyErr_SetString(PyExc_BufferError, "stoker exports its arrays without copying (copy=True)");
    throw py::error_already_set();
  }
  if (!dl_device.is_none() && !DLPackDevice(a).equal(py::tuple(dl_device))) {
    PyErr_SetString(PyExc_BufferError, "stoker exports an array on its own device only");
    throw py::error_already_set();
  }
  if (a.tensor.device >= 0) {
    const int64_t s = stream.is_none() ? 1 : stream.cast<int64_t>();
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = data::WaitForDeviceTensor(a.tensor, s);
    }
    if (!status.ok()) Raise(status);
  }
  auto ctx = std::make_unique<DLPackContext>();
  ctx->tensor = a.tensor;
  ctx->shape = a.tensor.shape;
  ctx->strides.assign(ctx->shape.size(), 1);
  for (int i = static_cast<int>(ctx->shape.size()) - 2; i >= 0; --i) {
    ctx->strides[i] = ctx->strides[i + 1] * ctx->shape[i + 1];
  }
  dlpack::DLTensor& t = ctx->managed.dl_tensor;
  t.data = const_cast<uint8_t*>(a.tensor.data.data());
  t.device = a.tensor.device >= 0 ? dlpack::DLDevice{dlpack::kDLCUDA, a.tensor.device}
                                  : dlpack::DLDevice{dlpack::kDLCPU, 0};
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = DLPackType(a.tensor.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = DeleteManaged;
  dlpack::DLManagedTensor* managed = &ctx.release()->managed;
  PyObject* capsule = PyCapsule_New(managed, dlpack::kCapsuleName, CapsuleDestructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

py::object TensorToPython(const data::Tensor& tensor) {
  if (tensor.device >= 0) return py::cast(DeviceArray{tensor});
  return TensorToArray(tensor);
}

}  // namespace

py::dict ElementToDict(const data::Element& element) {
  py::dict out;
  for (const auto& [name, tensor] : element.fields) out[py::str(name)] = TensorToPython(tensor);
  py::list keys;
  for (const std::string& key : element.keys) keys.append(py::str(key));
  out["__keys__"] = keys;
  return out;
}

void BindArrays(py::module_& m) {
  py::class_<PyBuffer>(m, "Buffer", py::buffer_protocol(),
                       "Read-only bytes owned by stoker; numpy arrays from stoker keep one as base")
      .def_buffer([](PyBuffer& b) {
        return py::buffer_info(const_cast<uint8_t*>(b.buffer.data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.buffer.size())}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const PyBuffer& b) { return b.buffer.size(); })
      .def(
          "address", [](const PyBuffer& b) { return reinterpret_cast<uintptr_t>(b.buffer.data()); },
          "address of the first byte (for tests that check arrays share memory)");

  py::class_<DeviceArray>(m, "DeviceArray",
                          "A tensor in GPU memory from the to_device op; torch.from_dlpack(a) (or "
                          "any DLPack consumer) takes it without a copy")
      .def_property_readonly("shape",
                             [](const DeviceArray& a) {
                               py::tuple t(a.tensor.shape.size());
                               for (size_t i = 0; i < a.tensor.shape.size(); ++i)
                                 t[i] = a.tensor.shape[i];
                               return t;
                             })
      .def_property_readonly("dtype",
                             [](const DeviceArray& a) { return data::DTypeName(a.tensor.dtype); })
      .def_property_readonly(
          "device", [](const DeviceArray& a) { return a.tensor.device; },
          "CUDA device index (-1: host memory)")
      .def_property_readonly("nbytes", [](const DeviceArray& a) { return a.tensor.data.size(); })
      .def_property_readonly(
          "data_ptr",
          [](const DeviceArray& a) { return reinterpret_cast<uintptr_t>(a.tensor.data.data()); })
      .def("__dlpack__", &ToDLPack, py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", &DLPackDevice)
      .def(
          "synchronize",
          [](const DeviceArray& a) {
            if (a.tensor.device < 0) return;
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = data::SynchronizeDeviceTensor(a.tensor);
            }
            if (!status.ok()) Raise(status);
          },
          "blocks until the array's copies and kernel have run")
      .def("__repr__", [](const DeviceArray& a) {
        return "stoker.DeviceArray(" + std::string(data::DTypeName(a.tensor.dtype)) + " " +
               a.tensor.ShapeString() +
               (a.tensor.device >= 0 ? " on cuda:" + std::to_string(a.tensor.device) : " on host") +
               ")";
      });
  m.attr("HAVE_CUDA") = data::CudaBuilt();
  // For tests of the DLPack export without a GPU: a DeviceArray over a copy of a C-contiguous
  // numpy array (uint8, int32, int64 or float32) in host memory.
  m.def("_host_device_array", [](py::array array) {
    py::buffer_info info = array.request();
    data::DType dtype;
    if (array.dtype().is(py::dtype::of<uint8_t>())) {
      dtype = data::DType::kUint8;
    } else if (array.dtype().is(py::dtype::of<int32_t>())) {
      dtype = data::DType::kInt32;
    } else if (array.dtype().is(py::dtype::of<int64_t>())) {
      dtype = data::DType::kInt64;
    } else if (array.dtype().is(py::dtype::of<float>())) {
      dtype = data::DType::kFloat32;
    } else {
      throw py::type_error("expected a uint8, int32, int64 or float32 array");
    }
    py::array contiguous = py::array::ensure(array, py::array::c_style);
    std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
    return DeviceArray{data::Tensor{
        dtype, shape,
        Buffer::Copy(std::string_view(static_cast<const char*>(contiguous.request().ptr),
                                      static_cast<size_t>(contiguous.nbytes())))}};
  });
}

}  // namespace stoker::python
