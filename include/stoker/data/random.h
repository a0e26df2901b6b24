// Derived randomness: every random choice in a pipeline comes from a generator seeded by
// (pipeline seed, op index, epoch, sample index), so results do not depend on thread count or
// scheduling. Header-only on purpose (plugins use it too).
//
// Thread safety: Rng is a small value; use one per thread / per element.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace stoker::data {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Mixes several values into one well-spread seed (order matters).
inline uint64_t MixSeed(std::initializer_list<uint64_t> values) {
  uint64_t state = 0x5851f42d4c957f2dULL;
  uint64_t out = 0;
  for (uint64_t v : values) {
    state ^= v + 0x632be59bd9b4e019ULL + (out << 6) + (out >> 2);
    out = SplitMix64(state);
  }
  return out;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64(state_); }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n); n > 0. (Multiply-shift; the tiny bias is irrelevant here.)
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace stoker::data
