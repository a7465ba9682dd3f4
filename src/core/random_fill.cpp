#include "core/random_fill.hpp"

#include <cstring>

namespace tensorhub::core {

void fill_pseudo_random(std::span<std::byte> out, std::uint64_t seed, std::uint64_t position) {
  // Word k of the stream is SplitMix64's output for counter (seed, k): a
  // counter-based stream, so a fill can start at any position.
  auto word = [seed](std::uint64_t k) {
    SplitMix64 g(seed ^ (k * 0xd1342543de82ef95ull));
    return g.next();
  };
  std::size_t i = 0;
  std::uint64_t k = position / 8;
  if (position % 8 != 0) {  // leading partial word
    std::uint64_t w = word(k++);
    for (std::size_t b = position % 8; b < 8 && i < out.size(); ++b, ++i) {
      out[i] = static_cast<std::byte>(w >> (8 * b));
    }
  }
  for (; i + 8 <= out.size(); i += 8) {
    const std::uint64_t w = word(k++);
    std::memcpy(out.data() + i, &w, 8);
  }
  if (i < out.size()) {
    const std::uint64_t w = word(k);
    for (std::size_t b = 0; i < out.size(); ++b, ++i) out[i] = static_cast<std::byte>(w >> (8 * b));
  }
}

}  // namespace tensorhub::core
