// Tar headers built by hand for the format tests (what GNU tar writes for a regular file).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace stoker::format {

// A ustar header for `name` claiming `size_octal` bytes, with a right checksum.
inline std::string TarHeader(std::string_view name, std::string_view size_octal) {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(100, 7, "0000644");
  h.replace(124, size_octal.size(), size_octal);
  h[156] = '0';
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (char c : h) sum += static_cast<uint8_t>(c);
  char checksum[8];
  std::snprintf(checksum, sizeof(checksum), "%06o", sum);
  h.replace(148, 7, std::string(checksum, 7));
  return h;
}

}  // namespace stoker::format
