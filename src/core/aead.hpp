// XChaCha20-Poly1305 (libsodium): authenticated encryption for everything
// the swarm key seals.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tensorhub::core {

inline constexpr std::size_t kAeadKeyBytes = 32;
inline constexpr std::size_t kAeadNonceBytes = 24;
inline constexpr std::size_t kAeadTagBytes = 16;
using AeadKey = std::array<std::uint8_t, kAeadKeyBytes>;
using AeadNonce = std::array<std::uint8_t, kAeadNonceBytes>;

// Appends ciphertext || tag for `plaintext` to `out`. REQUIRES: the nonce is
// never reused with this key (callers build nonces from unique counters).
void aead_seal(const AeadKey& key, const AeadNonce& nonce, std::span<const std::uint8_t> associated,
               std::span<const std::uint8_t> plaintext, std::vector<std::uint8_t>& out);

// Decrypts ciphertext || tag into `plaintext` (replacing its content).
// False when the tag does not verify: wrong key, tampering or garbage.
bool aead_open(const AeadKey& key, const AeadNonce& nonce, std::span<const std::uint8_t> associated,
               std::span<const std::uint8_t> sealed, std::vector<std::uint8_t>& plaintext);

}  // namespace tensorhub::core
