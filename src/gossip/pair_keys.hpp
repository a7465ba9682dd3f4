// Pairwise keys between this peer and each other: they authenticate the
// sender of every gossip datagram.
//
// The swarm key seals datagrams, so every member can open (and could forge)
// any of them. The pairwise key of peers A and B is known to A and B alone:
// BLAKE2b-256 keyed with the swarm's gossip key over a purpose label, the
// static-static X25519 secret of their Ed25519 identities, and both ids in
// order. A datagram's tag under it proves which member sent it and which it
// was meant for, so no member can speak in another's name: poison a replay
// window, ack a probe for a crashed peer, or relay on someone's behalf.
// (WireGuard authenticates its peers from static-static DH the same way.)
//
// Deriving a key costs one X25519 (about 70 us); the keys are cached, at most
// `capacity` of them, evicting an arbitrary one when full.
//
// Thread-compatibility: not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

#include "core/aead.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::gossip {

inline constexpr std::size_t kSenderTagBytes = 16;
using PairKey = std::array<std::uint8_t, 32>;
using SenderTag = std::array<std::uint8_t, kSenderTagBytes>;

// The key `self` shares with `peer`; nullopt when `peer` is not a usable
// public key. The same on both sides.
std::optional<PairKey> derive_pair_key(const Identity& self, const PeerId& peer, const core::AeadKey& group_key);

// BLAKE2b-128 of `message` keyed with `key`.
SenderTag sender_tag(const PairKey& key, std::span<const std::uint8_t> message);

class PairKeys {
 public:
  // REQUIRES: `self` outlives this object.
  PairKeys(const Identity& self, const core::AeadKey& group_key, std::size_t capacity);

  // The key shared with `peer`, derived on first use; null when `peer` is not
  // a usable public key (remembered too, so junk ids cost one attempt each
  // while cached). The pointer is valid until the next call.
  const PairKey* key_for(const PeerId& peer);

  std::uint64_t derivations() const { return derivations_; }
  std::size_t size() const { return keys_.size(); }

 private:
  const Identity& self_;
  core::AeadKey group_key_;
  std::size_t capacity_;
  std::unordered_map<PeerId, std::optional<PairKey>> keys_;
  std::uint64_t derivations_ = 0;
};

}  // namespace tensorhub::gossip
