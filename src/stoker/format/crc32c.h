// CRC-32C (Castagnoli), as used by the shard format and TFRecord. Uses the SSE4.2 crc32
// instruction when the CPU has it (checked once at run time), a table-driven fallback otherwise.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stoker::format::crc32c {

// Extends `crc` (the CRC of earlier bytes; 0 for none) over [data, data + size).
uint32_t Extend(uint32_t crc, const void* data, size_t size);
inline uint32_t Value(const void* data, size_t size) { return Extend(0, data, size); }
inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

// The portable implementation, exposed for tests that compare it with the hardware one.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t size);
bool HardwareAvailable();

// TFRecord/LevelDB masking: a CRC stored next to data that may itself hold CRCs.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace stoker::format::crc32c
