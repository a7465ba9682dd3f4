// The deterministic random streams of the cores and the simulator: seeded,
// so a run is a function of its seed. Not for keys: those come from
// libsodium.
#pragma once

#include <cstdint>

namespace tensorhub::core {

// SplitMix64's finalizer: a well-mixed 64-bit function of a 64-bit value
// (Steele, Lea, Flood 2014).
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// SplitMix64: a tiny, well-mixed generator.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, bound). REQUIRES: bound > 0.
  std::uint64_t below(std::uint64_t bound) { return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace tensorhub::core
