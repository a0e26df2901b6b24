// The one place that decides whether a failed request is tried again, and how long to wait.
//
// Retried: Unavailable (5xx, 503 SlowDown, connection refused/reset, TLS errors), DeadlineExceeded
// (timeouts, stalls) and DataLoss raised by the transport for a body of the wrong length. Never
// retried: NotFound, PermissionDenied, OutOfRange, FailedPrecondition, InvalidArgument — asking
// again cannot change the answer.
#pragma once

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::io {

struct RetryPolicy {
  int max_attempts = 6;  // first try included
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(3);
};

bool IsRetryable(const absl::Status& status);

// Delay before attempt number `attempt` (2 for the first retry): "full jitter" exponential
// backoff, uniform in [0, min(max_backoff, initial_backoff * 2^(attempt-2))]. Thread-safe.
absl::Duration BackoffBeforeAttempt(int attempt, const RetryPolicy& policy);

}  // namespace stoker::io
