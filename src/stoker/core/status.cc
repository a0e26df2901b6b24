#include "stoker/core/status.h"

#include "stoker/core/strings.h"

namespace stoker {

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

}  // namespace stoker
