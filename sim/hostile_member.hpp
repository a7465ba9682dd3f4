// A member of a GossipNetwork that runs, round after round, every forgery in
// the gossip threat model (docs/security.md) against the others. It holds the
// swarm key and a member's identity, sees every peer's true state (an
// omniscient attacker), and its datagrams come from its own address. It
// signs with the member's key but seals with a second identity of its own
// (a Sybil that is no member: strangers are heard too), so that its forged
// datagrams never collide with its own core's nonces.
// Every round:
//   - datagrams naming another member as their sender, at boot id 2^64-1
//     (to poison that member's replay window);
//   - suspect and dead claims at incarnations the target never signed;
//   - suspect claims in other members' names (fake Lifeguard confirmations);
//   - dead claims in its own name at the target's true incarnation (one
//     accuser's word of death);
//   - record bytes that peek as the receiver's own record at 2^64-1;
//   - acks and nacks with random probe numbers, in its own name and posing
//     as the peer being probed (to keep a crashed peer alive);
//   - ping-reqs posing as other members.
// The tests and the gossip benchmark's hostile run count what it achieves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include "core/rng.hpp"
#include "sim/datagram_forger.hpp"
#include "sim/gossip_network.hpp"

namespace tensorhub::sim {

class HostileMember {
 public:
  // `self` is a peer of `net` (its gossip core runs as usual); the forgeries
  // use its identity and address. REQUIRES: net outlives this object.
  HostileMember(GossipNetwork& net, std::size_t self, std::uint64_t seed);

  // One round of every forgery, to `receivers` peers drawn at random.
  void round(std::size_t receivers);
  // Reads every datagram of the network (a member can open them all: it
  // holds the swarm key) and remembers the probe numbers of recent pings.
  // Takes the network's datagram tap.
  void sniff();
  // Acks for `crashed` to every live peer: the probe numbers sniffed from
  // its recent pings and ping-reqs (else `per_peer` random ones), posing as
  // the crashed peer and in its own name.
  void ack_for(std::size_t crashed, std::size_t per_peer);

  std::uint64_t datagrams_sent() const { return sent_; }

 private:
  std::optional<std::size_t> random_live_peer(std::optional<std::size_t> other_than = std::nullopt);
  void send(std::size_t to, gossip::Packet packet, std::span<const gossip::OutgoingItem> items,
            std::optional<PeerId> pose_as = std::nullopt, std::optional<std::uint64_t> boot_id = std::nullopt);

  GossipNetwork& net_;
  std::size_t self_;
  Identity member_;         // signs claims and records
  DatagramForger forger_;   // seals datagrams
  core::SplitMix64 rng_;
  std::uint64_t sent_ = 0;
  std::map<std::size_t, std::deque<std::uint32_t>> probe_seqs_;  // by prober: its latest probe numbers
};

}  // namespace tensorhub::sim
