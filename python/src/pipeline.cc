// The pipeline bindings of stoker._stoker: Pipeline is a compiled spec (stoker::data::Pipeline),
// immutable and shareable across threads; Iterator is a PipelineIterator whose next() releases the
// GIL while C++ produces the element, then returns it as a dict of numpy arrays (arrays.cc).
// make_iterator(rank, world_size) gives each rank its share of an indexed source.
// Thread safety: an Iterator is used by one Python thread at a time (pybind11 holds no lock for
// it; Python code must not call next() on the same iterator from two threads at once).
#include "stoker/data/pipeline.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bindings.h"
#include "stoker/data/op_registry.h"
#include "stoker/data/tensor.h"

namespace stoker::python {
namespace {

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

}  // namespace

namespace {

// The op registry's declared count effects (op_registry.h), for len() (stoker/_length.py): the
// one place that knows what each op does to the number of elements.
const char* CountEffectName(data::CountEffect effect) {
  switch (effect) {
    case data::CountEffect::kKeeps:
      return "keeps";
    case data::CountEffect::kMayDrop:
      return "may_drop";
    case data::CountEffect::kBatches:
      return "batches";
    case data::CountEffect::kGroupsByData:
      return "groups_by_data";
    case data::CountEffect::kTakes:
      return "takes";
    case data::CountEffect::kSkips:
      return "skips";
    case data::CountEffect::kRepeats:
      return "repeats";
    case data::CountEffect::kUndeclared:
      break;
  }
  return "undeclared";
}

nlohmann::json ParseJson(const std::string& text, const char* what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw py::value_error(std::string(what) + ": not valid JSON");
  return j;
}

}  // namespace

void BindPipeline(py::module_& m) {
  m.def(
      "elements_per_epoch",
      [](const std::string& ops_json, int64_t source_elements) {
        data::RegisterBuiltinOps();
        absl::StatusOr<int64_t> n =
            data::ElementsPerEpoch(ParseJson(ops_json, "ops"), source_elements);
        if (!n.ok()) throw py::type_error("len() is unknown: " + std::string(n.status().message()));
        return *n;
      },
      py::arg("ops_json"), py::arg("source_elements"),
      "elements per epoch of ops (JSON) over source_elements; TypeError naming the op when the "
      "data decides");
  m.def(
      "count_effect",
      [](const std::string& op_json) {
        data::RegisterBuiltinOps();
        return CountEffectName(data::CountEffectOf(ParseJson(op_json, "op")));
      },
      py::arg("op_json"),
      "what the op does to the element count: keeps, may_drop, batches, groups_by_data, takes, "
      "skips, repeats or undeclared");
  py::class_<Iterator>(m, "Iterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Iterator::Next)
      .def("save", &Iterator::Save, "opaque checkpoint token (needs a deterministic pipeline)")
      .def("restore", &Iterator::Restore, py::arg("token"))
      .def_property_readonly("epoch", &Iterator::epoch)
      .def("stats", &Iterator::Stats, "per-stage counters: stage, cpu_seconds, elements, bytes");
  // Registered only so that Python knows its type; its methods are Iterator's.
  py::class_<ShardedIterator, Iterator> sharded_iterator(m, "ShardedIterator");

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
}

}  // namespace stoker::python
