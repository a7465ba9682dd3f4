// Where a fetch may take each shard from: the source rules of
// docs/swarm-policy.md, so that each shared link (a node's NIC, the WAN)
// carries each shard about once.
//
// The rules remember three things, and own them: the host mates' claims (a
// mate is bringing a shard across the NIC we share, kFetching), the shards
// a holder across the WAN deferred to a carrier in our datacenter
// (kDeferred), and since when the fetch has had nothing in flight. They
// read whom the fetch knows (Neighbourhood) and what it has in flight
// (RequestTable), which the FetchSession that holds all three owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/time.hpp"
#include "core/timer_table.hpp"
#include "swarm/fetch_types.hpp"
#include "swarm/neighbourhood.hpp"
#include "swarm/request_table.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

class SourceRules {
 public:
  // `neighbourhood` and `requests` outlive the rules.
  SourceRules(const PeerId& self, const FetchConfig& config, const Neighbourhood& neighbourhood,
              const RequestTable& requests);

  // Whether `shard` may be asked of neighbour `n` now. `begun`: the fetch
  // has started the shard (some block of it received or asked).
  bool allowed(TimePoint now, const Neighbour& n, ShardIndex shard, bool begun) const;

  // --- Host mates' claims ---
  // Mate `peer` (a neighbour on this host) began bringing `shard` across
  // the NIC. The claim lasts until the mate holds the shard, withdraws it
  // or goes; with nothing in flight here it stops binding a request
  // timeout after it was made. When two mates claim one shard, the higher
  // rendezvous score keeps it, the same on every mate.
  void claim(TimePoint now, const PeerId& peer, ShardIndex shard);
  // Withdrawn by `peer` (kNotFetching, or its HAVE): true when it held it.
  bool unclaim(const PeerId& peer, ShardIndex shard);
  // The shard is ours now, or the mate went: its claims go.
  void forget_claim(ShardIndex shard);
  void forget_claims_of(const PeerId& peer);
  // A mate's claim keeps us from asking for `shard` beyond the host now:
  // it has not lapsed, and we did not begin the shard with a higher score.
  bool left_to_a_mate(TimePoint now, ShardIndex shard, bool begun) const;

  // --- Across the WAN ---
  // A holder across the WAN defers `shard` to a mate of ours until `until`.
  void defer(ShardIndex shard, TimePoint until);
  void expire_deferrals(TimePoint now);

  // --- Idleness ---
  // A schedule ran at `now`: the idle clock starts when nothing is in
  // flight, and stops when something is.
  void note_schedule(TimePoint now);

  // Sets kWanIdle, kWanDeferral and kMateClaim: the rules' changes that
  // come with time alone, after `last_scheduled` (already considered).
  void set_timers(core::TimerTable<FetchTimer>& t, TimePoint last_scheduled) const;

 private:
  struct MateClaim {
    PeerId peer;
    TimePoint since;
  };
  // An unchoked neighbour that is not a super-seed holds the shard (one
  // across the WAN only if `count_remote`).
  bool held_by_a_serving_peer(ShardIndex shard, bool count_remote) const;
  // Whether this peer, rather than a mate nearer than `beyond` that is
  // fetching the version, brings `shard` across the link to a source that
  // far (rendezvous hashing over the mates it knows), so each shard crosses
  // the WAN about once per datacenter.
  bool share_is_mine(ShardIndex shard, Proximity beyond) const;

  PeerId self_;
  Duration request_timeout_;
  std::size_t max_wan_requests_;
  const Neighbourhood& neighbourhood_;
  const RequestTable& requests_;
  // Host mates' claims by shard. Invariant: the claimant is a neighbour on
  // this host (forget_claims_of when it goes), and we do not hold the shard
  // (forget_claim). At most a few per mate (the shards it has in flight).
  std::unordered_map<std::uint32_t, MateClaim> mate_claims_;
  // Shards a WAN holder deferred to a mate: not asked across the WAN before
  // then. Invariant after expire_deferrals: every entry is in the future.
  std::map<std::uint32_t, TimePoint> wan_deferred_until_;
  std::optional<TimePoint> idle_since_;  // nothing in flight since (note_schedule)
};

}  // namespace tensorhub::swarm
