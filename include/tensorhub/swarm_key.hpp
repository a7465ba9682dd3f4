// The swarm key: 32 random bytes that every member of one swarm shares.
//
// It admits peers: gossip datagrams, gossip streams and the data-plane
// handshake are all sealed or authenticated with keys derived from it, so a
// peer without it can neither join, nor be seen, nor inject or read anything.
// Each protocol uses its own derived subkey (derived inside the library),
// never the key itself.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub {

class SwarmKey {
 public:
  static SwarmKey generate();
  static SwarmKey from_bytes(std::span<const std::uint8_t, 32> bytes);
  // Loads a file written by save() (or `tensorhub swarm-key`). Refuses a file
  // that its group or others may access, or that belongs to a user other
  // than this one or root.
  // Errors: kNotFound (no such file), kPermissionDenied (no right to open
  // it, group or other access, another owner), kInvalidArgument (not a
  // regular file, over 4 KiB, or no well-formed key line), kIoError (it
  // cannot be opened otherwise).
  static Result<SwarmKey> load(const std::string& path);

  SwarmKey(const SwarmKey&) = default;
  SwarmKey& operator=(const SwarmKey&) = default;
  ~SwarmKey();  // wipes the key

  // Writes the key with mode 0600, atomically; refuses to replace a file
  // unless `overwrite`.
  // Errors: kAlreadyExists (`path` exists and !overwrite), kNotFound
  // (`path`'s directory does not exist), kPermissionDenied (no right to
  // create the file there), kIoError (the write, sync or rename fails
  // otherwise).
  Status save(const std::string& path, bool overwrite = false) const;

  // A short public fingerprint (BLAKE2b of the key) for logs: safe to print.
  std::string fingerprint() const;

 private:
  friend struct SecretAccess;  // the subkeys (src/core/key_derivation.hpp)
  SwarmKey() = default;
  std::array<std::uint8_t, 32> key_{};
};

}  // namespace tensorhub
