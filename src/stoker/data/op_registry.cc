#include "stoker/data/op_registry.h"

#include <cstdio>
#include <map>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "stoker/core/strings.h"

namespace stoker::data {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, OpDefinition> ops ABSL_GUARDED_BY(mu);
  std::vector<std::string> dataset_order ABSL_GUARDED_BY(mu);  // dataset ops, as registered
};

Registry& TheRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

absl::Status Register(const std::string& name, OpDefinition definition) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  const bool dataset = definition.dataset != nullptr;
  if (!r.ops.emplace(name, std::move(definition)).second) {
    return absl::AlreadyExistsError(StrCat("an op named '", name, "' is already registered"));
  }
  if (dataset) r.dataset_order.push_back(name);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterDatasetOp(const std::string& name, DatasetOpFactory factory, OpTraits traits) {
  traits.per_sample = false;
  return Register(name, OpDefinition{nullptr, std::move(factory), traits});
}

absl::Status RegisterBuiltinTransform(const std::string& name, TransformFactory factory,
                                      OpTraits traits) {
  traits.per_sample = true;
  return Register(name, OpDefinition{std::move(factory), nullptr, traits});
}

absl::Status RegisterTransform(const std::string& name, TransformFactory factory) {
  return Register(name, OpDefinition{std::move(factory), nullptr, OpTraits{.per_sample = true},
                                     /*plugin=*/true});
}

const OpDefinition* FindOp(const std::string& name) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : &it->second;  // entries are never removed
}

const TransformFactory* FindTransform(const std::string& name) {
  const OpDefinition* op = FindOp(name);
  return op != nullptr && op->transform ? &op->transform : nullptr;
}

std::vector<std::string> RegisteredOpNames() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<std::string> names = r.dataset_order;
  for (const auto& [name, op] : r.ops) {
    if (op.transform) names.push_back(name);
  }
  return names;
}

std::vector<std::string> RegisteredTransformNames() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, op] : r.ops) {
    if (op.transform) names.push_back(name);
  }
  return names;
}

CountEffect CountEffectOf(const nlohmann::json& op) {
  if (!op.is_object() || !op.contains("op") || !op["op"].is_string())
    return CountEffect::kUndeclared;
  const OpDefinition* def = FindOp(op["op"].get<std::string>());
  if (def == nullptr) return CountEffect::kUndeclared;
  const OpTraits& t = def->traits;
  if (t.drops_on_error_skip && op.value("on_error", nlohmann::json("fail")) == "skip") {
    return CountEffect::kMayDrop;
  }
  return t.count;
}

absl::StatusOr<int64_t> ElementsPerEpoch(const nlohmann::json& ops, int64_t source_elements) {
  RegisterBuiltinOps();
  int64_t n = source_elements;
  if (!ops.is_array()) return n;
  // The count parameter of take/skip/repeat/batch as the op validates it (a bad one fails when the
  // pipeline is built; here it only makes the count unknown).
  auto integer = [](const nlohmann::json& op, const char* key) -> std::optional<int64_t> {
    if (!op.contains(key) || !op[key].is_number_integer()) return std::nullopt;
    return op[key].get<int64_t>();
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const nlohmann::json& op = ops[i];
    const std::string name = op.is_object() ? op.value("op", std::string()) : std::string();
    const std::string where = StrCat("ops[", i, "] (", name, ")");
    auto unknown = [&](std::string_view why) {
      return absl::FailedPreconditionError(StrCat(where, " ", why));
    };
    switch (CountEffectOf(op)) {
      case CountEffect::kKeeps:
        break;
      case CountEffect::kMayDrop:
        return unknown(op.value("on_error", nlohmann::json()) == "skip"
                           ? "has on_error='skip', so the elements it cannot process are dropped "
                             "and the count depends on the data"
                           : "drops elements depending on their data");
      case CountEffect::kBatches: {
        std::optional<int64_t> size = integer(op, "size");
        if (!size || *size < 1) return unknown("has no valid \"size\"");
        n = op.value("drop_remainder", false) ? n / *size : (n + *size - 1) / *size;
        break;
      }
      case CountEffect::kGroupsByData:
        return unknown("makes batches whose number depends on the lengths in the data");
      case CountEffect::kTakes:
      case CountEffect::kSkips: {
        std::optional<int64_t> count = integer(op, "count");
        if (!count || *count < 0) return unknown("has no valid \"count\"");
        n = CountEffectOf(op) == CountEffect::kTakes ? std::min(n, *count)
                                                     : std::max<int64_t>(0, n - *count);
        break;
      }
      case CountEffect::kRepeats: {
        int64_t count = integer(op, "count").value_or(-1);
        if (count < 0) return unknown("repeats forever");
        n *= count;
        break;
      }
      case CountEffect::kUndeclared:
        return unknown(FindOp(name) != nullptr
                           ? "is a plugin op, which may drop elements"
                           : "is a plugin op (not loaded in this process) or no op at all, and may "
                             "drop elements");
    }
  }
  return n;
}

internal::TransformRegistrar::TransformRegistrar(const char* name, TransformFactory factory) {
  absl::Status s = RegisterTransform(name, std::move(factory));
  if (!s.ok()) std::fprintf(stderr, "stoker: plugin: %s\n", std::string(s.message()).c_str());
}

}  // namespace stoker::data
