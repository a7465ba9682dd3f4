// The data connections to one neighbour.
//
// Lane 0, the primary, is the connection the swarm core knows: every control
// message (interest, bitfields, HAVEs, choking, cancels, manifests) travels
// on it, in order. Further lanes (PeerOptions::data_lanes) are extra TCP
// connections to the same neighbour that carry requests and the pieces that
// answer them, for links that one connection cannot fill. Requests are spread
// by request id over the lanes that are open; the holder answers by the same
// rule on its side, and since a piece header names its request, a piece that
// comes back on another lane than its request went out on is still a piece.
//
// A lane that fails to open is simply not used. An established lane that
// closes takes the whole link with it (its pieces in flight are lost, and the
// swarm core puts their requests back at once when told of the disconnect).
//
// The side whose connection became the primary opens the extra lanes.
// I/O-thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/data_connection.hpp"

namespace tensorhub::peer {

struct DataLink {
  // [0] is the primary; a slot is null until a lane is opened or accepted.
  // Invariant: lanes[0] is non-null and established.
  std::vector<std::shared_ptr<transport::DataConnection>> lanes;

  transport::DataConnection& primary() const { return *lanes[0]; }

  // Where a request, or the piece that answers it, goes.
  transport::DataConnection& lane_for(std::uint32_t request_id) const {
    const auto& lane = lanes[request_id % lanes.size()];
    return lane && lane->established() && !lane->closed() ? *lane : primary();
  }

  bool holds(const transport::DataConnection* connection) const {
    for (const auto& lane : lanes) {
      if (lane.get() == connection) return true;
    }
    return false;
  }
};

}  // namespace tensorhub::peer
