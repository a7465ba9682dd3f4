// What the tests that drive real SwarmCores by hand share: a version of a
// small layout, and the message a requester opens with.
#pragma once

#include <cstdint>

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
inline swarm::SwarmMessage interested_in(const ManifestId& version, const swarm::ShardLayout& layout) {
  swarm::SwarmMessage m{swarm::MessageType::kInterested, version, 0, {}, {}, 0, 0, layout.shard_count(), {}};
  m.bytes = core::Bitfield(layout.shard_count()).to_bytes();
  return m;
}

}  // namespace tensorhub::testing
