#include "core/hash.hpp"

#include <sodium.h>

#include <cstdlib>
#include <vector>

#include "core/sodium_init.hpp"
#include "core/xxh3_variant.hpp"

namespace tensorhub::core {
namespace {

struct Xxh3Choice {
  detail::Xxh3Function function;
  detail::Xxh3PiecesFunction pieces;
  std::string_view name;
};

// AVX2 by default: it is faster than AVX-512 on Zen 4, which splits 512-bit
// operations in two, and some Intel parts lower their clock for them (rates
// in docs/benchmarks.md, manifest build). TENSORHUB_XXH3=sse2|avx2|avx512
// overrides, for benchmarks and tests.
Xxh3Choice choose_xxh3() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const char* cap = std::getenv("TENSORHUB_XXH3");
  const std::string_view wanted = cap ? cap : "avx2";
  if (wanted == "avx512" && __builtin_cpu_supports("avx512f")) {
    return {detail::xxh3_128_avx512, detail::xxh3_128_pieces_avx512, "avx512"};
  }
  if (wanted != "sse2" && __builtin_cpu_supports("avx2")) return {detail::xxh3_128_avx2, detail::xxh3_128_pieces_avx2, "avx2"};
  return {detail::xxh3_128_baseline, detail::xxh3_128_pieces_baseline, "sse2"};
#else
  return {detail::xxh3_128_baseline, detail::xxh3_128_pieces_baseline, "generic"};
#endif
}

const Xxh3Choice& xxh3_choice() {
  static const Xxh3Choice choice = choose_xxh3();
  return choice;
}

}  // namespace

Xxh3Digest xxh3_128(std::span<const std::byte> data) {
  Xxh3Digest out;
  xxh3_choice().function(data.data(), data.size(), out.data());
  return out;
}

Xxh3Digest xxh3_128_of_pieces(std::span<const std::span<const std::byte>> pieces) {
  if (pieces.empty()) return xxh3_128(std::span<const std::byte>());
  // Up to 64 pieces (every shard of a file, most of a tensor list) use no
  // heap, so a bus-error recovery (bus_error_guard.hpp) skips nothing.
  constexpr std::size_t kOnStack = 64;
  detail::Piece on_stack[kOnStack];
  std::vector<detail::Piece> on_heap;
  detail::Piece* list = on_stack;
  if (pieces.size() > kOnStack) {
    on_heap.resize(pieces.size());
    list = on_heap.data();
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) list[i] = detail::Piece{pieces[i].data(), pieces[i].size()};
  Xxh3Digest out;
  xxh3_choice().pieces(list, pieces.size(), out.data());
  return out;
}

std::string_view xxh3_implementation() { return xxh3_choice().name; }

Blake2bDigest blake2b_256_of_pieces(std::span<const std::span<const std::byte>> pieces) {
  ensure_sodium();
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, 32);
  for (const auto& p : pieces) {
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(p.data()), p.size());
  }
  Blake2bDigest out;
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

Blake2bDigest blake2b_256(std::span<const std::byte> data) {
  ensure_sodium();
  Blake2bDigest out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                     nullptr, 0);
  return out;
}

}  // namespace tensorhub::core
