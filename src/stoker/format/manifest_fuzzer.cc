// Fuzzes the manifest.json parser; whatever parses must serialize and parse to the same manifest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "stoker/format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  auto manifest =
      ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (manifest.ok()) {
    auto again = ParseManifest(SerializeManifest(*manifest), "fuzz");
    if (!again.ok() || !(*again == *manifest)) std::abort();
  }
  return 0;
}
