// What the tests that drive real SwarmCores by hand share: a version of a
// small layout, and the message a requester opens with.
#pragma once

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "core/bitfield.hpp"
#include "support/gossip_network.hpp"
#include "swarm/swarm_core.hpp"

namespace tensorhub::testing {

// Four shards of one 1 MiB block each.
inline const swarm::ShardLayout kFourShards{4u << 20, 1u << 20, 1u << 20};

inline PeerId swarm_peer(std::uint64_t n) { return GossipNetwork::identity_for(n).public_key(); }

inline ManifestId version_tagged(std::uint8_t tag) {
  ManifestId id;
  id.bytes[0] = tag;
  return id;
}

// kInterested from a requester that holds nothing yet.
inline swarm::SwarmMessage interested_in(const ManifestId& version_id, const swarm::ShardLayout& layout) {
  swarm::SwarmMessage m{swarm::MessageType::kInterested, version_id, {}, {}, {}, 0, 0, layout.shard_count(), {}};
  m.bytes = core::Bitfield(layout.shard_count()).to_bytes();
  return m;
}

// kBitfield: the holder shows `bits` of `version`.
inline swarm::SwarmMessage bitfield_of(const ManifestId& version_id, const core::Bitfield& bits) {
  return swarm::SwarmMessage::with_bits(swarm::MessageType::kBitfield, version_id, static_cast<std::uint32_t>(bits.size()), bits.to_bytes());
}

// What a core asked the driver to send and to open, in order.
struct Sent {
  std::vector<std::pair<PeerId, swarm::SwarmMessage>> messages;
  std::vector<PeerId> opened;
};

inline Sent drain(swarm::SwarmCore& core) {
  Sent out;
  while (auto action = core.poll()) {
    if (auto* send = std::get_if<swarm::SendMessage>(&*action)) out.messages.emplace_back(send->peer, send->message);
    if (auto* open = std::get_if<swarm::OpenConnection>(&*action)) out.opened.push_back(open->peer);
  }
  return out;
}

// Who was sent a message of `type`, in sending order.
inline std::vector<PeerId> recipients(const Sent& sent, swarm::MessageType type) {
  std::vector<PeerId> out;
  for (const auto& [to, m] : sent.messages) {
    if (m.type == type) out.push_back(to);
  }
  return out;
}

}  // namespace tensorhub::testing
