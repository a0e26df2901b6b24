#include "stoker/io/retry.h"

#include <algorithm>
#include <mutex>

namespace stoker::io {

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

absl::Duration BackoffBeforeAttempt(int attempt, const RetryPolicy& policy) {
  static std::mutex mu;
  static absl::BitGen gen;
  int doublings = std::clamp(attempt - 2, 0, 30);
  absl::Duration cap =
      std::min(policy.max_backoff, policy.initial_backoff * (int64_t{1} << doublings));
  std::lock_guard<std::mutex> lock(mu);
  return absl::Nanoseconds(absl::Uniform<int64_t>(gen, 0, absl::ToInt64Nanoseconds(cap) + 1));
}

}  // namespace stoker::io
