// Runtime: the CPU pool, options and per-stage stats shared by one pipeline run (dataset.h).
#include "stoker/data/dataset.h"

#include <algorithm>

namespace stoker::data {

Runtime::Runtime(int threads, bool deterministic, int64_t memory_budget_bytes)
    : pool_("stoker-map", std::max(1, threads)),
      deterministic_(deterministic),
      memory_budget_bytes_(memory_budget_bytes) {}

StageStats* Runtime::Stats(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (auto& s : stats_) {
    if (s->name == name) return s.get();
  }
  stats_.push_back(std::make_unique<StageStats>());
  stats_.back()->name = name;
  return stats_.back().get();
}

std::vector<const StageStats*> Runtime::AllStats() const {
  absl::MutexLock lock(&mu_);
  std::vector<const StageStats*> out;
  for (const auto& s : stats_) out.push_back(s.get());
  return out;
}

}  // namespace stoker::data
