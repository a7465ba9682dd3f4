// Hash functions of TensorHub.
//
// XXH3-128 hashes shards: it runs near memory speed. It is compiled three
// times (SSE2, AVX2, AVX-512) and the best variant this CPU supports is chosen
// once at run time, so one binary is both portable and fast.
// BLAKE2b-256 (libsodium) hashes manifests into ids: cryptographic, but about
// 25x slower, so never used on bulk data unless secure mode asks for it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tensorhub::core {

using Xxh3Digest = std::array<std::uint8_t, 16>;      // canonical (big-endian) form
using Blake2bDigest = std::array<std::uint8_t, 32>;

Xxh3Digest xxh3_128(std::span<const std::byte> data);
Blake2bDigest blake2b_256(std::span<const std::byte> data);
// The same of the concatenation of `pieces` (streamed: nothing is copied).
Xxh3Digest xxh3_128_of_pieces(std::span<const std::span<const std::byte>> pieces);
Blake2bDigest blake2b_256_of_pieces(std::span<const std::span<const std::byte>> pieces);

inline std::span<const std::byte> as_bytes(std::span<const std::uint8_t> s) { return std::as_bytes(s); }

// "avx512", "avx2", "sse2" or "generic": the XXH3 variant in use.
std::string_view xxh3_implementation();

}  // namespace tensorhub::core
