#include "core/hash.hpp"

#include <sodium.h>

#include <cstdlib>

#include "core/sodium_init.hpp"
#include "core/xxh3_variant.hpp"

namespace tensorhub::core {
namespace {

struct Xxh3Choice {
  detail::Xxh3Function function;
  std::string_view name;
};

// AVX2 by default: measured here (AMD EPYC, Zen 4) on a cache-resident
// 256 KiB buffer, SSE2 15 GB/s, AVX2 38 GB/s, AVX-512 34 GB/s; Zen 4 splits
// 512-bit operations in two, and some Intel parts lower their clock for them.
// TENSORHUB_XXH3=sse2|avx2|avx512 overrides, for benchmarks and tests.
Xxh3Choice choose_xxh3() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const char* cap = std::getenv("TENSORHUB_XXH3");
  const std::string_view wanted = cap ? cap : "avx2";
  if (wanted == "avx512" && __builtin_cpu_supports("avx512f")) return {detail::xxh3_128_avx512, "avx512"};
  if (wanted != "sse2" && __builtin_cpu_supports("avx2")) return {detail::xxh3_128_avx2, "avx2"};
  return {detail::xxh3_128_baseline, "sse2"};
#else
  return {detail::xxh3_128_baseline, "generic"};
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

std::string_view xxh3_implementation() { return xxh3_choice().name; }

Blake2bDigest blake2b_256(std::span<const std::byte> data) {
  ensure_sodium();
  Blake2bDigest out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                     nullptr, 0);
  return out;
}

}  // namespace tensorhub::core
