// The field transforms: cast, filter, map_field. docs/pipeline.md lists their parameters.
#include <cstring>
#include <map>
#include <set>

#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/data/ops/builtin_ops.h"
#include "stoker/data/transform.h"

namespace stoker::data {
namespace {

using Result = absl::StatusOr<std::optional<Element>>;

template <typename From, typename To>
void Convert(const uint8_t* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * sizeof(From), sizeof(From));
    To o = static_cast<To>(v);
    std::memcpy(dst + i * sizeof(To), &o, sizeof(To));
  }
}

template <typename From>
void ConvertFrom(DType to, const uint8_t* src, uint8_t* dst, int64_t n) {
  switch (to) {
    case DType::kUint8:
      Convert<From, uint8_t>(src, dst, n);
      break;
    case DType::kInt32:
      Convert<From, int32_t>(src, dst, n);
      break;
    case DType::kInt64:
      Convert<From, int64_t>(src, dst, n);
      break;
    case DType::kFloat32:
      Convert<From, float>(src, dst, n);
      break;
    case DType::kBytes:
      break;
  }
}

// cast: between numeric dtypes; from bytes, "uint8" gives the raw bytes as a 1-D tensor and the
// other dtypes parse decimal text as a scalar (WebDataset's "cls" files).
class Cast : public Transform {
 public:
  explicit Cast(ParamReader& p) : field_(p.String("field")) {
    std::string to = p.String("to", std::nullopt, {"uint8", "int32", "int64", "float32"});
    to_ = DTypeFromName(to).value_or(DType::kUint8);
  }
  Result Apply(Element e, Rng&) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    if (t->dtype == to_) return e;
    Tensor out;
    if (t->dtype == DType::kBytes) {
      if (to_ == DType::kUint8) {
        out = Tensor{DType::kUint8, {static_cast<int64_t>(t->data.size())}, t->data};
      } else {
        auto v = ScalarAsInt(*t);
        if (!v.ok()) return Annotate(v.status(), StrCat("cast field '", field_, "'"));
        Tensor scalar = Tensor::Scalar(*v);
        MutableBuffer buf(DTypeSize(to_));
        ConvertFrom<int64_t>(to_, scalar.data.data(), buf.data(), 1);
        out = Tensor{to_, {}, std::move(buf).Finish()};
      }
    } else {
      int64_t n = t->NumValues();
      UninitBuffer buf(n * DTypeSize(to_));
      switch (t->dtype) {
        case DType::kUint8:
          ConvertFrom<uint8_t>(to_, t->data.data(), buf.data(), n);
          break;
        case DType::kInt32:
          ConvertFrom<int32_t>(to_, t->data.data(), buf.data(), n);
          break;
        case DType::kInt64:
          ConvertFrom<int64_t>(to_, t->data.data(), buf.data(), n);
          break;
        case DType::kFloat32:
          ConvertFrom<float>(to_, t->data.data(), buf.data(), n);
          break;
        case DType::kBytes:
          break;
      }
      out = Tensor{to_, t->shape, std::move(buf).Finish()};
    }
    e.fields[field_] = std::move(out);
    return e;
  }

 private:
  std::string field_;
  DType to_;
};

// filter: keeps elements whose `field` value is in `in`, and/or whose length (first dimension;
// byte count for bytes) lies in [min_length, max_length].
class Filter : public Transform {
 public:
  explicit Filter(ParamReader& p) : field_(p.String("field")) {
    if (p.Has("in")) {
      auto in = p.IntList("in", std::nullopt, 0, 1 << 20);
      values_ = std::set<int64_t>(in.begin(), in.end());
    }
    min_length_ = p.Int("min_length", 0, 0);
    max_length_ = p.Int("max_length", INT64_MAX, 0);
    if (!values_ && !p.Has("min_length") && !p.Has("max_length")) {
      p.Fail("in",
             "filter needs a condition: \"in\" (values to keep), \"min_length\" or "
             "\"max_length\"");
    }
  }
  Result Apply(Element e, Rng&) const override {
    ASSIGN_OR_RETURN(const Tensor* t, e.Field(field_));
    if (values_) {
      auto v = ScalarAsInt(*t);
      if (!v.ok()) return Annotate(v.status(), StrCat("filter field '", field_, "'"));
      if (!values_->count(*v)) return std::nullopt;
    }
    int64_t length = t->dtype == DType::kBytes ? static_cast<int64_t>(t->data.size())
                     : t->shape.empty()        ? 1
                                               : t->shape[0];
    if (length < min_length_ || length > max_length_) return std::nullopt;
    return e;
  }

 private:
  std::string field_;
  std::optional<std::set<int64_t>> values_;
  int64_t min_length_, max_length_;
};

// map_field: "rename" {old: new}, then "drop" [names] or "keep" [names].
class MapField : public Transform {
 public:
  explicit MapField(ParamReader& p) {
    if (const nlohmann::json* r = p.Raw("rename")) {
      if (!r->is_object()) {
        p.Fail("rename", StrCat("expected an object {\"old\": \"new\"}, got ", r->type_name()));
      } else {
        for (auto it = r->begin(); it != r->end(); ++it) {
          if (!it.value().is_string()) {
            p.Fail(StrCat("rename.", it.key()), "expected a string (the new field name)");
            break;
          }
          rename_[it.key()] = it.value().get<std::string>();
        }
      }
    }
    drop_ = p.StringList("drop", std::vector<std::string>{});
    if (p.Has("keep")) keep_ = p.StringList("keep", std::nullopt);
    if (rename_.empty() && drop_.empty() && !keep_) {
      p.Fail("rename", "map_field needs \"rename\", \"drop\" or \"keep\"");
    }
  }
  Result Apply(Element e, Rng&) const override {
    for (const auto& [from, to] : rename_) {
      auto it = e.fields.find(from);
      if (it == e.fields.end()) return e.Field(from).status();
      Tensor t = std::move(it->second);
      e.fields.erase(it);
      e.fields[to] = std::move(t);
    }
    for (const auto& name : drop_) e.fields.erase(name);
    if (keep_) {
      std::map<std::string, Tensor> kept;
      for (const auto& name : *keep_) {
        auto it = e.fields.find(name);
        if (it == e.fields.end()) return e.Field(name).status();
        kept[name] = std::move(it->second);
      }
      e.fields = std::move(kept);
    }
    return e;
  }

 private:
  std::map<std::string, std::string> rename_;
  std::vector<std::string> drop_;
  std::optional<std::vector<std::string>> keep_;
};

}  // namespace

void RegisterFieldTransforms() {
  (void)RegisterBuiltinTransform("cast", TransformFactoryOf<Cast>(),
                                 {.count = CountEffect::kKeeps});
  (void)RegisterBuiltinTransform("filter", TransformFactoryOf<Filter>(),
                                 {.count = CountEffect::kMayDrop});
  (void)RegisterBuiltinTransform("map_field", TransformFactoryOf<MapField>(),
                                 {.count = CountEffect::kKeeps});
}

}  // namespace stoker::data
