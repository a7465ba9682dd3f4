// The hosts of the swarm's live members, as their records' data addresses
// give them, and how many members each holds: under a flood of handshakes
// the data acceptor keeps the ones from these hosts (TcpTransport's member
// address check). Kept in step with gossip's member events.
#pragma once

#include <asio/ip/address.hpp>
#include <cstddef>
#include <map>

#include "gossip/gossip_core.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::peer {

class MemberHosts {
 public:
  // A member joined, changed its record, died, left or was removed.
  void note(const gossip::MemberEvent& e);
  bool contains(const asio::ip::address& host) const { return members_at_.count(host) != 0; }

 private:
  std::map<PeerId, asio::ip::address> host_of_;
  std::map<asio::ip::address, std::size_t> members_at_;
};

}  // namespace tensorhub::peer
