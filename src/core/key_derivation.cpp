#include "core/key_derivation.hpp"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "core/sodium_init.hpp"

namespace tensorhub::core {

std::array<std::uint8_t, 32> derive_subkey(const SwarmKey& key, std::string_view purpose, std::uint64_t subkey_id) {
  ensure_sodium();
  assert(purpose.size() <= crypto_kdf_CONTEXTBYTES);
  char context[crypto_kdf_CONTEXTBYTES] = {};
  std::memcpy(context, purpose.data(), std::min(purpose.size(), sizeof context));
  std::array<std::uint8_t, 32> out{};
  crypto_kdf_derive_from_key(out.data(), out.size(), subkey_id, context, SecretAccess::swarm_key(key).data());
  return out;
}

Result<std::array<std::uint8_t, 32>> shared_secret(const Identity& self, const PublicKey& peer) {
  ensure_sodium();
  std::array<std::uint8_t, 32> own_x{}, peer_x{}, shared{};
  if (crypto_sign_ed25519_pk_to_curve25519(peer_x.data(), peer.bytes.data()) != 0) {
    return Status::invalid_argument("not an Ed25519 public key: " + peer.short_hex());
  }
  crypto_sign_ed25519_sk_to_curve25519(own_x.data(), SecretAccess::secret_key(self).data());
  const int rc = crypto_scalarmult(shared.data(), own_x.data(), peer_x.data());
  sodium_memzero(own_x.data(), own_x.size());
  if (rc != 0) return Status::invalid_argument("low-order public key: " + peer.short_hex());
  return shared;
}

}  // namespace tensorhub::core
