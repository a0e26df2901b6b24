// Error handling helpers over absl::Status (docs/architecture.md, "Errors"). No exceptions cross
// module boundaries; a message says what failed, where, and where possible what to do.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STOKER_CONCAT_INNER_(a, b) a##b
#define STOKER_CONCAT_(a, b) STOKER_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status stoker_status_ = (expr);          \
    if (!stoker_status_.ok()) return stoker_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>); on error returns its
// status, otherwise moves the value into `lhs` (which may be a declaration such as `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(STOKER_CONCAT_(stoker_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)   \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

namespace stoker {

// Returns `status` with `context` prepended to its message ("context: message"), same code.
absl::Status Annotate(const absl::Status& status, std::string_view context);

}  // namespace stoker
