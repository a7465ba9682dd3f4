#include "swarm/neighbourhood.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

Neighbourhood::Neighbourhood(std::uint32_t shard_count, std::size_t max_candidates, std::uint64_t seed)
    : rng_(seed), candidates_(std::max<std::size_t>(max_candidates, 4)) {
  for (auto& counts : near_holders_) counts.assign(shard_count, 0);
}

// --------------------------------------------------------------------------
// Candidates

bool Neighbourhood::add_candidate(const PeerId& peer, Proximity proximity, bool complete) {
  if (banned_.count(peer) || neighbours_.count(peer)) return false;
  candidates_.add(peer, CandidateList::Entry{proximity, complete}, rng_);
  return true;
}

void Neighbourhood::forget(const PeerId& peer) {
  lost_.erase(peer);
  candidates_.take(peer);
}

std::optional<PeerId> Neighbourhood::nearest_candidate(bool complete_only, bool drawn) {
  return candidates_.nearest(complete_only, drawn ? &rng_ : nullptr);
}

PeerId Neighbourhood::any_candidate() { return candidates_.any(rng_); }

// --------------------------------------------------------------------------
// Neighbours

void Neighbourhood::connect(const PeerId& chosen, TimePoint connect_deadline) {
  const std::optional<CandidateList::Entry> candidate = candidates_.take(chosen);
  assert(candidate);
  Neighbour n;
  n.proximity = candidate->proximity;
  n.complete_source = candidate->complete;
  n.connecting = true;
  n.connect_deadline = connect_deadline;
  ++connecting_count_;
  ++may_yet_show_;
  if (n.proximity == Proximity::kSameHost) ++host_mates_;
  const bool added = neighbours_.emplace(chosen, std::move(n)).second;
  schedule_order_stale_ = true;
  assert(added);  // a candidate is never a neighbour (add_candidate refuses them)
  (void)added;
}

Neighbour Neighbourhood::remove(const PeerId& peer, bool ban) {
  auto it = neighbours_.find(peer);
  assert(it != neighbours_.end());
  if (it->second.has_bits) count_holdings(it->second, -1);
  may_yet_show_ -= it->second.may_yet_show();
  if (it->second.connecting) --connecting_count_;
  if (it->second.proximity == Proximity::kSameHost) --host_mates_;
  Neighbour gone = std::move(it->second);
  neighbours_.erase(it);
  schedule_order_stale_ = true;
  if (ban) banned_.insert(peer);
  return gone;
}

const Neighbour* Neighbourhood::find(const PeerId& peer) const {
  auto it = neighbours_.find(peer);
  return it == neighbours_.end() ? nullptr : &it->second;
}

Neighbour& Neighbourhood::at(const PeerId& peer) {
  auto it = neighbours_.find(peer);
  assert(it != neighbours_.end());
  return it->second;
}

void Neighbourhood::set_connected(const PeerId& peer) {
  Neighbour& n = at(peer);
  if (n.connecting) --connecting_count_;
  recount_may_yet_show(n, [](Neighbour& m) {
    m.connecting = false;
    m.connected = true;
  });
}

void Neighbourhood::set_super_seed(const PeerId& peer) {
  recount_may_yet_show(at(peer), [](Neighbour& m) { m.super_seed = true; });
}

void Neighbourhood::set_choked(const PeerId& peer, bool choked) { at(peer).choked = choked; }

void Neighbourhood::set_bits(const PeerId& peer, const core::Bitfield& bits) {
  Neighbour& n = at(peer);
  assert(bits.size() == near_holders_[0].size());
  if (n.has_bits) count_holdings(n, -1);
  n.bits = bits;
  recount_may_yet_show(n, [](Neighbour& m) { m.has_bits = true; });
  n.holds_all = n.bits.all();
  count_holdings(n, +1);
}

bool Neighbourhood::add_have(const PeerId& peer, ShardIndex shard) {
  Neighbour& n = at(peer);
  if (!n.has_bits) {
    n.bits = core::Bitfield(near_holders_[0].size());
    recount_may_yet_show(n, [](Neighbour& m) { m.has_bits = true; });
  }
  if (n.bits.test(shard.value)) return false;
  n.bits.set(shard.value);
  n.holds_all = n.bits.all();
  count_holder(n, shard, +1);
  return true;
}

bool Neighbourhood::drop_have(const PeerId& peer, ShardIndex shard) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || !it->second.holds(shard)) return false;
  it->second.bits.reset(shard.value);
  count_holder(it->second, shard, -1);
  return true;
}

int Neighbourhood::note_bad_shard(const PeerId& peer) { return ++at(peer).bad_shards; }

void Neighbourhood::note_bytes(const PeerId& peer, std::uint64_t bytes) { at(peer).bytes += bytes; }

const std::vector<std::pair<const PeerId, Neighbour>*>& Neighbourhood::schedule_order() {
  if (schedule_order_stale_) {
    schedule_order_.clear();
    for (auto& entry : neighbours_) schedule_order_.push_back(&entry);
    // Nearest first; equals in id order (the map's, kept by the stable sort).
    std::stable_sort(schedule_order_.begin(), schedule_order_.end(),
                     [](const auto* a, const auto* b) { return a->second.proximity < b->second.proximity; });
    schedule_order_stale_ = false;
  }
  return schedule_order_;
}

std::size_t Neighbourhood::slot_sources() const {
  std::size_t count = 0;
  for (const auto& [peer, n] : neighbours_) {
    if (n.connected && !n.choked && !n.super_seed && n.proximity != Proximity::kSameHost) ++count;
  }
  return count;
}

bool Neighbourhood::pulls_across_wan() const {
  return std::any_of(neighbours_.begin(), neighbours_.end(), [](const auto& entry) {
    return entry.second.proximity == Proximity::kRemote && !entry.second.super_seed;
  });
}

// --------------------------------------------------------------------------
// Counts

std::size_t Neighbourhood::may_yet_show_count() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  assert(may_yet_show_ == static_cast<std::size_t>(std::count_if(
                              neighbours_.begin(), neighbours_.end(), [](const auto& e) { return e.second.may_yet_show(); })));
#endif
  return may_yet_show_;
}

void Neighbourhood::count_holder(const Neighbour& n, ShardIndex shard, int delta) {
  auto& count = near_holders_[static_cast<std::size_t>(n.proximity)][shard.value];
  assert(delta > 0 || count > 0);
  count = static_cast<std::uint16_t>(count + delta);
}

void Neighbourhood::count_holdings(const Neighbour& n, int delta) {
  for (std::size_t s = n.bits.find_next(0, true); s < n.bits.size(); s = n.bits.find_next(s + 1, true)) {
    count_holder(n, ShardIndex{static_cast<std::uint32_t>(s)}, delta);
  }
}

std::size_t Neighbourhood::holders_at(ShardIndex shard, Proximity proximity) const {
  const std::size_t counted = near_holders_[static_cast<std::size_t>(proximity)][shard.value];
#ifdef TENSORHUB_DEBUG_INVARIANTS
  const auto scanned = std::count_if(neighbours_.begin(), neighbours_.end(), [&](const auto& entry) {
    return entry.second.proximity == proximity && entry.second.holds(shard);
  });
  assert(counted == static_cast<std::size_t>(scanned));
#endif
  return counted;
}

bool Neighbourhood::held_within(ShardIndex shard, Proximity beyond) const {
  for (std::size_t p = 0; p < static_cast<std::size_t>(beyond); ++p) {
    if (holders_at(shard, static_cast<Proximity>(p)) != 0) return true;
  }
  return false;
}

// --------------------------------------------------------------------------
// Lost holders

std::optional<CandidateList::Entry> Neighbourhood::lost_connection(TimePoint now, const PeerId& peer) {
  // The connection went, not the peer (gossip says that: forget), so it is
  // a holder to come back to. Gossip names a holder again only when its
  // record changes, and a complete one's never does: a fetcher whose
  // neighbours closed on it (they had declared it dead while its link was
  // down) was left with nobody to ask.
  const Neighbour& n = at(peer);
  LostHolder& lost = lost_[peer];
  lost.losses = n.bytes != 0 ? 1 : lost.losses + 1;
  if (!n.connected) return std::nullopt;
  lost.known = CandidateList::Entry{n.proximity, n.complete_source || n.holds_all};
  if (lost.losses <= 1) return lost.known;
  const int doublings = std::min(lost.losses - 2, 5);
  lost.retry_at = now + std::min<Duration>(kReconnectBackoff * (1 << doublings), kMaxReconnectBackoff);
  return std::nullopt;
}

void Neighbourhood::retry_due(TimePoint now, std::vector<std::pair<PeerId, CandidateList::Entry>>& out) {
  for (auto& [peer, lost] : lost_) {
    if (lost.retry_at && now >= *lost.retry_at) {
      lost.retry_at.reset();
      out.emplace_back(peer, lost.known);
    }
  }
}

TimePoint Neighbourhood::next_retry() const {
  TimePoint t = kTimeNever;
  for (const auto& [peer, lost] : lost_) {
    if (lost.retry_at) t = std::min(t, *lost.retry_at);
  }
  return t;
}

}  // namespace tensorhub::swarm
