// Internal to the stoker._stoker extension (python/src): what its files share. Raise/ValueOrRaise
// turn a failed absl::Status into a Python exception (InvalidArgument -> ValueError, NotFound ->
// FileNotFoundError, PermissionDenied/Unauthenticated -> PermissionError, anything else ->
// stoker.StokerError); the element conversion (arrays.cc) gives a data::Element as a dict of numpy
// arrays; each Bind* function adds one file's classes and functions to the module, and
// stoker_ext.cc calls them in order. Every function here needs the GIL held by its caller. Each
// file of the module includes this header, so all see the same pybind11 type casters (stl.h).
#ifndef STOKER_PYTHON_SRC_BINDINGS_H_
#define STOKER_PYTHON_SRC_BINDINGS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one set of std:: type casters

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stoker/core/buffer.h"
#include "stoker/data/tensor.h"

namespace stoker::python {

namespace py = pybind11;

// Sets the Python exception for `status` (which must not be OK) and throws
// py::error_already_set. stoker.StokerError must exist (SetStokerError ran at module init).
[[noreturn]] void Raise(const absl::Status& status);

// Records the module's stoker.StokerError for Raise; called once, at module init.
void SetStokerError(py::object error);

template <typename T>
T ValueOrRaise(absl::StatusOr<T> result) {
  if (!result.ok()) Raise(result.status());
  return *std::move(result);
}

// The Python face of a stoker::Buffer: read-only bytes exposed through the buffer protocol.
// The Python face of a stoker::Buffer: read-only bytes exposed through the buffer protocol.
struct PyBuffer {
  Buffer buffer;
};

// The element's fields as numpy arrays (DeviceArray for a tensor in device memory, no copy in
// either case), plus "__keys__": the list of its sample keys.
py::dict ElementToDict(const data::Element& element);

// Buffer, DeviceArray, HAVE_CUDA and _host_device_array (arrays.cc).
void BindArrays(py::module_& m);
// Iterator, ShardedIterator and Pipeline (pipeline.cc).
void BindPipeline(py::module_& m);
// File, ls and dataset_classes (storage.cc).
void BindStorage(py::module_& m);
// Registers the stage op "python_map" (Pipeline.map) with the op registry (python_map.cc).
absl::Status RegisterPythonMap();
#ifdef STOKER_HAVE_SERVICE
// ServiceConsumer, DispatcherServer and WorkerServer (service.cc).
void BindService(py::module_& m);
#endif

}  // namespace stoker::python

#endif  // STOKER_PYTHON_SRC_BINDINGS_H_
