// ParseByteSize on arbitrary text: never crashes, and an accepted size prints back to itself.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "stoker/core/byte_size.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = stoker::ParseByteSize(text);
  if (parsed.ok()) {
    // The plain decimal form of an accepted size parses to the same value.
    auto again = stoker::ParseByteSize(std::to_string(*parsed));
    if (!again.ok() || *again != *parsed) std::abort();
  }
  return 0;
}
