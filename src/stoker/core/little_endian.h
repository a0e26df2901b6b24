// Fixed-width little-endian integers in byte strings, whatever the host's byte order: the one
// coder behind the shard format, TFRecord framing and the service's element payloads.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace stoker {

// Appends the low `bytes` (1 to 8) bytes of `value`, least significant first.
inline void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  char b[8];
  for (int i = 0; i < bytes; ++i) b[i] = static_cast<char>(value >> (8 * i));
  out->append(b, static_cast<size_t>(bytes));
}
// Appends an integer of type T in sizeof(T) bytes (two's complement for signed types).
template <typename T>
void AppendLittleEndian(std::string* out, T value) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  AppendLittleEndian(out, static_cast<uint64_t>(value), static_cast<int>(sizeof(T)));
}

// Writes the low `bytes` (1 to 8) bytes of `value` at `p`, least significant first.
inline void StoreLittleEndian(char* p, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>(value >> (8 * i));
}

// Reads `bytes` (1 to 8) bytes at `p`, least significant first.
inline uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
// Reads an integer of type T from sizeof(T) bytes at `p`.
template <typename T>
T LoadLittleEndian(const char* p) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  return static_cast<T>(LoadLittleEndian(p, static_cast<int>(sizeof(T))));
}

}  // namespace stoker
