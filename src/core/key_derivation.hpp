// The keys the library derives from its secrets, kept out of the public
// headers: a swarm key's subkey for one protocol, and the static-static
// X25519 secret two identities share.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub {

// Reaches the secrets of Identity and SwarmKey (they name it a friend).
struct SecretAccess {
  static const std::array<std::uint8_t, 32>& swarm_key(const SwarmKey& key) { return key.key_; }
  static const std::array<std::uint8_t, 64>& secret_key(const Identity& identity) { return identity.secret_key_; }
};

namespace core {

// A 32-byte subkey of `key` for one purpose, e.g. "gossip" or "data".
// REQUIRES: purpose is at most 8 bytes (a libsodium KDF context).
std::array<std::uint8_t, 32> derive_subkey(const SwarmKey& key, std::string_view purpose,
                                           std::uint64_t subkey_id = 1);

// The X25519 secret of `self` and `peer` (both Ed25519 keys converted to
// their Montgomery form): the same bytes on both sides, known to nobody
// else. Callers hash it with a purpose label and both ids before using it
// as a key. Errors: kInvalidArgument (`peer` is not a valid Ed25519 public
// key, or the exchange gives the all-zero, low-order, result).
Result<std::array<std::uint8_t, 32>> shared_secret(const Identity& self, const PublicKey& peer);

}  // namespace core
}  // namespace tensorhub
