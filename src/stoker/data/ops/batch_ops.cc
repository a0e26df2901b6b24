// The batch family: batch, padded_batch, bucket_by_length, and Collate (stacking elements into one
// tensor per field).
#include <algorithm>
#include <cstring>
#include <vector>

#include "stoker/data/op_registry.h"
#include "stoker/data/ops.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/ops/op_util.h"

namespace stoker::data {
namespace {

using ops_internal::json;
using ops_internal::ReplayIterator;
using ops_internal::ThreadCpuNanos;

// ---------------------------------------------------------------------------------------------
// Batch and padded batch: nothing is held between calls, so the state is the input's.

class BatchNode : public DatasetNode {
 public:
  BatchNode(NodePtr input, BatchOptions options) : input_(std::move(input)), options_(options) {}
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  std::optional<int64_t> Cardinality() const override {
    auto n = input_->Cardinality();
    if (!n) return n;
    return options_.drop_remainder ? *n / options_.size : (*n + options_.size - 1) / options_.size;
  }

  NodePtr input_;
  BatchOptions options_;
};

class BatchIterator : public Iterator {
 public:
  BatchIterator(const BatchNode& node, const IteratorContext& ctx)
      : node_(node),
        input_(node.input_->MakeIterator(ctx)),
        stats_(ctx.runtime->Stats(node.options_.padded ? "padded_batch" : "batch")) {}
  absl::StatusOr<std::optional<Element>> GetNext() override {
    std::vector<Element> elements;
    while (static_cast<int64_t>(elements.size()) < node_.options_.size) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) break;
      elements.push_back(std::move(*e));
    }
    if (elements.empty()) return std::nullopt;
    if (node_.options_.drop_remainder &&
        static_cast<int64_t>(elements.size()) < node_.options_.size) {
      return std::nullopt;
    }
    int64_t start = ThreadCpuNanos();
    ASSIGN_OR_RETURN(Element batch,
                     Collate(elements, node_.options_.padded, node_.options_.padding_value));
    stats_->busy_ns += ThreadCpuNanos() - start;
    stats_->elements += 1;
    stats_->bytes += static_cast<int64_t>(batch.ByteSize());
    return batch;
  }
  absl::StatusOr<json> Save() override { return input_->Save(); }
  absl::Status Restore(const json& state) override { return input_->Restore(state); }

 private:
  const BatchNode& node_;
  std::unique_ptr<Iterator> input_;
  StageStats* stats_;
};

std::unique_ptr<Iterator> BatchNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<BatchIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Bucket by length.

class BucketNode : public DatasetNode {
 public:
  std::unique_ptr<Iterator> MakeIterator(const IteratorContext& ctx) const override;
  NodePtr input_;
  std::string field_;
  std::vector<int64_t> boundaries_, batch_sizes_;
  double padding_value_;
  bool drop_remainder_;
};

class BucketIterator : public ReplayIterator {
 public:
  BucketIterator(const BucketNode& node, const IteratorContext& ctx)
      : ReplayIterator(node.input_->MakeIterator(ctx)),
        node_(node),
        buckets_(node.batch_sizes_.size()) {}

 protected:
  absl::StatusOr<std::optional<Element>> Produce() override {
    while (!input_done_) {
      ASSIGN_OR_RETURN(std::optional<Element> e, input_->GetNext());
      if (!e) {
        input_done_ = true;
        break;
      }
      ASSIGN_OR_RETURN(const Tensor* t, e->Field(node_.field_));
      int64_t length = t->dtype == DType::kBytes ? static_cast<int64_t>(t->data.size())
                       : t->shape.empty()        ? 1
                                                 : t->shape[0];
      size_t b = std::upper_bound(node_.boundaries_.begin(), node_.boundaries_.end(), length) -
                 node_.boundaries_.begin();
      buckets_[b].push_back(std::move(*e));
      if (static_cast<int64_t>(buckets_[b].size()) == node_.batch_sizes_[b]) {
        std::vector<Element> full = std::move(buckets_[b]);
        buckets_[b].clear();
        return Collate(full, true, node_.padding_value_);
      }
    }
    // End of input: flush partial buckets in bucket order.
    while (flush_ < buckets_.size()) {
      std::vector<Element> partial = std::move(buckets_[flush_]);
      buckets_[flush_++].clear();
      if (!partial.empty() && !node_.drop_remainder_)
        return Collate(partial, true, node_.padding_value_);
    }
    return std::nullopt;
  }
  void Reset() override {
    for (auto& b : buckets_) b.clear();
    input_done_ = false;
    flush_ = 0;
  }

 private:
  const BucketNode& node_;
  std::vector<std::vector<Element>> buckets_;
  bool input_done_ = false;
  size_t flush_ = 0;
};

std::unique_ptr<Iterator> BucketNode::MakeIterator(const IteratorContext& ctx) const {
  return std::make_unique<BucketIterator>(*this, ctx);
}

// ---------------------------------------------------------------------------------------------
// Collate.

template <typename T>
void FillValue(uint8_t* dst, int64_t count, double value) {
  T v = static_cast<T>(value);
  T* p = reinterpret_cast<T*>(dst);
  std::fill(p, p + count, v);
}

// Copies a row-major tensor of shape `src` into a region of shape `dst` (each dim >= src's).
void CopyPadded(const uint8_t* src, const std::vector<int64_t>& src_shape, uint8_t* dst,
                const std::vector<int64_t>& dst_shape, size_t dim, size_t item) {
  if (dim + 1 >= src_shape.size()) {
    int64_t n = src_shape.empty() ? 1 : src_shape.back();
    std::memcpy(dst, src, n * item);
    return;
  }
  int64_t src_stride = item, dst_stride = item;
  for (size_t d = dim + 1; d < src_shape.size(); ++d) {
    src_stride *= src_shape[d];
    dst_stride *= dst_shape[d];
  }
  for (int64_t i = 0; i < src_shape[dim]; ++i) {
    CopyPadded(src + i * src_stride, src_shape, dst + i * dst_stride, dst_shape, dim + 1, item);
  }
}

std::string FieldNames(const Element& e) {
  std::string s;
  for (const auto& [n, t] : e.fields) s += StrCat(s.empty() ? "" : ", ", n);
  return s;
}

// True if field `name` of the elements lies back to back, in order, in one shared storage (slots
// of a batch buffer written by a SlotWriter): the batch is then a view of it.
bool Contiguous(const std::vector<Element>& elements, const std::string& name, size_t per) {
  const Buffer& first = elements.front().fields.at(name).data;
  if (first.owner() == nullptr || first.size() != per) return false;
  for (size_t i = 1; i < elements.size(); ++i) {
    const Buffer& b = elements[i].fields.at(name).data;
    if (b.owner() != first.owner() || b.data() != first.data() + i * per) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Element> Collate(std::vector<Element>& elements, bool padded, double padding_value) {
  Element out;
  if (elements.empty()) return out;
  const Element& first = elements.front();
  out.sample_index = first.sample_index;
  out.epoch = first.epoch;
  for (const Element& e : elements) {
    out.keys.insert(out.keys.end(), e.keys.begin(), e.keys.end());
    if (e.fields.size() != first.fields.size() ||
        !std::equal(e.fields.begin(), e.fields.end(), first.fields.begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      return absl::InvalidArgumentError(StrCat("batch: sample '", e.FirstKey(), "' has fields {",
                                               FieldNames(e), "} but sample '", first.FirstKey(),
                                               "' has {", FieldNames(first), "}"));
    }
  }
  const int64_t n = static_cast<int64_t>(elements.size());
  for (const auto& [name, t0] : first.fields) {
    std::vector<int64_t> shape = t0.shape;
    bool ragged = false;
    for (const Element& e : elements) {
      const Tensor& t = e.fields.at(name);
      if (t.dtype != t0.dtype) {
        return absl::InvalidArgumentError(StrCat(
            "batch: field '", name, "' is ", DTypeName(t.dtype), " in sample '", e.FirstKey(),
            "' but ", DTypeName(t0.dtype), " in sample '", first.FirstKey(), "'; add a cast"));
      }
      if (t.dtype == DType::kBytes) break;  // handled below
      if (t.shape.size() != shape.size()) {
        return absl::InvalidArgumentError(StrCat(
            "batch: field '", name, "' has rank ", t.shape.size(), " in sample '", e.FirstKey(),
            "' but rank ", shape.size(), " in sample '", first.FirstKey(), "'"));
      }
      for (size_t d = 0; d < shape.size(); ++d) {
        if (t.shape[d] != t0.shape[d]) ragged = true;
        shape[d] = std::max(shape[d], t.shape[d]);
      }
      if (ragged && !padded) {
        return absl::InvalidArgumentError(
            StrCat("batch: field '", name, "' is ragged: sample '", first.FirstKey(),
                   "' has shape ", t0.ShapeString(), " but sample '", e.FirstKey(), "' has ",
                   t.ShapeString(), "; resize or crop to one size, or use padded_batch"));
      }
    }
    if (t0.dtype == DType::kBytes) {
      // Undecoded labels (WebDataset ".cls": decimal text) become int64 [n]; other bytes cannot
      // be stacked.
      MutableBuffer labels(static_cast<size_t>(n) * sizeof(int64_t));
      for (int64_t i = 0; i < n; ++i) {
        auto v = ScalarAsInt(elements[i].fields.at(name));
        if (!v.ok()) {
          return absl::InvalidArgumentError(StrCat(
              "batch: field '", name, "' holds undecoded bytes (sample '", elements[i].FirstKey(),
              "'); decode it (decode_image, cast) or drop it (map_field) before batching"));
        }
        std::memcpy(labels.data() + i * sizeof(int64_t), &*v, sizeof(int64_t));
      }
      out.fields[name] = Tensor{DType::kInt64, {n}, std::move(labels).Finish()};
      continue;
    }
    const size_t item = DTypeSize(t0.dtype);
    int64_t per = item;
    for (int64_t d : shape) per *= d;
    if (!ragged && Contiguous(elements, name, static_cast<size_t>(per))) {
      std::vector<int64_t> batched{n};
      batched.insert(batched.end(), shape.begin(), shape.end());
      const Buffer& data = t0.data;
      out.fields[name] =
          Tensor{t0.dtype, std::move(batched), Buffer::Wrap(data.owner(), data.data(), per * n)};
      continue;
    }
    UninitBuffer buf(static_cast<size_t>(per * n));
    if (ragged) {
      switch (t0.dtype) {
        case DType::kUint8:
          FillValue<uint8_t>(buf.data(), per * n, padding_value);
          break;
        case DType::kInt32:
          FillValue<int32_t>(buf.data(), per * n / 4, padding_value);
          break;
        case DType::kInt64:
          FillValue<int64_t>(buf.data(), per * n / 8, padding_value);
          break;
        case DType::kFloat32:
          FillValue<float>(buf.data(), per * n / 4, padding_value);
          break;
        case DType::kBytes:
          break;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const Tensor& t = elements[i].fields.at(name);
      if (!ragged) {
        std::memcpy(buf.data() + i * per, t.data.data(), per);
      } else if (t.NumValues() > 0) {
        CopyPadded(t.data.data(), t.shape, buf.data() + i * per, shape, 0, item);
      }
    }
    std::vector<int64_t> batched{n};
    batched.insert(batched.end(), shape.begin(), shape.end());
    out.fields[name] = Tensor{t0.dtype, std::move(batched), std::move(buf).Finish()};
  }
  return out;
}

NodePtr MakeBatchNode(NodePtr input, BatchOptions options) {
  return std::make_shared<BatchNode>(std::move(input), options);
}
NodePtr MakeBucketByLengthNode(NodePtr input, std::string field, std::vector<int64_t> boundaries,
                               std::vector<int64_t> batch_sizes, double padding_value,
                               bool drop_remainder) {
  auto node = std::make_shared<BucketNode>();
  node->input_ = std::move(input);
  node->field_ = std::move(field);
  node->boundaries_ = std::move(boundaries);
  node->batch_sizes_ = std::move(batch_sizes);
  node->padding_value_ = padding_value;
  node->drop_remainder_ = drop_remainder;
  return node;
}

void RegisterBatchOps() {
  auto batch = [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
    BatchOptions o;
    o.size = p.Int("size", std::nullopt, 1, int64_t{1} << 24);
    o.drop_remainder = p.Bool("drop_remainder", false);
    o.padded = ctx.name == "padded_batch";
    if (o.padded) o.padding_value = p.Number("padding_value", 0.0);
    RETURN_IF_ERROR(p.Finish());
    return MakeBatchNode(ctx.input(), o);
  };
  (void)RegisterDatasetOp("batch", batch, {.count = CountEffect::kBatches});
  (void)RegisterDatasetOp("padded_batch", batch, {.count = CountEffect::kBatches});
  (void)RegisterDatasetOp(
      "bucket_by_length",
      [](ParamReader& p, const OpContext& ctx) -> absl::StatusOr<NodePtr> {
        std::string field = p.String("field");
        auto boundaries = p.IntList("boundaries", std::nullopt, 1, 1024, 1);
        auto sizes = p.IntList("batch_sizes", std::nullopt, 2, 1025, 1);
        double padding = p.Number("padding_value", 0.0);
        bool drop = p.Bool("drop_remainder", false);
        if (!std::is_sorted(boundaries.begin(), boundaries.end()) ||
            std::adjacent_find(boundaries.begin(), boundaries.end()) != boundaries.end()) {
          p.Fail("boundaries", "expected strictly increasing lengths");
        }
        if (sizes.size() != boundaries.size() + 1) {
          p.Fail("batch_sizes",
                 StrCat("expected ", boundaries.size() + 1,
                        " batch sizes (one more than boundaries), got ", sizes.size()));
        }
        RETURN_IF_ERROR(p.Finish());
        return MakeBucketByLengthNode(ctx.input(), field, boundaries, sizes, padding, drop);
      },
      {.count = CountEffect::kGroupsByData});
}

}  // namespace stoker::data
