// Where peers sit (datacenter, rack, host), as the driver learns it: from
// gossip's membership records in a peer, from the scenario in the simulator.
//
// One book may serve many cores that see the same world: the simulator's
// thousands of peers share one, since a copy per core of every peer's
// location was 10^8 entries at 10,240 peers. A book is not thread-safe; the
// cores that share it run on one thread.
#pragma once

#include <unordered_map>

#include "swarm/topology.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class LocationBook {
 public:
  void set(const PeerId& peer, Location location) { locations_[peer] = std::move(location); }
  // nullptr if unknown. Valid until the next set().
  const Location* find(const PeerId& peer) const {
    auto it = locations_.find(peer);
    return it == locations_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return locations_.size(); }

 private:
  std::unordered_map<PeerId, Location> locations_;
};

}  // namespace tensorhub::swarm
