// The data connections of one peer, by neighbour: outbound ones in their
// handshake, inbound ones in theirs, and established links with their lanes;
// messages wait here for a connection that is opening. No I/O: a Connection
// is anything with established(), closed(), close(Status), send(message),
// remote() and lane(), so tests drive it with fakes and the runtime with
// transport::DataConnection.
//
// A link's lane 0, the primary, is the connection the swarm core knows:
// every control message travels on it, in order. Further lanes are extra
// connections to the same neighbour that carry requests and the pieces that
// answer them, spread by request id, for links one connection cannot fill.
// The side whose connection became the primary opens the extra lanes. A lane
// that fails to open is not used; an established lane that closes takes the
// whole link with it.
//
// When both sides connect at once, the connection opened by the peer with
// the smaller id is kept (both sides decide alike without talking), and what
// was in flight on the other is lost with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

// Whether a connection just established replaces the link that exists to
// the same neighbour: it does when its opener has the smaller id.
inline bool replaces_existing_link(const PeerId& self, const PeerId& remote, bool opened_by_self) {
  const PeerId& opener = opened_by_self ? self : remote;
  const PeerId& other = opened_by_self ? remote : self;
  return opener < other;
}

template <typename Connection>
class DataLinks {
 public:
  using Ptr = std::shared_ptr<Connection>;

  struct Link {
    // [0] is the primary; a slot is null until its lane opens or is accepted.
    // Invariant: lanes[0] is non-null and established.
    std::vector<Ptr> lanes;
    Connection& primary() const { return *lanes[0]; }
    // Where a request, or the piece that answers it, goes.
    Connection& lane_for(swarm::RequestId request_id) const {
      const auto& lane = lanes[request_id.value % lanes.size()];
      return lane && lane->established() && !lane->closed() ? *lane : primary();
    }
    bool holds(const Connection* c) const {
      return std::any_of(lanes.begin(), lanes.end(), [&](const Ptr& l) { return l.get() == c; });
    }
  };

  explicit DataLinks(PeerId self) : self_(self) {}

  // Admission control: a connection whose authenticated peer `admits`
  // refuses is closed once its handshake is done. Unset: anyone.
  void set_admission(std::function<bool(const PeerId&)> admits) { admits_ = std::move(admits); }

  const Link* link(const PeerId& peer) const {
    auto it = links_.find(peer);
    return it == links_.end() ? nullptr : &it->second;
  }
  const std::map<PeerId, Link>& links() const { return links_; }
  bool connecting(const PeerId& peer) const { return connecting_.count(peer) != 0; }

  // An outbound connection to `peer` began its handshake.
  void add_outbound(const PeerId& peer, Ptr connection) { connecting_[peer] = std::move(connection); }
  // An inbound connection began its handshake.
  void add_inbound(Ptr connection) { accepting_.push_back(std::move(connection)); }
  // Sends on the link, or keeps the message until one opens. Returns false
  // when it was kept and no connection is opening (the caller opens one).
  bool send(const PeerId& peer, const swarm::SwarmMessage& message) {
    if (auto* l = find_link(peer)) {
      (message.type == swarm::MessageType::kRequest ? l->lane_for(message.request_id) : l->primary()).send(message);
      return true;
    }
    pending_[peer].push_back(message);
    return connecting(peer);
  }

  // What happened to a connection whose handshake completed.
  struct Established {
    enum Kind {
      kLinked,      // a new link to `peer` (primary); `replaced` were its predecessor's lanes
      kLane,        // an extra lane of an existing link
      kRejected,    // closed: `why` (a duplicate, or not the peer that was asked for)
      kUnknown,     // not a connection this table knows
    } kind = kUnknown;
    PeerId peer;
    bool outbound = false;
    std::vector<Ptr> replaced;  // closed by the caller, who tells the swarm core of the disconnect first
    Status why;
  };
  // REQUIRES: `connection` completed its handshake. A rejected connection
  // is closed here; a new link's waiting messages are sent on it.
  Established on_established(Connection& connection) {
    Established out;
    out.peer = connection.remote();
    if (connection.lane() > 0) return attach_lane(connection);
    Ptr self;
    for (auto it = connecting_.begin(); it != connecting_.end(); ++it) {
      if (it->second.get() != &connection) continue;
      self = it->second;
      out.outbound = true;
      const bool impostor = it->first != out.peer;
      connecting_.erase(it);
      if (impostor) return reject(connection, out, Status::verify_failed("the peer at that address is not the one gossip named"));
      break;
    }
    if (!self) self = take_accepted(connection);
    if (!self) return out;
    if (admits_ && !admits_(out.peer)) {
      return reject(connection, out, Status::permission_denied("the peer is not on this peer's member list"));
    }
    auto existing = links_.find(out.peer);
    if (existing != links_.end()) {
      if (!replaces_existing_link(self_, out.peer, out.outbound)) {
        return reject(connection, out, Status::cancelled("a duplicate connection"));
      }
      out.replaced = std::move(existing->second.lanes);
      links_.erase(existing);
    }
    links_[out.peer].lanes = {self};
    if (auto pending = pending_.find(out.peer); pending != pending_.end()) {
      for (const auto& m : pending->second) self->send(m);
      pending_.erase(pending);
    }
    out.kind = Established::kLinked;
    return out;
  }

  // The primary of a link this side opened: lanes 1..n-1 are opened by the
  // caller and registered here.
  void add_extra_lanes(const PeerId& peer, std::vector<Ptr> lanes) {
    auto* l = find_link(peer);
    if (!l) return;
    for (auto& lane : lanes) l->lanes.push_back(std::move(lane));
  }

  // What a closed connection took with it.
  struct Closed {
    enum Kind {
      kNothing,        // unknown, an inbound handshake, or a lane that never opened
      kConnectFailed,  // an outbound handshake to `peer`: its waiting messages are dropped
      kLinkLost,       // an established lane: the whole link to `peer` is gone; `others` to close
    } kind = kNothing;
    PeerId peer;
    std::vector<Ptr> others;
  };
  Closed on_closed(Connection& connection) {
    Closed out;
    for (auto it = connecting_.begin(); it != connecting_.end(); ++it) {
      if (it->second.get() != &connection) continue;
      out.kind = Closed::kConnectFailed;
      out.peer = it->first;
      connecting_.erase(it);
      pending_.erase(out.peer);
      return out;
    }
    std::erase_if(accepting_, [&](const Ptr& c) { return c.get() == &connection; });
    auto it = links_.begin();
    while (it != links_.end() && !it->second.holds(&connection)) ++it;
    if (it == links_.end()) return out;
    if (!connection.established()) {
      for (auto& lane : it->second.lanes) {
        if (lane.get() == &connection) lane.reset();
      }
      return out;
    }
    out.kind = Closed::kLinkLost;
    out.peer = it->first;
    for (auto& lane : it->second.lanes) {
      if (lane && lane.get() != &connection) out.others.push_back(std::move(lane));
    }
    links_.erase(it);
    return out;
  }

  // Every connection, for closing them all.
  std::vector<Ptr> take_all() {
    std::vector<Ptr> all = std::move(accepting_);
    for (auto& [id, l] : links_) {
      for (auto& lane : l.lanes) {
        if (lane) all.push_back(std::move(lane));
      }
    }
    for (auto& [id, c] : connecting_) all.push_back(std::move(c));
    accepting_.clear();
    links_.clear();
    connecting_.clear();
    pending_.clear();
    return all;
  }

 private:
  Link* find_link(const PeerId& peer) {
    auto it = links_.find(peer);
    return it == links_.end() ? nullptr : &it->second;
  }

  Ptr take_accepted(Connection& connection) {
    auto it = std::find_if(accepting_.begin(), accepting_.end(), [&](const Ptr& c) { return c.get() == &connection; });
    if (it == accepting_.end()) return nullptr;
    Ptr self = std::move(*it);
    accepting_.erase(it);
    return self;
  }

  Established reject(Connection& connection, Established out, Status why) {
    out.kind = Established::kRejected;
    out.why = why;
    connection.close(std::move(why));
    return out;
  }

  Established attach_lane(Connection& connection) {
    Established out;
    out.peer = connection.remote();
    const std::uint8_t lane = connection.lane();
    auto* l = find_link(out.peer);
    // An extra lane we opened: it is in its slot already.
    if (l && lane < l->lanes.size() && l->lanes[lane].get() == &connection) {
      out.kind = Established::kLane;
      out.outbound = true;
      return out;
    }
    Ptr self = take_accepted(connection);
    if (!self) {
      // Opened by us towards an address whose peer is not the one gossip named.
      return reject(connection, out, Status::verify_failed("the peer at that address is not the one gossip named"));
    }
    if (!l) return reject(connection, out, Status::cancelled("an extra lane without its primary connection"));
    if (lane >= l->lanes.size()) l->lanes.resize(lane + 1);
    if (l->lanes[lane] && !l->lanes[lane]->closed()) return reject(connection, out, Status::cancelled("a duplicate lane"));
    l->lanes[lane] = std::move(self);
    out.kind = Established::kLane;
    return out;
  }

  PeerId self_;
  std::function<bool(const PeerId&)> admits_;
  std::map<PeerId, Link> links_;                        // established
  std::map<PeerId, Ptr> connecting_;                    // outbound, in handshake
  std::vector<Ptr> accepting_;                          // inbound, in handshake
  std::map<PeerId, std::vector<swarm::SwarmMessage>> pending_;  // to send once connected
};

}  // namespace tensorhub::peer
