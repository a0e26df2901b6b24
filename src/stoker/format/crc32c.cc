#include "stoker/format/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace stoker::format::crc32c {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78u;  // reflected 0x1EDC6F41

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

// Polynomials mod P in the reflected representation of the CRC register: bit 31 is x^0.
// a * b mod P.
constexpr uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8 * bytes) mod P: what appending `bytes` zero bytes multiplies a raw CRC register by.
constexpr uint32_t ZeroBytesFactor(size_t bytes) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 30;  // x^1, then x^2, x^4, ...
  for (size_t bits = bytes * 8; bits != 0; bits >>= 1) {
    if (bits & 1) result = MultiplyModP(square, result);
    square = MultiplyModP(square, square);
  }
  return result;
}

// Appending `kBytes` zero bytes to a raw register, as four table lookups (one per register byte;
// the operation is linear, so the parts' images add up).
template <size_t kBytes>
struct ZeroBytesShift {
  static constexpr std::array<std::array<uint32_t, 256>, 4> MakeTables() {
    std::array<std::array<uint32_t, 256>, 4> tables{};
    const uint32_t factor = ZeroBytesFactor(kBytes);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) tables[k][b] = MultiplyModP(factor, b << (8 * k));
    }
    return tables;
  }
  static constexpr std::array<std::array<uint32_t, 256>, 4> kTables = MakeTables();
  static uint32_t Apply(uint32_t c) {
    return kTables[0][c & 0xff] ^ kTables[1][(c >> 8) & 0xff] ^ kTables[2][(c >> 16) & 0xff] ^
           kTables[3][c >> 24];
  }
};

#if defined(__x86_64__)
// Runs the crc32 instruction over three neighbouring blocks of kBlock bytes at once: one stream
// waits 3 cycles for each result, three keep the unit busy every cycle. The block CRCs are then
// joined: crc(A B C) = shift(shift(crc(A)) ^ crc(B)) ^ crc(C), where shift appends kBlock zero
// bytes and crc(B), crc(C) start from 0.
template <size_t kBlock>
__attribute__((target("sse4.2"))) inline uint64_t ExtendThreeWay(uint64_t c, const uint8_t*& p,
                                                                 size_t& size) {
  static_assert(kBlock % 8 == 0);
  while (size >= 3 * kBlock) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + kBlock + i, 8);
      std::memcpy(&w2, p + 2 * kBlock + i, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    using Shift = ZeroBytesShift<kBlock>;
    uint32_t joined = Shift::Apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    c = Shift::Apply(joined) ^ static_cast<uint32_t>(c2);
    p += 3 * kBlock;
    size -= 3 * kBlock;
  }
  return c;
}

// Compiled for SSE4.2 regardless of the global flags; only called when cpuid says it is there.
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const void* data,
                                                          size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (size > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --size;
  }
  c = ExtendThreeWay<4096>(c, p, size);
  c = ExtendThreeWay<256>(c, p, size);
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    size -= 8;
  }
  while (size > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --size;
  }
  return ~static_cast<uint32_t>(c);
}

bool DetectSse42() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_SSE4_2) != 0;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

bool HardwareAvailable() {
#if defined(__x86_64__)
  static const bool available = DetectSse42();
  return available;
#else
  return false;
#endif
}

uint32_t Extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (HardwareAvailable()) return ExtendHardware(crc, data, size);
#endif
  return ExtendPortable(crc, data, size);
}

}  // namespace stoker::format::crc32c
