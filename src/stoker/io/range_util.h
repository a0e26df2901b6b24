// Small helpers shared by store implementations.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "stoker/io/object_store.h"

namespace stoker::io {

// Clamps `range` to an object of `size` bytes following the ReadCallback contract: returns the
// effective range, or OutOfRange (naming `url`) when it starts past the end.
absl::StatusOr<ByteRange> ClampRange(ByteRange range, uint64_t size, std::string_view url);

}  // namespace stoker::io
