#include <doctest/doctest.h>

#include <algorithm>
#include <xxhash.h>  // the shared libxxhash: an independent oracle

#include <vector>

#include "core/hash.hpp"
#include "core/random_fill.hpp"
#include "core/xxh3_variant.hpp"
#include "tensorhub/ids.hpp"

using namespace tensorhub;

namespace {
std::string oracle_xxh3_hex(const void* data, std::size_t size) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
  return to_hex(std::span<const std::uint8_t>(c.digest, 16));
}
}  // namespace

TEST_CASE("hash: known answers") {
  CHECK(to_hex(core::blake2b_256({})) == "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
  CHECK(to_hex(core::xxh3_128({})) == "99aa06d3014798d86001c324468d497f");
}

TEST_CASE("hash: every XXH3 variant agrees with libxxhash on all lengths and alignments") {
  std::vector<std::byte> data(70000);
  core::fill_pseudo_random(data, 42);
  std::vector<std::pair<std::string, core::detail::Xxh3Function>> variants{{"baseline", core::detail::xxh3_128_baseline}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) variants.emplace_back("avx2", core::detail::xxh3_128_avx2);
  if (__builtin_cpu_supports("avx512f")) variants.emplace_back("avx512", core::detail::xxh3_128_avx512);
#endif
  MESSAGE("dispatched XXH3 variant: " << core::xxh3_implementation());
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (std::size_t n : {1023u, 1024u, 1025u, 4096u, 65535u, 65536u, 69000u}) lengths.push_back(n);
  for (const auto& [name, fn] : variants) {
    for (std::size_t n : lengths) {
      for (std::size_t align : {0u, 1u, 7u}) {
        std::uint8_t out[16];
        fn(data.data() + align, n, out);
        const std::string ours = to_hex(std::span<const std::uint8_t>(out, 16));
        const std::string theirs = oracle_xxh3_hex(data.data() + align, n);
        if (ours != theirs) FAIL_CHECK(name << " differs at length " << n << " alignment " << align);
      }
    }
  }
  const auto whole = core::xxh3_128(data);
  CHECK(to_hex(whole) == oracle_xxh3_hex(data.data(), data.size()));
}

TEST_CASE("hash: a digest of pieces is the digest of their concatenation, for every variant and cut") {
  std::vector<std::byte> data(300000);
  core::fill_pseudo_random(data, 7);
  std::vector<std::pair<std::string, core::detail::Xxh3PiecesFunction>> variants{
      {"baseline", core::detail::xxh3_128_pieces_baseline}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) variants.emplace_back("avx2", core::detail::xxh3_128_pieces_avx2);
  if (__builtin_cpu_supports("avx512f")) variants.emplace_back("avx512", core::detail::xxh3_128_pieces_avx512);
#endif
  core::SplitMix64 rng(3);
  for (int trial = 0; trial < 60; ++trial) {
    // A random length and a random cut into 1-40 pieces (some of 1 byte, some past 64 KiB).
    const std::size_t length = trial < 5 ? static_cast<std::size_t>(trial) : rng.below(data.size());
    const std::size_t cuts = 1 + rng.below(40);
    std::vector<std::size_t> points{0, length};
    for (std::size_t c = 0; c + 1 < cuts && length > 0; ++c) points.push_back(rng.below(length + 1));
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    std::vector<std::span<const std::byte>> pieces;
    std::vector<core::detail::Piece> raw;
    for (std::size_t i = 0; i + 1 < points.size(); ++i) {
      pieces.push_back(std::span<const std::byte>(data).subspan(points[i], points[i + 1] - points[i]));
      raw.push_back(core::detail::Piece{pieces.back().data(), pieces.back().size()});
    }
    const std::string theirs = oracle_xxh3_hex(data.data(), length);
    for (const auto& [name, fn] : variants) {
      if (raw.empty()) continue;
      std::uint8_t out[16];
      fn(raw.data(), raw.size(), out);
      if (to_hex(std::span<const std::uint8_t>(out, 16)) != theirs) {
        FAIL_CHECK(name << " differs for " << length << " bytes in " << raw.size() << " pieces");
      }
    }
    CHECK(to_hex(core::xxh3_128_of_pieces(pieces)) == theirs);
    CHECK(core::blake2b_256_of_pieces(pieces) == core::blake2b_256(std::span<const std::byte>(data).first(length)));
  }
}

TEST_CASE("hash: one flipped bit changes both digests") {
  std::vector<std::byte> data(1 << 16);
  core::fill_pseudo_random(data, 1);
  const auto x = core::xxh3_128(data);
  const auto b = core::blake2b_256(data);
  data[12345] ^= std::byte{0x10};
  CHECK(core::xxh3_128(data) != x);
  CHECK(core::blake2b_256(data) != b);
}
