// The swarm key: 32 random bytes that every member of one swarm shares.
//
// It admits peers: gossip datagrams, gossip streams and the data-plane
// handshake are all sealed or authenticated with keys derived from it, so a
// peer without it can neither join, nor be seen, nor inject or read anything.
// Each protocol uses its own derived subkey, never the key itself.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorhub/status.hpp"

namespace tensorhub {

class SwarmKey {
 public:
  static SwarmKey generate();
  static SwarmKey from_bytes(std::span<const std::uint8_t, 32> bytes);
  // Loads a file written by save() (or `tensorhub swarm-key`). Refuses a file
  // that its group or others may access.
  static Result<SwarmKey> load(const std::string& path);

  SwarmKey(const SwarmKey&) = default;
  SwarmKey& operator=(const SwarmKey&) = default;
  ~SwarmKey();  // wipes the key

  // Writes the key with mode 0600, atomically; refuses to replace a file
  // unless `overwrite`.
  Status save(const std::string& path, bool overwrite = false) const;

  // A 32-byte subkey for one purpose, e.g. "gossip" or "data".
  // REQUIRES: purpose is at most 8 bytes (a libsodium KDF context).
  std::array<std::uint8_t, 32> derive(std::string_view purpose, std::uint64_t subkey_id = 1) const;

  // A short public fingerprint (BLAKE2b of the key) for logs: safe to print.
  std::string fingerprint() const;

 private:
  SwarmKey() = default;
  std::array<std::uint8_t, 32> key_{};
};

}  // namespace tensorhub
