#include "swarm/source_rules.hpp"

#include <algorithm>

#include "core/rng.hpp"

namespace tensorhub::swarm {

namespace {

std::uint64_t rendezvous_score(const PeerId& peer, ShardIndex shard) {
  std::uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = (x << 8) | peer.bytes[static_cast<std::size_t>(i)];
  x ^= (std::uint64_t{shard.value} + 1) * 0x9e3779b97f4a7c15ull;
  return core::mix64(x);
}

// Whether `a` rather than `b` brings `shard` across, when both could.
bool outranks(const PeerId& a, const PeerId& b, ShardIndex shard) {
  return rendezvous_score(a, shard) > rendezvous_score(b, shard);
}

}  // namespace

SourceRules::SourceRules(const PeerId& self, const FetchConfig& config, const Neighbourhood& neighbourhood,
                         const RequestTable& requests)
    : self_(self),
      request_timeout_(config.request_timeout),
      max_wan_requests_(config.max_wan_requests),
      neighbourhood_(neighbourhood),
      requests_(requests) {}

// The rules, in the order docs/swarm-policy.md states them.
bool SourceRules::allowed(TimePoint now, const Neighbour& n, ShardIndex shard, bool begun) const {
  if (!n.holds(shard)) return false;
  // 1. A super-seed's uplink is for first copies: no shard a serving peer
  //    can give us. A remote holder counts only against a remote seed, so
  //    that this rule and rule 3 never defer to each other.
  if (n.super_seed && held_by_a_serving_peer(shard, /*count_remote=*/n.proximity == Proximity::kRemote)) return false;
  // 2. A host mate may give anything: its blocks cross no shared link.
  if (n.proximity == Proximity::kSameHost) return true;
  // 3. Across a shared link, only what no mate on our side of it holds
  //    (the rack's peers for the NIC, the datacenter's for the WAN).
  const Proximity mates = n.proximity == Proximity::kRemote ? Proximity::kRemote : Proximity::kSameRack;
  if (neighbourhood_.held_within(shard, mates)) return false;
  // 4. Within the datacenter: not what a host mate claims to bring across
  //    the NIC (its kFetching), unless the claim has lapsed.
  if (n.proximity != Proximity::kRemote) return !left_to_a_mate(now, shard, begun);
  // Across the WAN:
  // 5. A shard begun across it is finished by whoever began it.
  // 6. A shard that a connected complete source holds is asked of that
  //    source alone: only a complete source (a publisher) defers second
  //    copies into our datacenter to their carrier; other holders defer only
  //    their own duplicates.
  if (!begun && !n.complete_source) {
    for (const auto& [id, other] : neighbourhood_.all()) {
      if (other.proximity == Proximity::kRemote && other.complete_source && other.connected && other.holds(shard)) {
        return false;
      }
    }
  }
  // 7. Only our rendezvous share of the shards, except a shard that one
  //    complete source alone shows us (it defers the other askers itself),
  //    and except when we have nothing in flight: then at once from a
  //    complete source, from another holder after a request timeout (the
  //    mate whose share it is may not be bringing it).
  const bool sole_holder_across = neighbourhood_.holders_at(shard, Proximity::kRemote) == 1 && n.complete_source;
  const bool idle = requests_.in_flight_total() == 0 &&
                    (n.complete_source || (idle_since_ && now >= *idle_since_ + request_timeout_));
  if (!begun && !sole_holder_across && !idle && !share_is_mine(shard, mates)) return false;
  // 8. Not while the holder says a mate carries it into our datacenter (kDeferred).
  if (auto d = wan_deferred_until_.find(shard.value); d != wan_deferred_until_.end() && now < d->second) return false;
  // 9. At most max_wan_requests in flight across the WAN.
  return requests_.in_flight_remote() < max_wan_requests_;
}

bool SourceRules::held_by_a_serving_peer(ShardIndex shard, bool count_remote) const {
  for (const auto& [id, n] : neighbourhood_.all()) {
    if (!count_remote && n.proximity == Proximity::kRemote) continue;
    if (!n.super_seed && n.connected && !n.choked && n.holds(shard)) return true;
  }
  return false;
}

bool SourceRules::share_is_mine(ShardIndex shard, Proximity beyond) const {
  // Over every fetching mate we know of (candidates too, not only
  // neighbours): a share among neighbours alone overlaps between fetchers,
  // and a shard crosses once per overlap.
  const std::uint64_t mine = rendezvous_score(self_, shard);
  for (const auto& [id, n] : neighbourhood_.all()) {
    const bool fetching_mate = n.proximity < beyond && n.connected && !n.holds_all;
    if (fetching_mate && rendezvous_score(id, shard) > mine) return false;
  }
  bool outranked = false;
  for (std::size_t p = 0; p < static_cast<std::size_t>(beyond) && !outranked; ++p) {
    neighbourhood_.candidates().for_each_partial_at(static_cast<Proximity>(p), [&](const PeerId& peer) {
      outranked = outranked || rendezvous_score(peer, shard) > mine;
    });
  }
  return !outranked;
}

// --------------------------------------------------------------------------
// Host mates' claims

void SourceRules::claim(TimePoint now, const PeerId& peer, ShardIndex shard) {
  auto [entry, added] = mate_claims_.try_emplace(shard.value, MateClaim{peer, now});
  // Two mates at once: the same one wins everywhere.
  if (!added && entry->second.peer != peer && outranks(peer, entry->second.peer, shard)) {
    entry->second = MateClaim{peer, now};
  }
}

bool SourceRules::unclaim(const PeerId& peer, ShardIndex shard) {
  auto entry = mate_claims_.find(shard.value);
  if (entry == mate_claims_.end() || entry->second.peer != peer) return false;
  mate_claims_.erase(entry);
  return true;
}

void SourceRules::forget_claim(ShardIndex shard) { mate_claims_.erase(shard.value); }

void SourceRules::forget_claims_of(const PeerId& peer) {
  std::erase_if(mate_claims_, [&](const auto& entry) { return entry.second.peer == peer; });
}

bool SourceRules::left_to_a_mate(TimePoint now, ShardIndex shard, bool begun) const {
  if (mate_claims_.empty()) return false;
  auto entry = mate_claims_.find(shard.value);
  if (entry == mate_claims_.end()) return false;
  if (begun && outranks(self_, entry->second.peer, shard)) return false;
  return requests_.in_flight_total() != 0 || now - entry->second.since < request_timeout_;
}

// --------------------------------------------------------------------------
// Time

void SourceRules::defer(ShardIndex shard, TimePoint until) { wan_deferred_until_[shard.value] = until; }

void SourceRules::expire_deferrals(TimePoint now) {
  std::erase_if(wan_deferred_until_, [&](const auto& entry) { return entry.second <= now; });
}

void SourceRules::note_schedule(TimePoint now) {
  if (requests_.in_flight_total() != 0) {
    idle_since_.reset();
  } else if (!idle_since_) {
    idle_since_ = now;
  }
}

void SourceRules::set_timers(core::TimerTable<FetchTimer>& t, TimePoint last_scheduled) const {
  if (idle_since_ && *idle_since_ + request_timeout_ > last_scheduled && neighbourhood_.pulls_across_wan()) {
    t.set(FetchTimer::kWanIdle, *idle_since_ + request_timeout_);  // rule 7's idle clause
  }
  for (const auto& [shard, until] : wan_deferred_until_) t.earliest(FetchTimer::kWanDeferral, until);  // the expired are gone
  if (requests_.in_flight_total() == 0) {
    for (const auto& [shard, entry] : mate_claims_) {
      const TimePoint lapses = entry.since + request_timeout_;
      if (lapses > last_scheduled) t.earliest(FetchTimer::kMateClaim, lapses);
    }
  }
}

}  // namespace tensorhub::swarm
