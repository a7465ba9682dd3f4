// Seeded byte-level mutations for decoder robustness tests: bit flips,
// boundary values, length-field smashing, truncation, insertion, deletion and
// duplication. Shared by the mutation tests and the fuzzers' seed tooling.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/random_fill.hpp"

namespace tensorhub::testing {

// TENSORHUB_MUTATION_SEED overrides the default, to explore further or replay.
inline std::uint64_t mutation_seed(std::uint64_t fallback) {
  const char* env = std::getenv("TENSORHUB_MUTATION_SEED");
  return env ? std::strtoull(env, nullptr, 0) : fallback;
}

template <typename Byte>
std::vector<Byte> mutate(const std::vector<Byte>& input, core::SplitMix64& rng) {
  std::vector<Byte> out = input;
  static constexpr std::uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc4, 0xcc, 0xcf,
                                                  0xd9, 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x9f, 0xa0, 0xbf, '{',
                                                  '}',  '[',  ']',  '"',  ',',  ':',  '-',  '9',  '\\', ' '};
  const int rounds = 1 + static_cast<int>(rng.below(3));
  for (int round = 0; round < rounds; ++round) {
    const std::size_t n = out.size();
    const std::size_t pos = n ? rng.below(n) : 0;
    switch (rng.below(8)) {
      case 0:  // flip one bit
        if (n) out[pos] = static_cast<Byte>(static_cast<std::uint8_t>(out[pos]) ^ (1u << rng.below(8)));
        break;
      case 1:  // a boundary or format-significant value
        if (n) out[pos] = static_cast<Byte>(kInteresting[rng.below(sizeof kInteresting)]);
        break;
      case 2:  // a random byte
        if (n) out[pos] = static_cast<Byte>(rng.below(256));
        break;
      case 3:  // smash what might be a length field with a huge value
        for (std::size_t i = 0; i < 4 && pos + i < n; ++i) out[pos + i] = static_cast<Byte>(0xff);
        break;
      case 4:  // truncate
        out.resize(pos);
        break;
      case 5: {  // insert random bytes
        const std::size_t count = 1 + rng.below(8);
        for (std::size_t i = 0; i < count; ++i) {
          out.insert(out.begin() + static_cast<std::ptrdiff_t>(std::min(pos, out.size())),
                     static_cast<Byte>(rng.below(256)));
        }
        break;
      }
      case 6: {  // delete a range
        const std::size_t count = std::min<std::size_t>(1 + rng.below(16), n - std::min(pos, n));
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(pos),
                  out.begin() + static_cast<std::ptrdiff_t>(pos + count));
        break;
      }
      case 7: {  // duplicate a range
        const std::size_t count = std::min<std::size_t>(1 + rng.below(32), n - std::min(pos, n));
        std::vector<Byte> chunk(out.begin() + static_cast<std::ptrdiff_t>(pos),
                                out.begin() + static_cast<std::ptrdiff_t>(pos + count));
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(pos), chunk.begin(), chunk.end());
        break;
      }
    }
  }
  return out;
}

}  // namespace tensorhub::testing
