// stoker._stoker: the pybind11 binding under the `stoker` Python package (docs/python.md). This
// file defines the module and the error mapping its files share; the rest lives beside it:
//   - arrays.cc: Buffer, the element -> dict of numpy arrays conversion (no copy), DeviceArray
//     and its DLPack export (docs/gpu.md).
//   - pipeline.cc: Pipeline (a compiled spec) and Iterator (next() releases the GIL).
//   - python_map.cc: the stage op "python_map" (Pipeline.map(fn)): a Python function on a thread
//     of its own.
//   - storage.cc: File, ls and dataset_classes over the object-store layer (io::OpenUrl).
//   - service.cc: the service consumer and in-process servers (with the service layer only).
// Errors: a failed absl::Status becomes a Python exception carrying its message
// (InvalidArgument → ValueError, NotFound → FileNotFoundError, PermissionDenied → PermissionError,
// anything else → stoker.StokerError).
//
// Thread safety: an Iterator is used by one Python thread at a time (pybind11 holds no lock for it;
// Python code must not call next() on the same iterator from two threads at once). Pipeline,
// Buffer and File are safe to share.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "bindings.h"
#include "stoker/core/logging.h"
#include "stoker/core/version.h"

namespace stoker::python {
namespace {

// stoker.StokerError, created at module init and kept for the life of the process.
py::object* stoker_error_storage = nullptr;

}  // namespace

void SetStokerError(py::object error) { stoker_error_storage = new py::object(std::move(error)); }

[[noreturn]] void Raise(const absl::Status& status) {
  PyObject* type = stoker_error_storage->ptr();
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case absl::StatusCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      type = PyExc_PermissionError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, std::string(status.message()).c_str());
  throw py::error_already_set();
}

}  // namespace stoker::python

using namespace stoker;
using namespace stoker::python;

PYBIND11_MODULE(_stoker, m) {
  m.doc() = "stoker's C++ core; use the `stoker` package instead (docs/python.md)";
  stoker::InitLogging();  // STOKER_LOG sets the level; logs go to stderr
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as the stoker CLI does
  SetStokerError(py::exception<std::runtime_error>(m, "StokerError", PyExc_RuntimeError));

  BindArrays(m);
  BindPipeline(m);
  BindStorage(m);
  m.attr("__version__") = stoker::Version();
  m.attr("GIT_COMMIT") = stoker::GitCommit();
  if (absl::Status s = RegisterPythonMap(); !s.ok()) {
    throw std::runtime_error(std::string(s.message()));
  }

#ifdef STOKER_HAVE_SERVICE
  m.attr("HAVE_SERVICE") = true;
  BindService(m);
#else
  m.attr("HAVE_SERVICE") = false;
#endif
}
