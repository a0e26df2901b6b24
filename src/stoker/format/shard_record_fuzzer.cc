// Fuzzes the shard record decoder (docs/format.md, "Record"): any bytes, decoded as one record,
// once as given and once with its length and CRC made right so the body parser and zstd are
// reached.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/format/crc32c.h"
#include "stoker/format/shard_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)format::shard::DecodeRecord(Buffer::Copy(bytes), "fuzz", 16, "");
  if (size >= 8) {
    uint32_t body_length = static_cast<uint32_t>(size - 8);
    uint32_t crc = format::crc32c::Mask(format::crc32c::Value(std::string_view(bytes).substr(8)));
    for (int i = 0; i < 4; ++i) {
      bytes[i] = static_cast<char>(body_length >> (8 * i));
      bytes[4 + i] = static_cast<char>(crc >> (8 * i));
    }
    auto sample = format::shard::DecodeRecord(Buffer::FromString(std::move(bytes)), "fuzz", 16, "");
    if (sample.ok()) {
      // Whatever decodes must encode again.
      std::string again;
      (void)format::shard::AppendRecord(*sample, 0, &again);
    }
  }
  return 0;
}
