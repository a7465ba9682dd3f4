#include "gossip/pair_keys.hpp"

#include <sodium.h>

#include <string_view>

#include "core/key_derivation.hpp"

namespace tensorhub::gossip {
namespace {
constexpr std::string_view kPairLabel = "tensorhub gossip pair key v1";
}

std::optional<PairKey> derive_pair_key(const Identity& self, const PeerId& peer, const core::AeadKey& group_key) {
  auto shared = core::shared_secret(self, peer);
  if (!shared) return std::nullopt;
  const PeerId& own = self.public_key();
  const PeerId& low = own < peer ? own : peer;
  const PeerId& high = own < peer ? peer : own;
  crypto_generichash_state state;
  crypto_generichash_init(&state, group_key.data(), group_key.size(), 32);
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(kPairLabel.data()), kPairLabel.size());
  crypto_generichash_update(&state, shared->data(), shared->size());
  crypto_generichash_update(&state, low.bytes.data(), low.bytes.size());
  crypto_generichash_update(&state, high.bytes.data(), high.bytes.size());
  PairKey key;
  crypto_generichash_final(&state, key.data(), key.size());
  sodium_memzero(shared->data(), shared->size());
  return key;
}

SenderTag sender_tag(const PairKey& key, std::span<const std::uint8_t> message) {
  SenderTag tag;
  crypto_generichash(tag.data(), tag.size(), message.data(), message.size(), key.data(), key.size());
  return tag;
}

PairKeys::PairKeys(const Identity& self, const core::AeadKey& group_key, std::size_t capacity)
    : self_(self), group_key_(group_key), capacity_(capacity == 0 ? 1 : capacity) {}

const PairKey* PairKeys::key_for(const PeerId& peer) {
  auto it = keys_.find(peer);
  if (it == keys_.end()) {
    if (keys_.size() >= capacity_) keys_.erase(keys_.begin());
    ++derivations_;
    it = keys_.emplace(peer, derive_pair_key(self_, peer, group_key_)).first;
  }
  return it->second ? &*it->second : nullptr;
}

}  // namespace tensorhub::gossip
