// stoker._stoker: the pybind11 binding under the `stoker` Python package (docs/python.md).
//
// What crosses the boundary:
//   - Pipeline: a compiled spec (stoker::data::Pipeline); immutable, shareable across threads.
//   - Iterator: a PipelineIterator; next() releases the GIL while C++ produces the element, then
//     returns a dict of numpy arrays whose memory is the element's stoker::Buffer (no copy). Each
//     array's `base` is a Buffer object holding a reference to those bytes, so an array stays valid
//     after the iterator is gone.
//   - DeviceArray: a tensor in GPU memory (from the to_device op), exported through DLPack
//     (__dlpack__, __dlpack_device__) so torch.from_dlpack takes it without a copy; the consumer's
//     stream waits for the batch's event on the device (docs/gpu.md).
//   - open/ls helpers over the object-store layer (io::OpenUrl).
//   - the stage op "python_map" (Pipeline.map(fn)): a Python function on a thread of its own.
// Errors: a failed absl::Status becomes a Python exception carrying its message
// (InvalidArgument → ValueError, NotFound → FileNotFoundError, PermissionDenied → PermissionError,
// anything else → stoker.StokerError).
//
// Thread safety: an Iterator is used by one Python thread at a time (pybind11 holds no lock for it;
// Python code must not call next() on the same iterator from two threads at once). Pipeline,
// Buffer and File are safe to share.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <time.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dlpack_abi.h"
#include "stoker/core/buffer.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/core/version.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/tensor.h"
#include "stoker/data/to_device.h"
#include "stoker/format/manifest.h"
#include "stoker/io/object_store.h"
#include "stoker/io/url.h"
#ifdef STOKER_HAVE_SERVICE
#include "stoker/service/client/client.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"
#endif

namespace py = pybind11;

namespace stoker::python {
namespace {

// stoker.StokerError, created at module init and kept for the life of the process.
py::object* stoker_error_storage = nullptr;

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

template <typename T>
T ValueOrRaise(absl::StatusOr<T> result) {
  if (!result.ok()) Raise(result.status());
  return *std::move(result);
}

// The Python face of a stoker::Buffer: read-only bytes exposed through the buffer protocol.
struct PyBuffer {
  Buffer buffer;
};

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

py::dict ElementToDict(const data::Element& element) {
  py::dict out;
  for (const auto& [name, tensor] : element.fields) out[py::str(name)] = TensorToPython(tensor);
  py::list keys;
  for (const std::string& key : element.keys) keys.append(py::str(key));
  out["__keys__"] = keys;
  return out;
}

// Python's next() over a C++ iterator: get_next() runs without the GIL; end of data raises
// StopIteration, an error raises StokerError.
template <typename GetNext>
py::dict NextAsDict(GetNext get_next) {
  absl::StatusOr<std::optional<data::Element>> next;
  {
    py::gil_scoped_release release;
    next = get_next();
  }
  if (!next.ok()) Raise(next.status());
  if (!next->has_value()) throw py::stop_iteration();
  return ElementToDict(**next);
}

class Iterator {
 public:
  explicit Iterator(std::unique_ptr<data::PipelineIterator> it) : it_(std::move(it)) {}

  py::dict Next() {
    if (it_ == nullptr) throw py::stop_iteration();
    return NextAsDict([this] { return it_->GetNext(); });
  }

  std::string Save() {
    py::gil_scoped_release release;
    return ValueOrRaise(it_->Save());
  }

  void Restore(const std::string& token) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = it_->Restore(token);
    }
    if (!status.ok()) Raise(status);
  }

  int64_t epoch() const { return it_->epoch(); }

  // The stage report: one dict per stage (name, cpu_seconds, elements, bytes, skipped).
  py::list Stats() const {
    py::list out;
    if (it_ == nullptr) return out;
    for (const data::StageStats* s : it_->runtime().AllStats()) {
      py::dict d;
      d["stage"] = s->name;
      d["cpu_seconds"] = s->busy_ns.load() / 1e9;
      d["elements"] = s->elements.load();
      d["bytes"] = s->bytes.load();
      d["skipped"] = s->skipped.load();
      out.append(d);
    }
    return out;
  }

 private:
  std::unique_ptr<data::PipelineIterator> it_;
};

// Hands the source one contiguous range of positions: this rank's share of the epoch order.
// Unlike data::SingleSplit (one pass, as a worker's split), it hands the range again after each
// end, so a `repeat` after the source reads this rank's share in every repetition.
class RankShare : public data::SplitProvider {
 public:
  explicit RankShare(data::Split split) : split_(split) {}
  // The split, then the end; then the split again, for the next pass of the source (a `repeat`
  // reopens it for each repetition, which reads this rank's share of that epoch's order).
  absl::StatusOr<std::optional<data::Split>> GetNext() override {
    done_ = !done_;
    if (!done_) return std::nullopt;
    return split_;
  }

 private:
  data::Split split_;
  bool done_ = false;
};

// An Iterator that owns its split provider (declared first so it outlives the iterator).
class ShardedIterator : public Iterator {
 public:
  ShardedIterator(std::unique_ptr<RankShare> splits, std::unique_ptr<data::PipelineIterator> it)
      : Iterator(std::move(it)), splits_(std::move(splits)) {}

 private:
  std::unique_ptr<RankShare> splits_;
};

// ---- python_map: Pipeline.map(fn) --------------------------------------------------------
//
// A stage of its own: one thread pulls elements from the stage's input (C++, without the GIL),
// then takes the GIL to call fn(dict) -> dict, and queues the result (`buffer` elements ahead).
// Its StageStats ("ops[i].python_map") count the CPU time spent converting and in fn. Checkpoints
// replay: the state is the input's state when the stage started plus the number of elements
// returned; Restore re-reads that many input elements without calling fn. Errors of fn or of
// what it returns are Unknown (stoker.StokerError in Python), naming the stage and the sample.

bool PythonAlive() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

// A reference to a Python object that C++ threads hold; released under the GIL (leaked if the
// interpreter is already gone).
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef() {
    if (!PythonAlive()) return;
    py::gil_scoped_acquire gil;
    Py_XDECREF(object_);
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::handle get() const { return object_; }

 private:
  PyObject* object_;
};

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One field returned by the Python function as a Tensor (a copy, unless it is the very array
// stoker passed in, which keeps its tensor).
absl::StatusOr<data::Tensor> ToTensor(const std::string& stage, const std::string& name,
                                      py::handle value, const data::Element& in,
                                      const py::dict& in_dict) {
  if (in_dict.contains(name) && value.is(in_dict[py::str(name)])) return in.fields.at(name);
  data::Tensor tensor;
  if (py::isinstance<py::bytes>(value)) {
    tensor.dtype = data::DType::kBytes;
    tensor.data = Buffer::Copy(std::string(py::reinterpret_borrow<py::bytes>(value)));
    return tensor;
  }
  py::array array = py::module_::import("numpy").attr("ascontiguousarray")(value);
  const char kind = array.dtype().kind();
  const auto size = array.dtype().itemsize();
  if (kind == 'u' && size == 1) {
    tensor.dtype = data::DType::kUint8;
  } else if (kind == 'i' && size == 4) {
    tensor.dtype = data::DType::kInt32;
  } else if (kind == 'i' && size == 8) {
    tensor.dtype = data::DType::kInt64;
  } else if (kind == 'f' && size == 4) {
    tensor.dtype = data::DType::kFloat32;
  } else {
    return absl::UnknownError(StrCat(stage, ": field '", name,
                                     "' returned by the Python function has dtype ",
                                     std::string(py::str(array.dtype())),
                                     "; stoker tensors are uint8, int32, int64 or float32 "
                                     "(convert it, e.g. array.astype(numpy.float32))"));
  }
  for (py::ssize_t i = 0; i < array.ndim(); ++i) tensor.shape.push_back(array.shape(i));
  MutableBuffer bytes(static_cast<size_t>(array.nbytes()));
  if (array.nbytes() > 0) std::memcpy(bytes.data(), array.data(), bytes.size());
  tensor.data = std::move(bytes).Finish();
  return tensor;
}

class PythonMapNode : public data::DatasetNode {
 public:
  PythonMapNode(data::NodePtr input, std::shared_ptr<PyRef> fn, std::string stage, int buffer)
      : input_(std::move(input)), fn_(std::move(fn)), stage_(std::move(stage)), buffer_(buffer) {}
  std::unique_ptr<data::Iterator> MakeIterator(const data::IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override { return input_->Cardinality(); }

  data::NodePtr input_;
  std::shared_ptr<PyRef> fn_;
  std::string stage_;
  int buffer_;
};

class PythonMapIterator : public data::Iterator {
 public:
  PythonMapIterator(const PythonMapNode& node, const data::IteratorContext& ctx)
      : node_(node),
        input_(node.input_->MakeIterator(ctx)),
        stats_(ctx.runtime->Stats(node.stage_)) {}
  ~PythonMapIterator() override { Stop(); }

  absl::StatusOr<std::optional<data::Element>> GetNext() override {
    if (!thread_.joinable()) Start();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::deque<absl::StatusOr<std::optional<data::Element>>>* q) { return !q->empty(); },
        &queue_));
    // The end of the input or an error stays at the front: later calls return it again.
    if (!queue_.front().ok() || !queue_.front()->has_value()) return queue_.front();
    absl::StatusOr<std::optional<data::Element>> next = std::move(queue_.front());
    queue_.pop_front();
    ++returned_;
    return next;
  }

  absl::StatusOr<nlohmann::json> Save() override {
    if (!thread_.joinable()) Start();
    RETURN_IF_ERROR(start_state_.status());
    absl::MutexLock lock(&mu_);
    return nlohmann::json{{"start", *start_state_}, {"returned", returned_}};
  }

  absl::Status Restore(const nlohmann::json& state) override {
    if (!state.is_object() || !state.contains("start") || !state.contains("returned") ||
        !state["returned"].is_number_integer()) {
      return absl::InvalidArgumentError(StrCat("iterator state does not match this pipeline (",
                                               node_.stage_,
                                               "); restore a token saved by the same spec"));
    }
    Stop();
    {
      absl::MutexLock lock(&mu_);
      queue_.clear();
    }
    RETURN_IF_ERROR(input_->Restore(state["start"]));
    start_state_ = state["start"];
    const int64_t returned = state["returned"].get<int64_t>();
    for (int64_t i = 0; i < returned; ++i) {
      ASSIGN_OR_RETURN(std::optional<data::Element> skipped, input_->GetNext());
      if (!skipped) break;
    }
    returned_ = returned;
    return absl::OkStatus();
  }

 private:
  // Called by the consumer's thread, before the worker touches the input.
  void Start() {
    if (!start_state_captured_) {
      start_state_ = input_->Save();
      start_state_captured_ = true;
    }
    stop_ = false;
    thread_ = StartThread("python-map", [this] { Loop(); });
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (!thread_.joinable()) return;
    // The worker may be waiting for the GIL this thread holds.
    if (PythonAlive() && PyGILState_Check()) {
      py::gil_scoped_release release;
      thread_.join();
    } else {
      thread_.join();
    }
  }

  void Loop() {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &PythonMapIterator::HasRoomOrStop));
        if (stop_) return;
      }
      absl::StatusOr<std::optional<data::Element>> next = input_->GetNext();
      if (next.ok() && next->has_value()) next = Call(std::move(**next));
      const bool last = !next.ok() || !next->has_value();
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      queue_.push_back(std::move(next));
      if (last) return;
    }
  }

  bool HasRoomOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || static_cast<int>(queue_.size()) < node_.buffer_;
  }

  absl::StatusOr<std::optional<data::Element>> Call(data::Element in) {
    if (!PythonAlive()) return absl::CancelledError("the Python interpreter is shutting down");
    py::gil_scoped_acquire gil;
    const int64_t start = ThreadCpuNanos();
    absl::StatusOr<std::optional<data::Element>> result;
    try {
      py::dict in_dict = ElementToDict(in);
      py::object out = node_.fn_->get()(in_dict);
      if (!py::isinstance<py::dict>(out)) {
        result = absl::UnknownError(
            StrCat(node_.stage_, ": the Python function must return a dict of arrays (got ",
                   std::string(py::str(py::type::handle_of(out).attr("__name__"))), ") for sample ",
                   in.FirstKey()));
      } else {
        data::Element element;
        element.sample_index = in.sample_index;
        element.keys = in.keys;
        absl::Status status;
        for (auto [key, value] : py::reinterpret_borrow<py::dict>(out)) {
          std::string name = py::str(key);
          if (name == "__keys__") {
            element.keys = value.cast<std::vector<std::string>>();
            continue;
          }
          absl::StatusOr<data::Tensor> tensor = ToTensor(node_.stage_, name, value, in, in_dict);
          if (!tensor.ok()) {
            status = tensor.status();
            break;
          }
          element.fields[name] = *std::move(tensor);
        }
        if (status.ok()) {
          stats_->elements += 1;
          stats_->bytes += static_cast<int64_t>(element.ByteSize());
          result = std::optional<data::Element>(std::move(element));
        } else {
          result = status;
        }
      }
    } catch (py::error_already_set& e) {
      result = absl::UnknownError(StrCat(node_.stage_, ": the Python function raised ", e.what(),
                                         " (sample ", in.FirstKey(), ")"));
    } catch (const std::exception& e) {
      result =
          absl::UnknownError(StrCat(node_.stage_, ": ", e.what(), " (sample ", in.FirstKey(), ")"));
    }
    stats_->busy_ns += ThreadCpuNanos() - start;
    return result;
  }

  const PythonMapNode& node_;
  std::unique_ptr<data::Iterator> input_;
  data::StageStats* stats_;
  absl::StatusOr<nlohmann::json> start_state_ = nlohmann::json();
  bool start_state_captured_ = false;
  int64_t returned_ = 0;  // touched by the consumer's thread only
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<absl::StatusOr<std::optional<data::Element>>> queue_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<data::Iterator> PythonMapNode::MakeIterator(
    const data::IteratorContext& ctx) const {
  return std::make_unique<PythonMapIterator>(*this, ctx);
}

// {"op": "python_map", "fn": NAME, "buffer": N}: NAME is looked up in stoker.pipeline's registry
// of this process (Pipeline.map registers the function there).
absl::StatusOr<data::NodePtr> MakePythonMap(data::ParamReader& params,
                                            const data::OpContext& context) {
  const std::string stage = StrCat("ops[", context.index, "].", context.name);
  std::string name = params.String("fn");
  int64_t buffer = params.Int("buffer", 2, 1, 1024);
  RETURN_IF_ERROR(params.Finish());
  if (!PythonAlive()) return absl::FailedPreconditionError("python_map: no Python interpreter");
  std::shared_ptr<PyRef> fn;
  {
    py::gil_scoped_acquire gil;
    py::object found =
        py::module_::import("stoker.pipeline").attr("_python_functions").attr("get")(name);
    if (found.is_none()) {
      return absl::InvalidArgumentError(StrCat(
          stage, ".fn: no Python function '", name,
          "' in this process; a pipeline with map(fn) runs only in the Python process that built "
          "it (not with `stoker run` or the service: write the step as a C++ plugin op for those, "
          "docs/pipeline.md)"));
    }
    fn = std::make_shared<PyRef>(found);
  }
  return std::make_shared<PythonMapNode>(context.input(), std::move(fn), stage,
                                         static_cast<int>(buffer));
}

// The class names a converted folder tree's manifest records (format::Manifest::classes).
std::vector<std::string> DatasetClasses(const std::string& url) {
  std::string manifest_url = url;
  if (!url.ends_with(".json")) {
    manifest_url = io::JoinUrl(url, std::string(format::kManifestName));
  }
  io::StoreAndKey target = ValueOrRaise(io::OpenUrl(manifest_url));
  absl::StatusOr<Buffer> bytes;
  {
    py::gil_scoped_release release;
    bytes = target.store->Read(target.key);
  }
  Buffer text = ValueOrRaise(std::move(bytes));
  return ValueOrRaise(format::ParseManifest(text.view(), manifest_url)).classes;
}

class File {
 public:
  explicit File(const std::string& url) : url_(url) {
    target_ = ValueOrRaise(io::OpenUrl(url));
    absl::StatusOr<io::ObjectInfo> info;
    {
      py::gil_scoped_release release;
      info = target_.store->Stat(target_.key);
    }
    size_ = ValueOrRaise(std::move(info)).size;
  }
  uint64_t size() const { return size_; }
  const std::string& url() const { return url_; }

  // Bytes [offset, offset + length) clipped to the object's end, as a Buffer (no copy).
  PyBuffer ReadRange(uint64_t offset, uint64_t length) {
    if (offset >= size_ || length == 0) return PyBuffer{};
    length = std::min<uint64_t>(length, size_ - offset);
    absl::StatusOr<Buffer> bytes;
    {
      py::gil_scoped_release release;
      bytes = target_.store->Read(target_.key, io::ByteRange{offset, length});
    }
    return PyBuffer{ValueOrRaise(std::move(bytes))};
  }

 private:
  std::string url_;
  io::StoreAndKey target_;
  uint64_t size_ = 0;
};

#ifdef STOKER_HAVE_SERVICE
// One consumer of a service job (service::ServiceClient), epoch by epoch: next() returns the
// epoch's elements, then None at its end; advance_epoch() moves on.
class ServiceConsumer {
 public:
  explicit ServiceConsumer(const py::dict& o) {
    service::ServiceClientOptions options;
    options.dispatcher_address = o["dispatcher"].cast<std::string>();
    options.job_name = o["job_name"].cast<std::string>();
    options.sharding = o["sharding"].cast<std::string>();
    options.compression = o["compression"].cast<std::string>();
    options.num_epochs = o["num_epochs"].cast<int64_t>();
    options.first_epoch = o["first_epoch"].cast<int64_t>();
    options.num_consumers = o["num_consumers"].cast<int64_t>();
    options.consumer_index = o["consumer_index"].cast<int64_t>();
    options.partial_round = o["partial_round"].cast<std::string>();
    options.deterministic = o["deterministic"].cast<bool>();
    if (o.contains("prefetch_mb") && !o["prefetch_mb"].is_none()) {
      // A request asks for at most what the prefetch budget holds.
      options.prefetch_bytes = o["prefetch_mb"].cast<int64_t>() << 20;
      options.request_bytes = std::min(options.request_bytes, options.prefetch_bytes);
    }
    if (o.contains("cross_trainer_cache")) {
      options.cross_trainer_cache = o["cross_trainer_cache"].cast<bool>();
      options.trainer_id = o["trainer_id"].cast<std::string>();
      options.on_fall_behind = o["on_fall_behind"].cast<std::string>();
    }
    if (o.contains("resume") && !o["resume"].is_none())
      options.resume = o["resume"].cast<std::string>();
    options.no_worker_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(o["no_worker_timeout"].cast<double>() * 1000));
    auto file = [&](const char* key) {
      return o.contains(key) && !o[key].is_none() ? o[key].cast<std::string>() : std::string();
    };
    options.security.tls_ca_file = file("tls_ca");
    options.security.token_file = file("token_file");
    options.security.tls_cert_file = file("tls_cert");
    options.security.tls_key_file = file("tls_key");
    const std::string spec_json = o["spec_json"].cast<std::string>();
    absl::StatusOr<std::unique_ptr<service::ServiceClient>> client;
    {
      py::gil_scoped_release release;
      client = service::ServiceClient::Open(options, spec_json);
    }
    client_ = ValueOrRaise(std::move(client));
  }

  // The next element of the epoch, or None at its end. Waits in slices with the GIL released
  // and checks for signals between them, so Ctrl-C raises KeyboardInterrupt within ~0.2 s.
  py::object Next() {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    while (true) {
      absl::StatusOr<std::optional<data::Element>> next;
      {
        py::gil_scoped_release release;
        next = client_->GetNext(absl::Milliseconds(200));
      }
      if (!next.ok() && absl::IsDeadlineExceeded(next.status())) {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        continue;
      }
      if (!next.ok()) Raise(next.status());
      if (!next->has_value()) return py::none();
      return ElementToDict(**next);
    }
  }

  bool AdvanceEpoch() { return client_ != nullptr && client_->AdvanceEpoch(); }
  // The consumer's checkpoint token (client/checkpoint.h).
  std::string Checkpoint() {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    absl::StatusOr<std::string> token;
    {
      py::gil_scoped_release release;  // may wait for a heartbeat
      token = client_->Checkpoint();
    }
    return ValueOrRaise(std::move(token));
  }
  std::string Fingerprint() const { return client_ ? client_->fingerprint() : std::string(); }
  int64_t epoch() const { return client_ ? client_->epoch() : -1; }
  int64_t job_id() const { return client_ ? client_->job_id() : -1; }
  // The client's counters (ServiceClientStats) as a dict.
  py::dict Stats() const {
    py::dict d;
    if (!client_) return d;
    const service::ServiceClientStats s = client_->stats();
    d["elements"] = s.elements;
    d["bytes"] = s.bytes;
    d["duplicates"] = s.duplicates;
    d["splits"] = s.splits;
    d["cache_hits"] = s.cache_hits;
    d["cache_recomputed"] = s.cache_recomputed;
    d["cache_skipped"] = s.cache_skipped;
    return d;
  }

  // Samples per epoch as the job's workers counted them (waits up to `timeout` seconds).
  int64_t NumSamples(double timeout) {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->WaitForJobInfo(absl::Seconds(timeout));
    }
    if (!s.ok()) Raise(s);
    return client_->num_samples();
  }

  // Leaves the job; destroying the client joins its threads, which never take the GIL.
  void Close() {
    py::gil_scoped_release release;
    client_.reset();
  }

 private:
  std::unique_ptr<service::ServiceClient> client_;
};

// In-process servers, for notebooks and tests (as tf.data's DispatchServer / WorkerServer).
class DispatcherServer {
 public:
  DispatcherServer(int port, const std::string& work_dir, int64_t worker_timeout_ms,
                   int64_t client_timeout_ms) {
    service::DispatcherOptions options;
    options.port = port;
    options.work_dir = work_dir;
    options.worker_timeout = std::chrono::milliseconds(worker_timeout_ms);
    options.client_timeout = std::chrono::milliseconds(client_timeout_ms);
    absl::StatusOr<std::unique_ptr<service::Dispatcher>> d;
    {
      py::gil_scoped_release release;
      d = service::Dispatcher::Start(options);
    }
    dispatcher_ = ValueOrRaise(std::move(d));
    port_ = dispatcher_->port();
  }
  int port() const { return port_; }
  void Stop() {
    py::gil_scoped_release release;
    dispatcher_.reset();
  }

 private:
  std::unique_ptr<service::Dispatcher> dispatcher_;
  int port_ = 0;
};

class WorkerServer {
 public:
  WorkerServer(const std::string& dispatcher, int port, const std::string& host, int threads,
               int64_t buffer_bytes, int64_t heartbeat_ms) {
    service::WorkerOptions options;
    options.dispatcher_address = ValueOrRaise(service::NormalizeDispatcherAddress(dispatcher));
    options.port = port;
    options.host = host;
    options.threads = threads;
    if (buffer_bytes > 0) options.buffer_bytes = buffer_bytes;
    options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    absl::StatusOr<std::unique_ptr<service::Worker>> w;
    {
      py::gil_scoped_release release;
      w = service::Worker::Start(options);
    }
    worker_ = ValueOrRaise(std::move(w));
    address_ = worker_->address();
  }
  const std::string& address() const { return address_; }
  // drain_timeout > 0: a graceful stop (finish the splits it runs, hand over what it holds).
  void Stop(double drain_timeout) {
    py::gil_scoped_release release;
    if (worker_ && drain_timeout > 0)
      worker_->Drain(std::chrono::milliseconds(static_cast<int64_t>(drain_timeout * 1000)));
    worker_.reset();
  }

 private:
  std::unique_ptr<service::Worker> worker_;
  std::string address_;
};
#endif

py::list Ls(const std::string& url, bool recursive) {
  io::StoreAndKey target = ValueOrRaise(io::OpenUrl(url));
  py::list out;
  auto entry = [&](const std::string& entry_url, std::optional<uint64_t> size,
                   std::optional<double> mtime) {
    py::dict d;
    d["url"] = entry_url;
    d["size"] = size ? py::cast(*size) : py::none();
    d["mtime"] = mtime ? py::cast(*mtime) : py::none();
    d["is_dir"] = !size.has_value();
    out.append(d);
  };
  std::string prefix = target.key;
  absl::StatusOr<io::ListResult> listing;
  {
    py::gil_scoped_release release;
    // A URL naming one object lists that object; otherwise the "folder" below it.
    if (!prefix.empty() && !prefix.ends_with("/")) {
      absl::StatusOr<io::ObjectInfo> info = target.store->Stat(prefix);
      if (info.ok()) {
        listing = io::ListResult{};
        listing->objects.push_back(*info);
      } else {
        prefix += "/";
      }
    }
    if (!listing.ok()) listing = target.store->List({prefix, recursive ? "" : "/", 0});
  }
  io::ListResult result = ValueOrRaise(std::move(listing));
  for (const std::string& folder : result.common_prefixes) {
    entry(target.store->Url(folder), std::nullopt, std::nullopt);
  }
  for (const io::ObjectInfo& info : result.objects) {
    entry(target.store->Url(info.key), info.size,
          absl::ToDoubleSeconds(info.mtime - absl::UnixEpoch()));
  }
  return out;
}

}  // namespace
}  // namespace stoker::python

using namespace stoker;
using namespace stoker::python;

PYBIND11_MODULE(_stoker, m) {
  m.doc() = "stoker's C++ core; use the `stoker` package instead (docs/python.md)";
  stoker::InitLogging();  // STOKER_LOG sets the level; logs go to stderr
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as the stoker CLI does
  stoker_error_storage =
      new py::object(py::exception<std::runtime_error>(m, "StokerError", PyExc_RuntimeError));

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

  py::class_<Iterator>(m, "Iterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Iterator::Next)
      .def("save", &Iterator::Save, "opaque checkpoint token (needs a deterministic pipeline)")
      .def("restore", &Iterator::Restore, py::arg("token"))
      .def_property_readonly("epoch", &Iterator::epoch)
      .def("stats", &Iterator::Stats, "per-stage counters: stage, cpu_seconds, elements, bytes");
  py::class_<ShardedIterator, Iterator>(m, "ShardedIterator");

  py::class_<data::Pipeline, std::shared_ptr<data::Pipeline>>(m, "Pipeline")
      .def_static(
          "from_json",
          [](const std::string& text) {
            absl::StatusOr<std::shared_ptr<const data::Pipeline>> p;
            {
              py::gil_scoped_release release;
              p = data::Pipeline::FromString(text);
            }
            // pybind11 holders cannot be const; the object is never mutated through it.
            return std::const_pointer_cast<data::Pipeline>(ValueOrRaise(std::move(p)));
          },
          py::arg("text"))
      .def_property_readonly("fingerprint", &data::Pipeline::fingerprint)
      .def_property_readonly("spec_json", [](const data::Pipeline& p) { return p.spec().dump(); })
      .def_property_readonly("deterministic", &data::Pipeline::deterministic)
      .def_property_readonly("cardinality", &data::Pipeline::Cardinality)
      .def_property_readonly("source_size", &data::Pipeline::source_size)
      .def(
          "make_iterator",
          [](const data::Pipeline& p, int64_t epoch, int threads, int rank,
             int world_size) -> std::unique_ptr<Iterator> {
            if (world_size < 1 || rank < 0 || rank >= world_size) {
              throw py::value_error("rank must be in [0, world_size) and world_size >= 1");
            }
            py::gil_scoped_release release;
            if (world_size == 1) return std::make_unique<Iterator>(p.MakeIterator(epoch, threads));
            std::optional<int64_t> n = p.source_size();
            if (!n) {
              py::gil_scoped_acquire acquire;
              throw py::value_error(
                  "world_size > 1 needs an indexed source ({\"dataset\": URL}, range or memory); "
                  "streams (tar, tfrecord) cannot be split by rank in-process");
            }
            auto splits = std::make_unique<RankShare>(
                data::Split{*n * rank / world_size, *n * (rank + 1) / world_size});
            auto it = p.MakeIterator(epoch, threads, splits.get());
            return std::make_unique<ShardedIterator>(std::move(splits), std::move(it));
          },
          py::arg("epoch") = 0, py::arg("threads") = 0, py::arg("rank") = 0,
          py::arg("world_size") = 1);

  py::class_<File>(m, "File")
      .def(py::init<const std::string&>(), py::arg("url"))
      .def_property_readonly("size", &File::size)
      .def_property_readonly("url", &File::url)
      .def("read_range", &File::ReadRange, py::arg("offset"), py::arg("length"));

  m.def("ls", &Ls, py::arg("url"), py::arg("recursive") = false);
  m.def("dataset_classes", &DatasetClasses, py::arg("url"),
        "class names recorded in a dataset's manifest (empty when it has none)");
  m.attr("__version__") = stoker::Version();
  m.attr("GIT_COMMIT") = stoker::GitCommit();
  if (absl::Status s = data::RegisterDatasetOp("python_map", MakePythonMap); !s.ok()) {
    throw std::runtime_error(std::string(s.message()));
  }

#ifdef STOKER_HAVE_SERVICE
  m.attr("HAVE_SERVICE") = true;
  py::class_<ServiceConsumer>(m, "ServiceConsumer")
      .def(py::init<const py::dict&>(), py::arg("options"))
      .def("next", &ServiceConsumer::Next)
      .def("advance_epoch", &ServiceConsumer::AdvanceEpoch)
      .def("checkpoint", &ServiceConsumer::Checkpoint)
      .def_property_readonly("fingerprint", &ServiceConsumer::Fingerprint)
      .def("num_samples", &ServiceConsumer::NumSamples, py::arg("timeout") = 60.0)
      .def("close", &ServiceConsumer::Close)
      .def_property_readonly("epoch", &ServiceConsumer::epoch)
      .def_property_readonly("job_id", &ServiceConsumer::job_id)
      .def("stats", &ServiceConsumer::Stats,
           "counters: elements, bytes, duplicates, splits, cache_hits, cache_recomputed, "
           "cache_skipped");
  py::class_<DispatcherServer>(m, "DispatcherServer")
      .def(py::init<int, const std::string&, int64_t, int64_t>(), py::arg("port") = 0,
           py::arg("work_dir") = "", py::arg("worker_timeout_ms") = 3000,
           py::arg("client_timeout_ms") = 30000)
      .def_property_readonly("port", &DispatcherServer::port)
      .def("stop", &DispatcherServer::Stop);
  py::class_<WorkerServer>(m, "WorkerServer")
      .def(py::init<const std::string&, int, const std::string&, int, int64_t, int64_t>(),
           py::arg("dispatcher"), py::arg("port") = 0, py::arg("host") = "127.0.0.1",
           py::arg("threads") = 0, py::arg("buffer_bytes") = 0, py::arg("heartbeat_ms") = 500)
      .def_property_readonly("address", &WorkerServer::address)
      .def("stop", &WorkerServer::Stop, py::arg("drain_timeout") = 0.0);
#else
  m.attr("HAVE_SERVICE") = false;
#endif
}
