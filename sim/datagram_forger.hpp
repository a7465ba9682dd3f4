// Seals gossip datagrams as a given identity holding the members' swarm key,
// to any peer of a GossipNetwork: the hostile member of the attack tests and
// of the gossip benchmark's hostile run.
//
// It can do what any key holder can: seal under the swarm key, sign records
// and liveness claims with its own key, tag datagrams with the pairwise key
// it shares with the receiver, and name any sender it likes in the nonce and
// the plaintext. What it cannot do is tag a datagram with the pair key of
// another member, or sign in another's name: the tests check that this is
// what stops it.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <span>
#include <vector>

#include "core/key_derivation.hpp"
#include "gossip/gossip_wire.hpp"
#include "gossip/pair_keys.hpp"
#include "sim/gossip_network.hpp"

namespace tensorhub::sim {

class DatagramForger {
 public:
  DatagramForger(std::uint64_t key_index, std::uint64_t boot_id)
      : identity_(GossipNetwork::identity_for(key_index)),
        group_key_(core::derive_subkey(GossipNetwork::members_key(), "gossip")),
        keys_(identity_, group_key_, 1u << 16),
        boot_id_(boot_id) {}

  const Identity& identity() const { return identity_; }
  const PeerId& id() const { return identity_.public_key(); }

  // A datagram for peer `to` that names `pose_as` (default: this identity)
  // as its sender, at boot `boot_id` (default: the constructor's). The tag
  // is always this identity's own pair key with `to`.
  std::vector<std::uint8_t> seal(const PeerId& to, gossip::Packet packet, std::span<const gossip::OutgoingItem> items,
                                 std::optional<PeerId> pose_as = std::nullopt,
                                 std::optional<std::uint64_t> boot_id = std::nullopt) {
    packet.sender = pose_as.value_or(id());
    // One sealer per (sender, boot): its counter gives each datagram a new
    // nonce, so none is a replay of an earlier one.
    return sealer_for(packet.sender, boot_id.value_or(boot_id_)).seal_packet(*keys_.key_for(to), packet, items);
  }

  // A liveness claim signed by this identity, naming `from` as the accuser.
  gossip::LivenessItem claim(gossip::Liveness state, const PeerId& target, std::uint64_t incarnation,
                             std::optional<PeerId> from = std::nullopt) const {
    gossip::LivenessItem item = gossip::sign_liveness(identity_, state, target, incarnation);
    if (from) item.from = *from;  // the signature stays ours: forged
    return item;
  }

 private:
  gossip::Sealer& sealer_for(const PeerId& sender, std::uint64_t boot) {
    for (auto& [key, sealer] : sealers_) {
      if (key.first == sender && key.second == boot) return sealer;
    }
    sealers_.emplace_back(std::make_pair(sender, boot), gossip::Sealer(group_key_, sender, boot));
    return sealers_.back().second;
  }

  Identity identity_;
  core::AeadKey group_key_;
  gossip::PairKeys keys_;
  std::uint64_t boot_id_;
  std::vector<std::pair<std::pair<PeerId, std::uint64_t>, gossip::Sealer>> sealers_;
};

}  // namespace tensorhub::sim
