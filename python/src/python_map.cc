// The stage op "python_map" of stoker._stoker (Pipeline.map(fn)): a Python function in a stage of
// its own, inside a pipeline this process runs. One thread pulls elements from the stage's input
// (C++, without the GIL), then takes the GIL to call fn(dict) -> dict, and queues the result
// (`buffer` elements ahead). Its StageStats ("ops[i].python_map") count the CPU time spent
// converting and in fn. Checkpoints replay: the state is the input's state when the stage started
// plus the number of elements returned; Restore re-reads that many input elements without calling
// fn. Errors of fn or of what it returns are Unknown (stoker.StokerError in Python), naming the
// stage and the sample.
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
#include "bindings.h"
#include "stoker/core/buffer.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/pipeline.h"
#include "stoker/data/tensor.h"

namespace stoker::python {
namespace {

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

}  // namespace

absl::Status RegisterPythonMap() {
  return data::RegisterDatasetOp("python_map", MakePythonMap, {.count = data::CountEffect::kKeeps});
}

}  // namespace stoker::python
