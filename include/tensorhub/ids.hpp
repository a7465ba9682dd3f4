// Fixed-size identifiers and strong index types.
//
// A ManifestId is not a PublicKey even though both are 32 bytes, and a
// ShardIndex is not a BlockIndex even though both are integers: each is its
// own type, so mixing them up is a compile error.
#pragma once

#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub {

// N opaque bytes with a tag that keeps different kinds apart.
template <std::size_t N, typename Tag>
struct FixedBytes {
  static constexpr std::size_t kSize = N;
  std::array<std::uint8_t, N> bytes{};

  std::span<const std::uint8_t, N> span() const { return bytes; }
  bool is_zero() const {
    for (auto b : bytes) if (b != 0) return false;
    return true;
  }
  // Lowercase hex, 2*N characters.
  std::string hex() const;
  // The first `chars` hex characters, for logs and tables.
  std::string short_hex(std::size_t chars = 12) const { return hex().substr(0, chars); }
  // Parses exactly 2*N hex characters (either case).
  // Errors: kInvalidArgument (another length, or a character that is not a
  // hex digit).
  static Result<FixedBytes> from_hex(std::string_view text);

  // Byte-wise lexicographic, as the defaulted operators would be, but
  // inline and eight bytes at a time: ids are keys of the cores' ordered and
  // hashed maps, compared on every message.
  friend constexpr std::strong_ordering operator<=>(const FixedBytes& a, const FixedBytes& b) {
    if (!std::is_constant_evaluated()) {
      std::size_t i = 0;
      for (; i + 8 <= N; i += 8) {
        const std::uint64_t x = a.big_endian_word(i), y = b.big_endian_word(i);
        if (x != y) return x <=> y;
      }
      for (; i < N; ++i) {
        if (a.bytes[i] != b.bytes[i]) return a.bytes[i] <=> b.bytes[i];
      }
      return std::strong_ordering::equal;
    }
    for (std::size_t i = 0; i < N; ++i) {
      if (a.bytes[i] != b.bytes[i]) return a.bytes[i] <=> b.bytes[i];
    }
    return std::strong_ordering::equal;
  }
  friend constexpr bool operator==(const FixedBytes& a, const FixedBytes& b) {
    if (!std::is_constant_evaluated()) {
      std::size_t i = 0;
      for (; i + 8 <= N; i += 8) {
        if (a.big_endian_word(i) != b.big_endian_word(i)) return false;
      }
      for (; i < N; ++i) {
        if (a.bytes[i] != b.bytes[i]) return false;
      }
      return true;
    }
    return a.bytes == b.bytes;
  }

 private:
  // Bytes [i, i + 8) as a big-endian integer: integers compare as the bytes do.
  std::uint64_t big_endian_word(std::size_t i) const {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i, sizeof(w));
    if constexpr (std::endian::native == std::endian::little) w = __builtin_bswap64(w);
    return w;
  }

 public:
};

struct ManifestIdTag {};
struct PublicKeyTag {};
struct SignatureTag {};

// BLAKE2b-256 of a manifest's canonical encoding (without its signature).
using ManifestId = FixedBytes<32, ManifestIdTag>;
// An Ed25519 public key. A peer's id is its public key.
using PublicKey = FixedBytes<32, PublicKeyTag>;
using PeerId = PublicKey;
// An Ed25519 signature.
using Signature = FixedBytes<64, SignatureTag>;

// An integer index with a tag. Arithmetic is explicit: `ShardIndex{i.value + 1}`.
template <typename Tag, typename Rep = std::uint32_t>
struct StrongIndex {
  using rep = Rep;
  Rep value{};
  constexpr StrongIndex() = default;
  constexpr explicit StrongIndex(Rep v) : value(v) {}
  friend constexpr auto operator<=>(StrongIndex, StrongIndex) = default;
};

struct ShardIndexTag {};
struct BlockIndexTag {};
struct TensorIndexTag {};
// The position of a shard in a version's shard table.
using ShardIndex = StrongIndex<ShardIndexTag>;
// The position of a block inside its shard.
using BlockIndex = StrongIndex<BlockIndexTag>;
// The position of a tensor in a manifest's tensor table.
using TensorIndex = StrongIndex<TensorIndexTag>;

// Hex helpers shared by every FixedBytes.
std::string to_hex(std::span<const std::uint8_t> bytes);
// Parses 2 * out.size() hex characters (either case) into `out`.
// Errors: kInvalidArgument (text.size() != 2 * out.size(), or a character
// that is not a hex digit; `out` may then hold the bytes before it).
Status from_hex(std::string_view text, std::span<std::uint8_t> out);

template <std::size_t N, typename Tag>
std::string FixedBytes<N, Tag>::hex() const {
  return to_hex(bytes);
}

template <std::size_t N, typename Tag>
Result<FixedBytes<N, Tag>> FixedBytes<N, Tag>::from_hex(std::string_view text) {
  FixedBytes out;
  if (text.size() != 2 * N) {
    return Status::invalid_argument("expected " + std::to_string(2 * N) + " hex characters, got " +
                                    std::to_string(text.size()));
  }
  Status s = tensorhub::from_hex(text, out.bytes);
  if (!s.is_ok()) return s;
  return out;
}

}  // namespace tensorhub

template <std::size_t N, typename Tag>
struct std::hash<tensorhub::FixedBytes<N, Tag>> {
  // Not noexcept, on purpose: libstdc++'s unordered containers then keep each
  // node's hash, and a lookup compares hashes before 32-byte keys and walks a
  // bucket without rehashing every node it passes.
  std::size_t operator()(const tensorhub::FixedBytes<N, Tag>& v) const {
    // The ids are hashes or keys already: their leading bytes are uniform.
    std::size_t h = 0;
    for (std::size_t i = 0; i < sizeof(h) && i < N; ++i) h = (h << 8) | v.bytes[i];
    return h;
  }
};

template <typename Tag, typename Rep>
struct std::hash<tensorhub::StrongIndex<Tag, Rep>> {
  std::size_t operator()(tensorhub::StrongIndex<Tag, Rep> i) const noexcept { return std::hash<Rep>{}(i.value); }
};
