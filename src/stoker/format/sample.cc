#include "stoker/format/sample.h"

#include "stoker/core/strings.h"

namespace stoker::format {

absl::StatusOr<OnCorrupt> ParseOnCorrupt(std::string_view text) {
  if (text == "fail") return OnCorrupt::kFail;
  if (text == "skip") return OnCorrupt::kSkip;
  return absl::InvalidArgumentError(
      StrCat("on_corrupt must be \"fail\" or \"skip\", not \"", text, "\""));
}

void CorruptionReport::Add(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  ++count_;
  if (descriptions_.size() < kMaxKept) descriptions_.push_back(std::string(error.message()));
}

uint64_t CorruptionReport::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

std::vector<std::string> CorruptionReport::descriptions() const {
  absl::MutexLock lock(&mu_);
  return descriptions_;
}

}  // namespace stoker::format
