#include "tensorhub/swarm_key.hpp"

#include <sodium.h>

#include <cassert>
#include <cstring>

#include "core/hash.hpp"
#include "core/key_derivation.hpp"
#include "core/secret_file.hpp"
#include "core/sodium_init.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub {
namespace {
constexpr std::string_view kSwarmKeyLabel = "tensorhub-swarm-key";
}

SwarmKey SwarmKey::generate() {
  core::ensure_sodium();
  SwarmKey key;
  randombytes_buf(key.key_.data(), key.key_.size());
  return key;
}

SwarmKey SwarmKey::from_bytes(std::span<const std::uint8_t, 32> bytes) {
  SwarmKey key;
  std::memcpy(key.key_.data(), bytes.data(), 32);
  return key;
}

Result<SwarmKey> SwarmKey::load(const std::string& path) {
  auto secret = core::read_secret_file(path, kSwarmKeyLabel);
  if (!secret) return secret.status();
  SwarmKey key = from_bytes(*secret);
  sodium_memzero(secret->data(), secret->size());
  return key;
}

SwarmKey::~SwarmKey() { sodium_memzero(key_.data(), key_.size()); }

Status SwarmKey::save(const std::string& path, bool overwrite) const {
  return core::write_secret_file(path, kSwarmKeyLabel, "TensorHub swarm key, fingerprint " + fingerprint(), key_,
                                 overwrite);
}

std::string SwarmKey::fingerprint() const {
  const auto digest = core::derive_subkey(*this, "finger");
  return to_hex(std::span<const std::uint8_t>(digest.data(), 6));
}

}  // namespace tensorhub
