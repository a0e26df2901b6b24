// Fuzzes the shard footer and index parsers: the input is the tail of a shard. The footer is parsed
// as given, and the index is also parsed under a footer made valid for it (right CRCs), so that the
// entry parser is reached.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/format/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  uint64_t object_size = size + shard::kHeaderSize;
  if (size >= shard::kFooterSize) {
    auto footer = shard::ParseFooter(bytes.substr(size - shard::kFooterSize), object_size, "fuzz");
    if (footer.ok() && footer->index_offset >= shard::kHeaderSize) {
      std::string_view index =
          bytes.substr(footer->index_offset - shard::kHeaderSize, footer->index_length);
      (void)shard::ParseIndex(index, *footer, "fuzz", [](uint64_t, uint32_t, std::string_view) {});
    }
  }
  if (size < 8) return 0;
  // The first 8 bytes choose a record count; the rest is the index.
  uint64_t count = 0;
  for (int i = 0; i < 8; ++i) count |= uint64_t{data[i]} << (8 * i);
  std::string_view index = bytes.substr(8);
  count %= index.size() / 15 + 1;
  std::string tail(index);
  shard::Footer footer{shard::kHeaderSize + 100, index.size(), count};
  shard::AppendFooter(footer, index, &tail);
  auto parsed = shard::ParseFooter(std::string_view(tail).substr(tail.size() - shard::kFooterSize),
                                   shard::kHeaderSize + 100 + tail.size(), "fuzz");
  if (parsed.ok()) {
    (void)shard::ParseIndex(index, *parsed, "fuzz", [](uint64_t, uint32_t, std::string_view) {});
  }
  return 0;
}
