#include "stoker/io/range_util.h"

#include <algorithm>

#include "stoker/core/strings.h"

namespace stoker::io {

absl::StatusOr<ByteRange> ClampRange(ByteRange range, uint64_t size, std::string_view url) {
  if (range.offset > size || (range.offset == size && range.length != 0 && size != 0 &&
                              range.length != ByteRange::kToEnd)) {
    return absl::OutOfRangeError(StrCat("read of ", url, " at offset ", range.offset,
                                        " is past the end of the object (", size, " bytes)"));
  }
  uint64_t available = size - range.offset;
  return ByteRange{range.offset, std::min(range.length, available)};
}

}  // namespace stoker::io
