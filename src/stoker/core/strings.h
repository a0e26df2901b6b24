// String helpers. Debian's abseil is built with its own absl::string_view (not std::string_view),
// so absl::StrCat does not accept std::string_view; stoker::StrCat does, and otherwise behaves
// the same. Prefer std::string_view in stoker's interfaces and C++20's starts_with/ends_with.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace stoker {
namespace strings_internal {
inline absl::string_view Arg(std::string_view s) { return absl::string_view(s.data(), s.size()); }
template <typename T>
const T& Arg(const T& value) {
  return value;
}
}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  return absl::StrCat(strings_internal::Arg(args)...);
}

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
inline std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace stoker
