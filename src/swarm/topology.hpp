// How near another peer is, from its topology labels: the same host, the
// same rack, the same datacenter, or remote. Sources are preferred in that
// order, and a shard held inside the datacenter is never pulled across the WAN.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/location.hpp"

namespace tensorhub::swarm {

using tensorhub::Location;

enum class Proximity : std::uint8_t { kSameHost = 0, kSameRack = 1, kSameDc = 2, kRemote = 3 };

// Labels left empty match nothing but an empty label of the same level: two
// peers without labels are treated as one datacenter.
inline Proximity proximity(const Location& self, const Location& other) {
  if (self.dc != other.dc) return Proximity::kRemote;
  if (self.rack != other.rack) return Proximity::kSameDc;
  if (self.host != other.host || self.host.empty()) return Proximity::kSameRack;
  return Proximity::kSameHost;
}

}  // namespace tensorhub::swarm
