// Helpers shared by the commands' flag handling (commands.h).
#include "stoker/cli/commands.h"
#include "stoker/core/byte_size.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"

namespace stoker::cli {

absl::StatusOr<uint64_t> ParseByteSizeFlag(std::string_view flag, std::string_view text) {
  absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) return Annotate(bytes.status(), flag);
  if (*bytes == 0) return absl::InvalidArgumentError(StrCat(flag, " must be positive"));
  return *bytes;
}

}  // namespace stoker::cli
