// Ed25519 identities: a peer's key pair, and a publisher's signing key.
//
// The peer id is the public key. The secret never leaves this object except
// through save(), which writes a file only its owner can read.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub {

class Identity {
 public:
  // A fresh random key pair.
  static Identity generate();
  // The key pair derived from a 32-byte seed (deterministic: for tests and
  // simulations).
  static Identity from_seed(std::span<const std::uint8_t, 32> seed);
  // Loads a key file written by save(). Refuses a file that its group or
  // others may read, and names the chmod that fixes it.
  static Result<Identity> load(const std::string& path);

  // A second object holding the same key, for a component that must own one
  // (the gossip core signs records with its own copy).
  Identity clone() const { return from_seed(seed_); }

  Identity(Identity&& other) noexcept;
  Identity& operator=(Identity&& other) noexcept;
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;
  ~Identity();  // wipes the secret

  // Writes the key file with mode 0600, atomically. Refuses to replace an
  // existing file unless `overwrite`.
  Status save(const std::string& path, bool overwrite = false) const;

  const PublicKey& public_key() const { return public_key_; }
  const PeerId& peer_id() const { return public_key_; }

  // Ed25519 signature of `message`. Callers put a domain-separation prefix in
  // the message, so that a signature made for one purpose is useless for another.
  Signature sign(std::span<const std::uint8_t> message) const;

  // The static-static X25519 shared secret with `peer` (both Ed25519 keys
  // converted to their Montgomery form): the same bytes on both sides, known
  // to nobody else. Callers hash it with a purpose label and both ids before
  // using it as a key. Fails when `peer` is not a valid Ed25519 public key or
  // the exchange gives the all-zero (low-order) result.
  Result<std::array<std::uint8_t, 32>> shared_secret(const PublicKey& peer) const;

 private:
  Identity() = default;
  std::array<std::uint8_t, 32> seed_{};
  std::array<std::uint8_t, 64> secret_key_{};
  PublicKey public_key_;
};

// True when `signature` is `key`'s Ed25519 signature of `message`.
bool verify_signature(const PublicKey& key, std::span<const std::uint8_t> message,
                      const Signature& signature);

}  // namespace tensorhub
