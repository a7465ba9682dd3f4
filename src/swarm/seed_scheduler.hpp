// The publisher's reveal policy: BitTorrent's super-seeding, for a swarm
// whose members cooperate.
//
// A publisher holds every shard, but at first it is the only holder, and its
// uplink is the scarcest link in the swarm. If it simply advertised all of
// them, fetchers would pick independently and it would upload the same
// shards to several peers (measured: 2.3x the version for 3 fetchers). So it
// reveals to each fetcher only a few shards at a time (a bitfield of those,
// then HAVEs), choosing the shards with the fewest copies among its
// requesters. Its uplink then carries distinct shards to different peers
// first, and the fetchers spread them among themselves.
//
// Only requesters the publisher serves now (unchoked) are shown anything.
// Such a requester's quota of revealed shards it does not hold yet is topped
// up whenever it reports a shard (HAVE), so the publisher's connection to it
// never runs dry; once everything it lacks has been revealed, it sees the
// whole picture, as without super-seeding.
//
// Copies are counted over the current requesters: a requester contributes
// one copy of every shard it holds or has been revealed (a revealed shard is
// about to be a copy). A requester that leaves takes its copies with it, so
// what only it had is revealed to others again.
//
// Sans-I/O; the caller turns reveals into messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/bitfield.hpp"
#include "swarm/piece_picker.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class SeedScheduler {
 public:
  // REQUIRES: reveal_ahead >= 1.
  SeedScheduler(std::uint32_t shard_count, std::size_t reveal_ahead, std::uint64_t seed);

  // A requester arrives holding `has` (empty: nothing). Nothing is revealed
  // to it until it is activated.
  void add_requester(const PeerId& peer, const core::Bitfield& has);
  // The seed serves it now (unchoked): returns the shards to reveal to it.
  std::vector<ShardIndex> activate(const PeerId& peer);
  // The seed stops serving it (choked): what was revealed to it and not yet
  // held stops counting as a copy, so other requesters are shown it instead.
  void deactivate(const PeerId& peer);
  // The requester now holds `shard`. Returns more shards to reveal to it.
  std::vector<ShardIndex> on_have(const PeerId& peer, ShardIndex shard);
  void remove_requester(const PeerId& peer);

  bool knows(const PeerId& peer) const { return requesters_.count(peer) != 0; }
  // Copies of `shard` among the requesters (held or revealed).
  std::uint32_t copies(ShardIndex shard) const { return copies_.availability(shard); }
  // Revealed to `peer` and not yet held by it.
  std::size_t pending(const PeerId& peer) const;

 private:
  struct Requester {
    core::Bitfield has;
    core::Bitfield revealed;
    std::size_t pending = 0;  // revealed, not held; invariant: == count(revealed & ~has)
    bool active = false;
  };
  std::vector<ShardIndex> top_up(Requester& r);

  std::uint32_t shard_count_;
  std::size_t reveal_ahead_;
  PiecePicker copies_;       // availability = copies among requesters
  core::Bitfield everything_;  // the seed holds every shard
  std::map<PeerId, Requester> requesters_;
};

}  // namespace tensorhub::swarm
