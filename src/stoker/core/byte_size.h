// Byte sizes as people write them in flags and environment variables. One grammar for every
// option that takes a size (--shard-size, --cache-size, --buffer-bytes, STOKER_CACHE_BYTES, ...):
//
//   DIGITS [UNIT]     UNIT, in any case: B | K KB KiB | M MB MiB | G GB GiB | T TB TiB
//
// Every unit is a binary multiple (K = 1024), so "4g" == "4GiB" == 4294967296. No sign, no
// fraction, no space. Zero is a valid size; callers that need a positive one say so.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace stoker {

// The number of bytes `text` denotes, or InvalidArgument quoting `text` and the grammar (also when
// the value does not fit in 64 bits). Callers prefix the flag or variable name with Annotate.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace stoker
