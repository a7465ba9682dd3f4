// Fast deterministic pseudo-random bytes, for synthetic weights in tests,
// benchmarks and demos. Not for keys: those come from libsodium.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tensorhub::core {

// SplitMix64: a tiny, well-mixed generator (Steele, Lea, Flood 2014).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound). REQUIRES: bound > 0.
  std::uint64_t below(std::uint64_t bound) { return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

// Fills `out` with bytes that depend only on `seed` and each byte's position,
// so any part can be regenerated on its own, in parallel.
void fill_pseudo_random(std::span<std::byte> out, std::uint64_t seed, std::uint64_t position = 0);

}  // namespace tensorhub::core
