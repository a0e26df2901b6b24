#include "stoker/data/op_registry.h"

#include <cstdio>
#include <map>

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

absl::Status RegisterDatasetOp(const std::string& name, DatasetOpFactory factory) {
  return Register(name, OpDefinition{nullptr, std::move(factory)});
}

absl::Status RegisterTransform(const std::string& name, TransformFactory factory) {
  return Register(name, OpDefinition{std::move(factory), nullptr});
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

internal::TransformRegistrar::TransformRegistrar(const char* name, TransformFactory factory) {
  absl::Status s = RegisterTransform(name, std::move(factory));
  if (!s.ok()) std::fprintf(stderr, "stoker: plugin: %s\n", std::string(s.message()).c_str());
}

}  // namespace stoker::data
