// Where peers sit (datacenter, rack, host), as the driver learns it: from
// gossip's membership records in a peer, from the scenario in the simulator.
//
// One book may serve many cores that see the same world: the simulator's
// thousands of peers share one, since a copy per core would hold every
// peer's location once per peer (quadratic in the peers). A book is not
// thread-safe; the cores that share it run on one thread.
#pragma once

#include <string>
#include <unordered_map>

#include "swarm/topology.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class LocationBook {
 public:
  void set(const PeerId& peer, Location location) {
    auto [it, added] = locations_.try_emplace(peer, location);
    if (!added) {
      count_host(it->second, -1);
      it->second = std::move(location);
    }
    count_host(it->second, +1);
  }
  // nullptr if unknown. Valid until the next set().
  const Location* find(const PeerId& peer) const {
    auto it = locations_.find(peer);
    return it == locations_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return locations_.size(); }
  // Peers in the book on this host (same datacenter, rack and host labels;
  // an empty host label names no host: 0).
  std::size_t peers_on_host(const Location& where) const {
    if (where.host.empty()) return 0;
    auto it = per_host_.find(host_key(where));
    return it == per_host_.end() ? 0 : it->second;
  }

 private:
  static std::string host_key(const Location& l) { return l.dc + '\0' + l.rack + '\0' + l.host; }
  void count_host(const Location& l, int delta) {
    if (l.host.empty()) return;
    auto& count = per_host_[host_key(l)];
    count = static_cast<std::size_t>(static_cast<long long>(count) + delta);
  }

  std::unordered_map<PeerId, Location> locations_;
  std::unordered_map<std::string, std::size_t> per_host_;  // invariant: counts locations_ by host_key
};

}  // namespace tensorhub::swarm
