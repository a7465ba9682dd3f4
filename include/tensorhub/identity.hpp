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
  // others may access, or that belongs to a user other than this one or
  // root, and names the chmod (or chown) that fixes it.
  // Errors: kNotFound (no such file), kPermissionDenied (no right to open
  // it, group or other access, another owner), kInvalidArgument (not a
  // regular file, over 4 KiB, or no well-formed key line), kIoError (it
  // cannot be opened otherwise).
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
  // Errors: kAlreadyExists (`path` exists and !overwrite), kNotFound
  // (`path`'s directory does not exist), kPermissionDenied (no right to
  // create the file there), kIoError (the write, sync or rename fails
  // otherwise).
  Status save(const std::string& path, bool overwrite = false) const;

  const PublicKey& public_key() const { return public_key_; }
  const PeerId& peer_id() const { return public_key_; }

  // Ed25519 signature of `message`. Callers put a domain-separation prefix in
  // the message, so that a signature made for one purpose is useless for another.
  Signature sign(std::span<const std::uint8_t> message) const;

 private:
  friend struct SecretAccess;  // the key agreement (src/core/key_derivation.hpp)
  Identity() = default;
  std::array<std::uint8_t, 32> seed_{};
  std::array<std::uint8_t, 64> secret_key_{};
  PublicKey public_key_;
};

// True when `signature` is `key`'s Ed25519 signature of `message`.
bool verify_signature(const PublicKey& key, std::span<const std::uint8_t> message,
                      const Signature& signature);

}  // namespace tensorhub
