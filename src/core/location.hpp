// Where a peer sits: its datacenter, rack and host labels. Gossip records
// carry it, the swarm core ranks sources by it, and the simulator places
// peers by it: one type for all three.
#pragma once

#include <string>

namespace tensorhub {

struct Location {
  std::string dc, rack, host;
  friend bool operator==(const Location&, const Location&) = default;
};

}  // namespace tensorhub
