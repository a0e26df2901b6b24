#include "stoker/core/byte_size.h"

#include <string>

#include "stoker/core/strings.h"

namespace stoker {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  uint64_t value = 0;
  size_t i = 0;
  bool overflow = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) overflow = true;
    value = value * 10 + digit;
  }
  std::string unit(text.substr(i));
  for (char& c : unit) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
  if (i == 0 || shift < 0) {
    return absl::InvalidArgumentError(
        StrCat("'", text,
               "' is not a byte size: expected a whole number with an optional unit K, M, G or T "
               "(binary multiples, any case, e.g. 512M, 4g, 64KiB)"));
  }
  if (overflow || (shift > 0 && value > (UINT64_MAX >> shift))) {
    return absl::InvalidArgumentError(StrCat("'", text, "' is too large a byte size"));
  }
  return value << shift;
}

}  // namespace stoker
