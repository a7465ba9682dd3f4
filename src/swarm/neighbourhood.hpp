// Whom one fetch knows, and what they hold.
//
// Candidates are the holders gossip named that the fetch is not connected
// to (bounded: CandidateList); neighbours are the ones it connects to, with
// their connection state and the shards they showed; lost holders are
// neighbours whose connection went, tried again after a back-off that
// doubles while they deliver nothing; banned peers are never taken again.
// The neighbourhood keeps the counts a fetch asks after every block and
// HAVE (neighbours connecting, those that may yet show shards, host mates,
// and per proximity per shard the neighbours holding it) true as
// neighbours change, so no question walks them.
//
// It decides nothing: FetchSession's policies choose whom to connect,
// trade, release or ban, and keep the picker's availability beside it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/bitfield.hpp"
#include "core/rng.hpp"
#include "core/time.hpp"
#include "swarm/candidate_list.hpp"
#include "swarm/topology.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::swarm {

struct Neighbour {
  bool complete_source = false;  // named complete by gossip when it became a neighbour
  Proximity proximity = Proximity::kRemote;
  bool connecting = false, connected = false;
  bool choked = false;
  bool super_seed = false;
  TimePoint connect_deadline;
  core::Bitfield bits;
  bool has_bits = false;
  // bits.all() when its bits were last given or grown (a refusal clears a
  // bit, not this: asked per shard per neighbour).
  bool holds_all = false;
  int bad_shards = 0;        // shards it alone sent that failed verification
  std::uint64_t bytes = 0;   // delivered to us

  bool holds(ShardIndex shard) const { return has_bits && bits.test(shard.value); }
  // Whether it may yet show shards it has not: still connecting, silent
  // about what it holds, or a super-seed (it shows as it goes).
  bool may_yet_show() const { return connecting || (connected && (!has_bits || super_seed)); }
};

class Neighbourhood {
 public:
  using Neighbours = std::map<PeerId, Neighbour>;

  // `seed` draws the candidates sampled and chosen at random.
  Neighbourhood(std::uint32_t shard_count, std::size_t max_candidates, std::uint64_t seed);
  // Not copied: schedule_order_ points into neighbours_.
  Neighbourhood(const Neighbourhood&) = delete;
  Neighbourhood& operator=(const Neighbourhood&) = delete;

  // --- Candidates ---
  // False for a banned peer or a neighbour, which stay as they are.
  bool add_candidate(const PeerId& peer, Proximity proximity, bool complete);
  // Gossip says it left: neither a candidate nor a lost holder any more.
  void forget(const PeerId& peer);
  const CandidateList& candidates() const { return candidates_; }
  // The nearest candidate (only complete ones with `complete_only`),
  // drawn among equals when `drawn`, else the first in id order.
  std::optional<PeerId> nearest_candidate(bool complete_only, bool drawn);
  // A candidate drawn at random. REQUIRES: !candidates().empty().
  PeerId any_candidate();
  bool banned(const PeerId& peer) const { return banned_.count(peer) != 0; }

  // --- Neighbours ---
  // Takes `candidate` from the candidates as a neighbour now connecting.
  // REQUIRES: candidates().contains(candidate).
  void connect(const PeerId& candidate, TimePoint connect_deadline);
  // Drops the neighbour (banned with `ban`) and returns what it was.
  // REQUIRES: find(peer) != nullptr.
  Neighbour remove(const PeerId& peer, bool ban);
  const Neighbour* find(const PeerId& peer) const;
  const Neighbours& all() const { return neighbours_; }
  std::size_t size() const { return neighbours_.size(); }
  void set_connected(const PeerId& peer);
  void set_super_seed(const PeerId& peer);
  void set_choked(const PeerId& peer, bool choked);
  // Its bitfield (of shard_count bits) replaces what it showed.
  void set_bits(const PeerId& peer, const core::Bitfield& bits);
  // It holds `shard`: true when that is news.
  bool add_have(const PeerId& peer, ShardIndex shard);
  // It cannot give `shard` now: true when it had shown it.
  bool drop_have(const PeerId& peer, ShardIndex shard);
  // Counts a bad shard it alone sent; returns how many it has sent.
  int note_bad_shard(const PeerId& peer);
  void note_bytes(const PeerId& peer, std::uint64_t bytes);
  // The neighbours in the order a schedule fills them: nearest first, equals
  // in id order.
  const std::vector<std::pair<const PeerId, Neighbour>*>& schedule_order();

  // Neighbours serving us through one of their upload slots right now:
  // connected and unchoked, neither a host mate nor a super-seed.
  std::size_t slot_sources() const;
  // Some neighbour beyond the host, other than a super-seed, is across the WAN.
  bool pulls_across_wan() const;

  // --- Counts ---
  std::size_t connecting_count() const { return connecting_count_; }
  std::size_t may_yet_show_count() const;
  std::size_t host_mates() const { return host_mates_; }
  // Neighbours at exactly `proximity` whose bits hold the shard.
  std::size_t holders_at(ShardIndex shard, Proximity proximity) const;
  // Whether a neighbour nearer than `beyond` holds the shard.
  bool held_within(ShardIndex shard, Proximity beyond) const;

  // --- Lost holders ---
  // The connection to neighbour `peer` went. Returns what to take it back
  // as (proximity, and whether gossip or its bits named it complete) when
  // it is to be a candidate again at once: it was connected and delivered
  // something, or this is its first loss. Otherwise one that was connected
  // is due again after a back-off (retry_due).
  // REQUIRES: find(peer) != nullptr (call before remove).
  std::optional<CandidateList::Entry> lost_connection(TimePoint now, const PeerId& peer);
  // Appends the lost holders whose back-off ends by `now`, in id order
  // (they are no longer waiting).
  void retry_due(TimePoint now, std::vector<std::pair<PeerId, CandidateList::Entry>>& out);
  // When the next back-off ends (kTimeNever: none waits).
  TimePoint next_retry() const;

 private:
  struct LostHolder {
    int losses = 0;                   // in a row, with nothing delivered
    std::optional<TimePoint> retry_at;  // waiting to become a candidate again
    CandidateList::Entry known{Proximity::kRemote, false};
  };
  static constexpr Duration kReconnectBackoff = std::chrono::milliseconds(100);  // the second retry's wait
  static constexpr Duration kMaxReconnectBackoff = std::chrono::seconds(2);     // under the starvation timeout

  Neighbour& at(const PeerId& peer);
  // Applies `change` to `n`, keeping may_yet_show_ counted.
  template <typename Change>
  void recount_may_yet_show(Neighbour& n, Change&& change) {
    const bool before = n.may_yet_show();
    change(n);
    may_yet_show_ = may_yet_show_ - (before ? 1 : 0) + (n.may_yet_show() ? 1 : 0);
  }
  // Adds `delta` to the near-holder count of one shard, or of every shard
  // the neighbour's bits hold.
  void count_holder(const Neighbour& n, ShardIndex shard, int delta);
  void count_holdings(const Neighbour& n, int delta);

  core::SplitMix64 rng_;
  CandidateList candidates_;  // known holders not connected
  std::set<PeerId> banned_;
  Neighbours neighbours_;
  std::vector<std::pair<const PeerId, Neighbour>*> schedule_order_;  // rebuilt when one comes or goes
  bool schedule_order_stale_ = true;
  // Holders whose connection closed before they delivered anything, again
  // and again (a holder whose every write fails, a file truncated under
  // it, is not reconnected hundreds of times a second). An entry goes
  // when gossip drops the holder.
  std::map<PeerId, LostHolder> lost_;
  std::size_t connecting_count_ = 0;  // neighbours with connecting set
  std::size_t may_yet_show_ = 0;      // neighbours for which may_yet_show holds
  std::size_t host_mates_ = 0;        // neighbours with proximity kSameHost
  // Per proximity (host, rack, dc, remote), per shard: the neighbours whose
  // bits hold it. Invariant: matches the neighbours' bits (checked in
  // holders_at in debug builds).
  std::array<std::vector<std::uint16_t>, 4> near_holders_;
};

}  // namespace tensorhub::swarm
