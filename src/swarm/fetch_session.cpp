#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>
#include <limits>

namespace tensorhub::swarm {

FetchSession::FetchSession(ShardLayout layout, core::Bitfield have, Location self, PeerId self_id,
                           FetchConfig config, std::uint64_t seed, TimePoint now)
    : layout_(layout),
      have_(std::move(have)),
      self_(std::move(self)),
      self_id_(self_id),
      config_(config),
      rng_(seed),
      picker_(layout.shard_count(), seed ^ 0x9e3779b97f4a7c15ull),
      candidates_(std::max<std::size_t>(config.max_candidates, 4)) {
  assert(have_.size() == layout_.shard_count());
  for (auto& counts : near_holders_) counts.assign(layout_.shard_count(), 0);
  config_.endgame_duplicates = std::clamp<std::size_t>(config_.endgame_duplicates, 1, kMaxRequestsPerBlock);
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    const ShardIndex shard{s};
    if (have_.test(s)) {
      picker_.drop(shard);
    } else {
      unrequested_ += layout_.block_count(shard);
    }
  }
  if (have_.all()) {
    finish(Status::ok());
    return;
  }
  // Start the starvation clock now: if no candidate ever appears, no event
  // would run schedule() and the fetch would wait forever.
  schedule(now);
}

// --------------------------------------------------------------------------
// Neighbours

void FetchSession::add_candidate(TimePoint now, const PeerId& peer, Proximity proximity, bool complete) {
  if (done_ || banned_.count(peer) || neighbours_.count(peer)) return;
  candidates_.add(peer, CandidateList::Entry{proximity, complete}, rng_);
  starved_since_.reset();
  // Connect at the next timeout (due now), not at once: holders arrive in
  // bursts (a fetch starting, a gossip round, a publication), and choosing
  // after the whole burst lets the nearest win; connecting per candidate
  // would fill the neighbourhood with whoever is named first.
  if (!connect_due_) connect_due_ = now;
}

void FetchSession::remove_candidate(TimePoint now, const PeerId& peer) {
  candidates_.take(peer);
  if (neighbours_.count(peer)) lose_neighbour(now, peer, /*ban=*/false, "the peer left the swarm");
  schedule(now);
}

void FetchSession::connect_to(TimePoint now, const PeerId& chosen) {
  const std::optional<CandidateList::Entry> candidate = candidates_.take(chosen);
  assert(candidate);
  Neighbour n;
  n.proximity = candidate->proximity;
  n.complete_source = candidate->complete;
  n.connecting = true;
  ++connecting_count_;
  ++may_yet_show_;
  n.connect_deadline = now + config_.connect_timeout;
  if (n.proximity == Proximity::kSameHost) ++host_mates_;
  const bool added = neighbours_.emplace(chosen, std::move(n)).second;
  schedule_order_stale_ = true;
  assert(added);  // a candidate is never a neighbour (add_candidate refuses them)
  (void)added;
  actions_.push(ConnectAction{chosen});
}

void FetchSession::connect_more(TimePoint now) {
  while (!candidates_.empty()) {
    if (host_mates_ < kMaxHostMates && candidates_.any_at(Proximity::kSameHost)) {
      // Host mates are never refused, even past the limit: their blocks
      // never cross the NIC, which is what the limit guards, and gossip may
      // name them after far peers have taken every slot.
      connect_to(now, *candidates_.nearest(/*complete_only=*/false));  // a mate: the nearest there is
      continue;
    }
    if (neighbours_.size() >= config_.max_neighbours) break;
    const std::size_t free_slots = config_.max_neighbours - neighbours_.size();
    // The last slots go to random candidates, for diversity.
    connect_to(now, free_slots <= config_.random_neighbours ? candidates_.any(rng_)
                                                            : *candidates_.nearest(/*complete_only=*/false));
  }
  // At least one neighbour that holds everything, when gossip names one,
  // even past the limit: nearest-first can otherwise fill every slot with
  // fetchers that have nothing yet while the publisher is nobody's
  // neighbour, and nothing would ever move.
  if (candidates_.complete_count() == 0) return;
  const bool have_complete = std::any_of(neighbours_.begin(), neighbours_.end(), [](const auto& entry) {
    return entry.second.complete_source || entry.second.holds_all;
  });
  if (!have_complete) {
    if (auto seed = candidates_.nearest(/*complete_only=*/true)) connect_to(now, *seed);
  }
}

void FetchSession::on_connected(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  if (it->second.connecting) --connecting_count_;
  recount_may_yet_show(it->second, [&](Neighbour& n) {
    n.connecting = false;
    n.connected = true;
  });
  it->second.choked = config_.starts_choked;
  schedule(now);
}

void FetchSession::on_super_seed(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  recount_may_yet_show(it->second, [](Neighbour& n) { n.super_seed = true; });
  schedule(now);
}

void FetchSession::on_choked(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || it->second.choked) return;
  it->second.choked = true;
  release_requests_of(peer);  // a choking holder drops what we asked
  withdraw_stranded_claims();
  schedule(now);
}

void FetchSession::on_unchoked(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  it->second.choked = false;
  schedule(now);
}

std::size_t FetchSession::slot_sources() const {
  std::size_t n = 0;
  for (const auto& [peer, nb] : neighbours_) {
    if (nb.connected && !nb.choked && !nb.super_seed && nb.proximity != Proximity::kSameHost) ++n;
  }
  return n;
}

bool FetchSession::pulls_across_wan() const {
  return std::any_of(neighbours_.begin(), neighbours_.end(), [](const auto& entry) {
    const Neighbour& n = entry.second;
    return n.proximity == Proximity::kRemote && !n.super_seed;
  });
}

void FetchSession::on_connect_failed(TimePoint now, const PeerId& peer) {
  if (neighbours_.count(peer)) lose_neighbour(now, peer, /*ban=*/false, "");
  schedule(now);
}

void FetchSession::on_disconnected(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it != neighbours_.end()) {
    // The connection went, not the peer (gossip says that: remove_candidate),
    // so it is a holder to come back to. Gossip names a holder again only
    // when its record changes, and a complete one's never does: a fetcher
    // whose neighbours closed on it (they had declared it dead while its
    // link was down) was left with nobody to ask.
    const bool was_connected = it->second.connected;
    const CandidateList::Entry known{it->second.proximity, it->second.complete_source || it->second.holds_all};
    lose_neighbour(now, peer, /*ban=*/false, "");
    if (was_connected) add_candidate(now, peer, known.proximity, known.complete);
  }
  schedule(now);
}

void FetchSession::lose_neighbour(TimePoint now, const PeerId& peer, bool ban, const std::string& reason) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  release_requests_of(peer);
  drop_claims_of(peer);
  if (it->second.has_bits) {
    picker_.remove_peer(it->second.bits);
    count_holdings(it->second, -1);
  }
  in_flight_total_ -= it->second.in_flight;
  std::erase(busy_, &it->second);
  may_yet_show_ -= may_yet_show(it->second);
  if (it->second.connecting) --connecting_count_;
  if (it->second.proximity == Proximity::kSameHost) --host_mates_;
  const bool beyond_host = it->second.proximity != Proximity::kSameHost;
  neighbours_.erase(it);
  if (beyond_host) withdraw_stranded_claims();
  schedule_order_stale_ = true;
  if (ban) banned_.insert(peer);
  if (!reason.empty()) actions_.push(DisconnectAction{peer, reason});
  (void)now;
}

void FetchSession::release_neighbour(TimePoint now, const PeerId& peer) {
  lose_neighbour(now, peer, /*ban=*/false, /*reason=*/"");
  actions_.push(ReleaseAction{peer});
}

void FetchSession::on_bitfield(TimePoint now, const PeerId& peer, const core::Bitfield& bits) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  Neighbour& n = it->second;
  if (bits.size() != layout_.shard_count()) {
    lose_neighbour(now, peer, /*ban=*/true, "its bitfield has the wrong size");
    schedule(now);
    return;
  }
  if (n.has_bits) {
    picker_.remove_peer(n.bits);
    count_holdings(n, -1);
  }
  n.bits = bits;
  recount_may_yet_show(n, [](Neighbour& m) { m.has_bits = true; });
  n.holds_all = n.bits.all();
  picker_.add_peer(n.bits);
  count_holdings(n, +1);
  schedule(now);
}

void FetchSession::on_have(TimePoint now, const PeerId& peer, ShardIndex shard) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || shard.value >= layout_.shard_count()) return;
  Neighbour& n = it->second;
  if (!n.has_bits) {
    n.bits = core::Bitfield(layout_.shard_count());
    recount_may_yet_show(n, [](Neighbour& m) { m.has_bits = true; });
  }
  if (auto claim = mate_claims_.find(shard.value); claim != mate_claims_.end() && claim->second.peer == peer) {
    mate_claims_.erase(claim);
  }
  if (!n.bits.test(shard.value)) {
    n.bits.set(shard.value);
    n.holds_all = n.bits.all();
    picker_.increment(shard);
    count_holder(n, shard, +1);
  }
  starved_since_.reset();
  if (done_ || have_.test(shard.value)) return;  // nothing new to ask anyone for
  // Only the sender can be asked for more. News of a holder never lets
  // another neighbour give what it could not: each rule of allowed_from
  // forbids more as holders appear (a mate holding the shard, a serving
  // peer holding what a super-seed would give), and a mate that now holds
  // everything gives all of it itself. A HAVE goes to every neighbour and
  // requester of the version, so a full schedule per HAVE would cost
  // O(neighbours) per HAVE. Endgame duplicates due for others wait for
  // their timer, which last_scheduled_ still sets.
  fill(now, peer, n);
  check_starvation(now);
}

// --------------------------------------------------------------------------
// Requests

FetchSession::Shard& FetchSession::shard_state(ShardIndex s) {
  auto it = shards_.find(s.value);
  if (it != shards_.end()) return it->second;
  Shard shard;
  const std::uint32_t blocks = layout_.block_count(s);
  shard.received = core::Bitfield(blocks);
  shard.requests.resize(blocks);
  shard.sources.resize(blocks);
  shard.started = true;
  return shards_.emplace(s.value, std::move(shard)).first->second;
}

void FetchSession::count_holder(const Neighbour& n, ShardIndex shard, int delta) {
  auto& count = near_holders_[static_cast<std::size_t>(n.proximity)][shard.value];
  assert(delta > 0 || count > 0);
  count = static_cast<std::uint16_t>(count + delta);
}

void FetchSession::count_holdings(const Neighbour& n, int delta) {
  for (std::size_t s = n.bits.find_next(0, true); s < n.bits.size(); s = n.bits.find_next(s + 1, true)) {
    count_holder(n, ShardIndex{static_cast<std::uint32_t>(s)}, delta);
  }
}

std::size_t FetchSession::holders_at(ShardIndex shard, Proximity proximity) const {
  const std::size_t counted = near_holders_[static_cast<std::size_t>(proximity)][shard.value];
#ifdef TENSORHUB_DEBUG_INVARIANTS
  const auto scanned = std::count_if(neighbours_.begin(), neighbours_.end(), [&](const auto& entry) {
    const Neighbour& n = entry.second;
    return n.proximity == proximity && n.has_bits && n.bits.test(shard.value);
  });
  assert(counted == static_cast<std::size_t>(scanned));
#endif
  return counted;
}

bool FetchSession::held_within(ShardIndex shard, Proximity beyond) const {
  for (std::size_t p = 0; p < static_cast<std::size_t>(beyond); ++p) {
    if (holders_at(shard, static_cast<Proximity>(p)) != 0) return true;
  }
  return false;
}

std::size_t FetchSession::in_flight_total() const {
#ifdef TENSORHUB_DEBUG_INVARIANTS
  std::size_t total = 0;
  for (const auto& [id, n] : neighbours_) total += n.in_flight;
  assert(total == in_flight_total_);
#endif
  return in_flight_total_;
}

std::size_t FetchSession::wan_in_flight() const {
  std::size_t total = 0;
  for (const auto& [id, n] : neighbours_) {
    if (n.proximity == Proximity::kRemote) total += n.in_flight;
  }
  return total;
}

bool FetchSession::held_by_a_serving_peer(ShardIndex shard, bool count_remote) const {
  for (const auto& [id, n] : neighbours_) {
    if (!count_remote && n.proximity == Proximity::kRemote) continue;
    if (!n.super_seed && n.connected && !n.choked && n.has_bits && n.bits.test(shard.value)) return true;
  }
  return false;
}

namespace {

std::uint64_t rendezvous_score(const PeerId& peer, ShardIndex shard) {
  std::uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = (x << 8) | peer.bytes[static_cast<std::size_t>(i)];
  x ^= (std::uint64_t{shard.value} + 1) * 0x9e3779b97f4a7c15ull;
  // SplitMix64's finalizer.
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Whether `a` rather than `b` brings `shard` across, when both could.
bool outranks(const PeerId& a, const PeerId& b, ShardIndex shard) {
  return rendezvous_score(a, shard) > rendezvous_score(b, shard);
}

}  // namespace

bool FetchSession::share_is_mine(ShardIndex shard, Proximity beyond) const {
  // Over every fetching mate we know of (candidates too, not only
  // neighbours): a share among neighbours alone overlaps between fetchers,
  // and a shard crosses once per overlap.
  const std::uint64_t mine = rendezvous_score(self_id_, shard);
  for (const auto& [id, n] : neighbours_) {
    const bool fetching_mate = n.proximity < beyond && n.connected && !n.holds_all;
    if (fetching_mate && rendezvous_score(id, shard) > mine) return false;
  }
  bool outranked = false;
  for (std::size_t p = 0; p < static_cast<std::size_t>(beyond) && !outranked; ++p) {
    candidates_.for_each_partial_at(static_cast<Proximity>(p), [&](const PeerId& peer) {
      outranked = outranked || rendezvous_score(peer, shard) > mine;
    });
  }
  return !outranked;
}

bool FetchSession::left_to_a_mate(TimePoint now, ShardIndex shard) const {
  if (mate_claims_.empty()) return false;
  auto claim = mate_claims_.find(shard.value);
  if (claim == mate_claims_.end()) return false;
  if (shards_.count(shard.value) != 0 && outranks(self_id_, claim->second.peer, shard)) return false;
  return in_flight_total() != 0 || now - claim->second.since < config_.request_timeout;
}

void FetchSession::on_mate_fetching(TimePoint now, const PeerId& peer, ShardIndex shard) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end() || it->second.proximity != Proximity::kSameHost) return;
  if (shard.value >= layout_.shard_count() || have_.test(shard.value) || done_) return;
  auto [claim, added] = mate_claims_.try_emplace(shard.value, MateClaim{peer, now});
  // Two mates at once: the same one wins everywhere.
  if (!added && claim->second.peer != peer && outranks(peer, claim->second.peer, shard)) {
    claim->second = MateClaim{peer, now};
  }
  // We began it too, in the same instant (a HAVE or an unchoke reaches all
  // mates at once, and each picks the one new shard): the loser cancels
  // what it asked beyond the host, and gets the rest from the winner.
  auto begun = shards_.find(shard.value);
  if (begun == shards_.end() || !left_to_a_mate(now, shard)) return;
  bool yielded = false;
  for (std::uint32_t b = 0; b < begun->second.requests.size(); ++b) {
    std::vector<PeerId> beyond_host;
    for (const Request& r : begun->second.requests[b]) {
      auto n = neighbours_.find(r.peer);
      const bool over_nic = n != neighbours_.end() && n->second.proximity != Proximity::kSameHost &&
                            n->second.proximity != Proximity::kRemote;
      if (over_nic) beyond_host.push_back(r.peer);
    }
    for (const PeerId& holder : beyond_host) {
      drop_request(shard, BlockIndex{b}, holder);
      actions_.push(CancelAction{holder, shard, BlockIndex{b}});
      yielded = true;
    }
  }
  if (yielded) schedule(now);
}

void FetchSession::on_mate_not_fetching(TimePoint now, const PeerId& peer, ShardIndex shard) {
  auto claim = mate_claims_.find(shard.value);
  if (claim == mate_claims_.end() || claim->second.peer != peer) return;
  mate_claims_.erase(claim);
  schedule(now);
}

void FetchSession::withdraw_stranded_claims() {
  for (auto& [index, s] : shards_) {
    if (!s.claimed || s.verifying) continue;
    const bool reachable = std::any_of(neighbours_.begin(), neighbours_.end(), [&](const auto& entry) {
      const Neighbour& n = entry.second;
      return n.connected && !n.choked && n.proximity != Proximity::kSameHost && n.proximity != Proximity::kRemote &&
             n.has_bits && n.bits.test(index);
    });
    if (reachable) continue;
    s.claimed = false;  // claimed again when it is asked beyond the host again
    actions_.push(UnclaimAction{ShardIndex{index}});
  }
}

void FetchSession::drop_claims_of(const PeerId& peer) {
  std::erase_if(mate_claims_, [&](const auto& entry) { return entry.second.peer == peer; });
}

// The source rules, in the order docs/swarm-policy.md states them. Each
// shared link (a node's NIC, the WAN) should carry each shard about once.
bool FetchSession::allowed_from(TimePoint now, const Neighbour& n, ShardIndex shard) const {
  if (!n.has_bits || !n.bits.test(shard.value)) return false;
  // 1. A super-seed's uplink is for first copies: no shard a serving peer
  //    can give us. A remote holder counts only against a remote seed, so
  //    that this rule and rule 3 never defer to each other.
  if (n.super_seed && held_by_a_serving_peer(shard, /*count_remote=*/n.proximity == Proximity::kRemote)) return false;
  // 2. A host mate may give anything: its blocks cross no shared link.
  if (n.proximity == Proximity::kSameHost) return true;
  // 3. Across a shared link, only what no mate on our side of it holds
  //    (the rack's peers for the NIC, the datacenter's for the WAN).
  const Proximity mates = n.proximity == Proximity::kRemote ? Proximity::kRemote : Proximity::kSameRack;
  if (held_within(shard, mates)) return false;
  // 4. Within the datacenter: not what a host mate claims to bring across
  //    the NIC (its kFetching), unless the claim has lapsed.
  if (n.proximity != Proximity::kRemote) return !left_to_a_mate(now, shard);
  // Across the WAN:
  // 5. A shard begun across it is finished by whoever began it.
  const bool begun_across = shards_.count(shard.value) != 0;
  // 6. A shard that a connected complete source holds is asked of that
  //    source alone: only a complete source (a publisher) defers second
  //    copies into our datacenter to their carrier; other holders defer only
  //    their own duplicates.
  if (!begun_across && !n.complete_source) {
    for (const auto& [id, other] : neighbours_) {
      if (other.proximity == Proximity::kRemote && other.complete_source && other.connected && other.has_bits &&
          other.bits.test(shard.value)) {
        return false;
      }
    }
  }
  // 7. Only our rendezvous share of the shards, except a shard that one
  //    complete source alone shows us (it defers the other askers itself),
  //    and except when we have nothing in flight: then at once from a
  //    complete source, from another holder after a request timeout (the
  //    mate whose share it is may not be bringing it).
  const bool sole_holder_across = holders_at(shard, Proximity::kRemote) == 1 && n.complete_source;
  const bool idle = in_flight_total() == 0 &&
                    (n.complete_source || (idle_since_ && now >= *idle_since_ + config_.request_timeout));
  if (!begun_across && !sole_holder_across && !idle && !share_is_mine(shard, mates)) return false;
  // 8. Not while the holder says a mate carries it into our datacenter (kDeferred).
  if (auto d = wan_deferred_until_.find(shard.value); d != wan_deferred_until_.end() && now < d->second) return false;
  // 9. At most max_wan_requests in flight across the WAN.
  return wan_in_flight() < config_.max_wan_requests;
}

void FetchSession::send_request(TimePoint now, const PeerId& id, Neighbour& n, ShardIndex shard, BlockIndex block) {
  Shard& s = shard_state(shard);
  // Only shards asked within the datacenter are claimed: one begun across
  // the WAN may be deferred to a carrier elsewhere in the datacenter, and
  // mates that left it to us would wait for the claim to lapse.
  if (!s.claimed && n.proximity != Proximity::kSameHost && n.proximity != Proximity::kRemote) {
    s.claimed = true;
    actions_.push(ClaimAction{shard});
  }
  auto& requests = s.requests[block.value];
  if (requests.empty()) --unrequested_;
  requests.push_back(Request{id, now});
  recent_requests_.push_back(SentRequest{now, shard, block, id});
  if (n.in_flight == 0) {
    n.first_sent = now;
    busy_.push_back(&n);
  } else {
    n.first_sent = std::min(n.first_sent, now);  // kTimeNever while all it has in flight lands
  }
  ++n.in_flight;
  ++in_flight_total_;
  actions_.push(RequestAction{id, shard, block, layout_.shard_offset(shard) + std::uint64_t{block.value} * layout_.block_size,
                                   layout_.block_length(shard, block)});
}

bool FetchSession::request_next(TimePoint now, const PeerId& id, Neighbour& n) {
  // 1. Shards already started: finish what is begun before starting more.
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    if (s.verifying || !allowed_from(now, n, shard)) continue;
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      if (!s.received.test(b) && s.requests[b].empty()) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  // 2. A new shard, rarest first.
  auto picked = picker_.pick_one(n.bits, [&](ShardIndex s) { return !shards_.count(s.value) && allowed_from(now, n, s); });
  if (picked) {
    send_request(now, id, n, *picked, BlockIndex{0});
    return true;
  }
  // 3. Endgame: every missing block is in flight; ask a second holder.
  if (unrequested_ != 0) return false;
  endgame_ = true;
  for (auto& [index, s] : shards_) {
    const ShardIndex shard{index};
    if (s.verifying || !allowed_from(now, n, shard)) continue;
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      auto& requests = s.requests[b];
      if (s.received.test(b) || requests.size() >= config_.endgame_duplicates) continue;
      const bool already = std::any_of(requests.begin(), requests.end(), [&](const Request& r) { return r.peer == id; });
      const bool overdue = std::all_of(requests.begin(), requests.end(),
                                       [&](const Request& r) { return !r.landing && now - r.sent >= block_rtt_ * 2; });
      if (!already && overdue) {
        send_request(now, id, n, shard, BlockIndex{b});
        return true;
      }
    }
  }
  return false;
}

void FetchSession::fill(TimePoint now, const PeerId& id, Neighbour& n) {
  while (n.connected && !n.choked && n.has_bits && n.in_flight < config_.pipeline_blocks && request_next(now, id, n)) {
  }
}

void FetchSession::schedule(TimePoint now) {
  if (done_) return;
  last_scheduled_ = now;
  if (in_flight_total_ != 0) {
    idle_since_.reset();
  } else if (!idle_since_) {
    idle_since_ = now;
  }
  // What is overdue now is considered below (request_next); what left
  // flight never will be.
  while (!recent_requests_.empty()) {
    const SentRequest& r = recent_requests_.front();
    if (r.sent + block_rtt_ * 2 > now && still_in_flight(r)) break;
    recent_requests_.pop_front();
  }
  connect_more(now);
  // Nearest neighbours choose first, so they take what they can give
  // (equals in id order: the map's order, kept by the stable sort).
  if (schedule_order_stale_) {
    schedule_order_.clear();
    for (auto& entry : neighbours_) schedule_order_.push_back(&entry);
    std::stable_sort(schedule_order_.begin(), schedule_order_.end(),
                     [](const auto* a, const auto* b) { return a->second.proximity < b->second.proximity; });
    schedule_order_stale_ = false;
  }
  for (auto* entry : schedule_order_) fill(now, entry->first, entry->second);
  check_starvation(now);
  keep_slot_share(now);
}

void FetchSession::set_slot_share(TimePoint now, std::size_t share) {
  slot_share_ = share;
  keep_slot_share(now);
}

void FetchSession::keep_slot_share(TimePoint now) {
  std::erase_if(slot_probes_, [&](const auto& probe) {
    auto n = neighbours_.find(probe.first);
    return n == neighbours_.end() || (n->second.connected && !n->second.choked);
  });
  // Slots beyond the host, and whether we wait for more. A fetch that
  // pulls across the WAN is paced by the WAN, not by slots; and its
  // neighbours in the datacenter decide who carries what across
  // (share_is_mine), which probes coming and going would unsettle.
  std::size_t held = 0;
  bool waiting = false;
  for (const auto& [peer, n] : neighbours_) {
    if (n.proximity == Proximity::kSameHost || n.super_seed) continue;
    if (n.connecting || (n.connected && n.choked)) waiting = true;
    if (n.connected && !n.choked) ++held;
  }
  if (done_ || slot_share_ == 0 || pulls_across_wan()) {
    slot_hungry_since_.reset();
    return;
  }
  if (held > slot_share_ && in_flight_total_ != 0) {
    // Past the share: the slot with the fewest requests in flight goes back.
    const PeerId* surplus = nullptr;
    std::size_t fewest = std::numeric_limits<std::size_t>::max();
    for (const auto& [peer, n] : neighbours_) {
      if (!n.connected || n.choked || n.super_seed || n.proximity == Proximity::kSameHost) continue;
      if (n.in_flight < fewest) {
        fewest = n.in_flight;
        surplus = &peer;
      }
    }
    const PeerId handed_back = *surplus;
    release_neighbour(now, handed_back);
    --held;
  }
  if (config_.slot_probes == 0 || unrequested_ == 0 || held >= slot_share_ || !waiting || candidates_.empty()) {
    slot_hungry_since_.reset();
    return;
  }
  if (!slot_hungry_since_) {
    slot_hungry_since_ = now;
    return;
  }
  if (now < *slot_hungry_since_ + config_.slot_probe_after) return;
  slot_hungry_since_ = now;
  std::vector<PeerId> unanswered;
  for (const auto& [peer, since] : slot_probes_) {
    // One still connecting is kept: given up then, its holder would hear
    // our interest after the release and might grant a slot nobody uses.
    if (now >= since + config_.slot_probe_after && !neighbours_.at(peer).connecting) unanswered.push_back(peer);
  }
  for (const PeerId& peer : unanswered) {
    slot_probes_.erase(peer);
    release_neighbour(now, peer);
  }
  while (slot_probes_.size() < config_.slot_probes && !candidates_.empty()) {
    // Every other probe is drawn from the whole list, this side of the WAN.
    // The slots free at a moment can be a handful among a thousand peers
    // (each host offers as many as its peers may hold), and probing only
    // the nearest never finds them when they are in other racks.
    PeerId probe = *candidates_.nearest(/*complete_only=*/false, &rng_);
    if (probe_far_) {
      const PeerId far = candidates_.any(rng_);
      if (candidates_.find(far)->proximity != Proximity::kRemote) probe = far;
    }
    probe_far_ = !probe_far_;
    connect_to(now, probe);
    slot_probes_.emplace(probe, now);
  }
}

void FetchSession::drop_request(ShardIndex shard, BlockIndex block, const PeerId& peer) {
  auto it = shards_.find(shard.value);
  if (it == shards_.end()) return;
  auto n = neighbours_.find(peer);
  drop_request(it->second, block, peer, n == neighbours_.end() ? nullptr : &n->second);
}

void FetchSession::drop_request(Shard& s, BlockIndex block, const PeerId& peer, Neighbour* n) {
  auto& requests = s.requests[block.value];
  auto r = std::find_if(requests.begin(), requests.end(), [&](const Request& q) { return q.peer == peer; });
  if (r == requests.end()) return;
  requests.erase(r);
  if (n) one_less_in_flight(*n);
  if (requests.empty() && !s.received.test(block.value)) ++unrequested_;
}

void FetchSession::one_less_in_flight(const PeerId& peer) {
  if (auto n = neighbours_.find(peer); n != neighbours_.end()) one_less_in_flight(n->second);
}

void FetchSession::one_less_in_flight(Neighbour& n) {
  if (n.in_flight == 0) return;
  --in_flight_total_;
  if (--n.in_flight == 0) std::erase(busy_, &n);
}

void FetchSession::release_requests_of(const PeerId& peer) {
  for (auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) drop_request(ShardIndex{index}, BlockIndex{b}, peer);
  }
}

void FetchSession::audience_of_have(ShardIndex shard, const std::set<PeerId>& requesters, const std::set<PeerId>& sources,
                                    std::vector<PeerId>& out) const {
  out.clear();
  // Calls keep(peer, neighbour or nullptr) for each of `peers`, walking the
  // neighbours alongside.
  auto walk = [&](const std::set<PeerId>& peers, auto&& keep) {
    auto n = neighbours_.begin();
    for (const PeerId& peer : peers) {
      while (n != neighbours_.end() && n->first < peer) ++n;
      const Neighbour* known = n != neighbours_.end() && n->first == peer ? &n->second : nullptr;
      if (keep(known)) out.push_back(peer);
    }
  };
  walk(requesters, [&](const Neighbour* n) {
    const bool holds = n && !n->super_seed && n->has_bits && shard.value < n->bits.size() && n->bits.test(shard.value);
    return !holds;
  });
  const auto from_requesters = static_cast<std::ptrdiff_t>(out.size());
  walk(sources, [](const Neighbour* n) { return n && n->super_seed; });
  std::inplace_merge(out.begin(), out.begin() + from_requesters, out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

bool FetchSession::wants_block(ShardIndex shard, BlockIndex block) const {
  auto it = shards_.find(shard.value);
  return it != shards_.end() && block.value < it->second.requests.size() && !it->second.verifying &&
         !it->second.received.test(block.value);
}

void FetchSession::note_delivery(TimePoint now, const PeerId& peer) {
  if (auto n = neighbours_.find(peer); n != neighbours_.end()) note_delivery(now, n->second);
}

void FetchSession::note_delivery(TimePoint now, Neighbour& from) {
  if (from.last_delivery != TimePoint{}) from.delivery_gap += (std::min(now - from.last_delivery, config_.request_timeout * 8) - from.delivery_gap) / 8;
  from.last_delivery = now;
}

void FetchSession::on_block_superseded(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  note_delivery(now, peer);
  if (!shards_.count(shard.value) || block.value >= layout_.block_count(shard)) return;
  duplicate_bytes_ += layout_.block_length(shard, block);
  drop_request(shard, block, peer);  // a duplicate from endgame, or late
  schedule(now);
}

void FetchSession::on_block_landing(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  (void)now;
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || block.value >= it->second.requests.size()) return;
  if (Request* r = it->second.requests[block.value].find(peer)) r->landing = true;
}

void FetchSession::on_block(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  if (!wants_block(shard, block)) return on_block_superseded(now, peer, shard, block);
  // One lookup each of the shard and the sender (a block is most events).
  Shard& s = shards_.find(shard.value)->second;
  auto sender = neighbours_.find(peer);
  Neighbour* from = sender == neighbours_.end() ? nullptr : &sender->second;
  if (from) note_delivery(now, *from);
  for (const Request& r : s.requests[block.value]) {
    if (r.peer == peer) {
      // An exponentially weighted average, 1/8 per sample (as TCP's SRTT).
      block_rtt_ += (std::chrono::duration_cast<Duration>(now - r.sent) - block_rtt_) / 8;
    }
  }
  drop_request(s, block, peer, from);
  // Whether or not it was still asked of this peer, its bytes are here now.
  if (s.requests[block.value].empty()) {
    // drop_request counted it as unrequested again; it is received instead.
    --unrequested_;
  }
  const bool cancels_others = !s.requests[block.value].empty();
  for (const Request& other : s.requests[block.value]) {
    actions_.push(CancelAction{other.peer, shard, block});
    one_less_in_flight(other.peer);
  }
  s.requests[block.value].clear();
  s.received.set(block.value);
  s.sources[block.value] = peer;
  ++s.received_count;
  const std::uint32_t length = layout_.block_length(shard, block);
  bytes_received_ += length;
  if (from) {
    from->bytes += length;
    if (from->proximity == Proximity::kRemote) bytes_from_wan_ += length;
  }
  if (s.received_count == layout_.block_count(shard)) {
    s.verifying = true;
    actions_.push(VerifyAction{shard});
  }
  // Only the sender has a slot freed by this block, and the others had
  // nothing they were allowed to ask for, which a block's arrival does not
  // change, except: cancelled endgame duplicates free their holders' slots,
  // a block across the WAN frees WAN budget, and with nothing left in
  // flight a fetcher takes shards outside its share. A full schedule per
  // block would cost O(shards) per block.
  if (cancels_others || !from || from->proximity == Proximity::kRemote || in_flight_total_ == 0) {
    return schedule(now);
  }
  fill(now, peer, *from);
  check_starvation(now);
}

void FetchSession::on_block_refused(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // Whatever it claimed, it cannot give us this shard now.
  if (auto n = neighbours_.find(peer); n != neighbours_.end() && n->second.has_bits && n->second.bits.test(shard.value)) {
    n->second.bits.reset(shard.value);
    picker_.decrement(shard);
    count_holder(n->second, shard, -1);
  }
  schedule(now);
}

void FetchSession::on_block_deferred(TimePoint now, const PeerId& peer, ShardIndex shard, BlockIndex block) {
  drop_request(shard, block, peer);
  // A request_timeout: long enough for a mate's HAVE to come first, short
  // enough that a carrier that is not our neighbour (or has died) costs
  // little. Asking again is a message; the holder defers again while its
  // carrier is still at work.
  wan_deferred_until_[shard.value] = now + config_.request_timeout;
  schedule(now);
}

void FetchSession::on_verified(TimePoint now, ShardIndex shard, bool good) {
  auto it = shards_.find(shard.value);
  if (it == shards_.end() || !it->second.verifying) return;
  if (good) {
    shards_.erase(it);
    mate_claims_.erase(shard.value);
    have_.set(shard.value);
    picker_.drop(shard);
    actions_.push(AnnounceAction{shard});
    if (have_.all()) {
      finish(Status::ok());
      return;
    }
    schedule(now);
    return;
  }
  // A bad shard: discard it, penalize whoever sent its blocks, fetch it again.
  ++bad_shards_;
  std::set<PeerId> senders(it->second.sources.begin(), it->second.sources.end());
  unrequested_ += layout_.block_count(shard);
  shards_.erase(it);
  for (const PeerId& sender : senders) {
    auto n = neighbours_.find(sender);
    if (n == neighbours_.end()) continue;
    if (++n->second.bad_shards >= config_.max_bad_shards) {
      lose_neighbour(now, sender, /*ban=*/true,
                     "sent " + std::to_string(n->second.bad_shards) + " shards that failed verification");
    }
  }
  schedule(now);
}

// --------------------------------------------------------------------------
// Time

const FetchSession::Neighbour* FetchSession::find_neighbour(const PeerId& peer) const {
  auto n = neighbours_.find(peer);
  return n == neighbours_.end() ? nullptr : &n->second;
}

TimePoint FetchSession::deadline_of(TimePoint sent, const Neighbour* n) const {
  // A holder answers a connection's requests in order, and a busy one has a
  // queue: what counts is how long it has gone without delivering anything,
  // not how old this request is: a deadline per request re-asks blocks
  // whose answers are merely queued behind others, and both copies come.
  if (n == nullptr) return sent + config_.request_timeout;
  // Across the WAN the link is thinner and shared by every mate's flows, so a
  // healthy holder's gaps are longer.
  // And a holder that is merely slow (a thin or shared link) delivers at a
  // steady pace: it is given several of its usual gaps before it counts as
  // silent (without this, an unlabelled 200 Mbit/s link collapsed under
  // re-requests: 499 timeouts, 2x the version wasted).
  const Duration base = config_.request_timeout * (n->proximity == Proximity::kRemote ? 4 : 1);
  const Duration timeout = std::max(base, n->delivery_gap * 6);
  return std::max(sent, n->last_delivery) + timeout;
}

TimePoint FetchSession::first_request_deadline() const {
  TimePoint t = kTimeNever;
  for (const Neighbour* n : busy_) {
    if (n->first_sent != kTimeNever) t = std::min(t, deadline_of(n->first_sent, n));  // else: all landing
  }
#ifdef TENSORHUB_DEBUG_INVARIANTS
  for (const auto& [id, n] : neighbours_) {
    assert((n.in_flight != 0) == (std::count(busy_.begin(), busy_.end(), &n) == 1));
  }
  assert(busy_.size() <= neighbours_.size());
  // Every request's deadline is at or after its neighbour's (first_sent is
  // a lower bound on what is in flight to it).
  for (const auto& [index, s] : shards_) {
    for (const auto& requests : s.requests) {
      for (const Request& r : requests) {
        const Neighbour* n = find_neighbour(r.peer);
        assert(n != nullptr && n->in_flight != 0);
        assert(r.landing || (n->first_sent <= r.sent && t <= deadline_of(r.sent, n)));  // landing: no deadline
      }
    }
  }
#endif
  return t;
}

void FetchSession::refresh_first_sent() {
  for (auto& [id, n] : neighbours_) n.first_sent = kTimeNever;
  // Consecutive requests are mostly to one neighbour (a pipeline): one
  // lookup per run of them.
  const PeerId* looked_up = nullptr;
  Neighbour* neighbour = nullptr;
  for (const auto& [index, s] : shards_) {
    for (const auto& requests : s.requests) {
      for (const Request& r : requests) {
        if (r.landing) continue;  // no deadline
        if (looked_up == nullptr || !(*looked_up == r.peer)) {
          looked_up = &r.peer;
          auto it = neighbours_.find(r.peer);
          neighbour = it == neighbours_.end() ? nullptr : &it->second;
        }
        if (neighbour) neighbour->first_sent = std::min(neighbour->first_sent, r.sent);
      }
    }
  }
}

bool FetchSession::still_in_flight(const SentRequest& r) const {
  auto it = shards_.find(r.shard.value);
  if (it == shards_.end()) return false;
  const BlockRequests& requests = it->second.requests[r.block.value];
  return std::any_of(requests.begin(), requests.end(), [&](const Request& q) { return q.peer == r.peer && q.sent == r.sent; });
}

bool FetchSession::block_landing(const BlockRequests& requests) {
  return std::any_of(requests.begin(), requests.end(), [](const Request& q) { return q.landing; });
}

bool FetchSession::may_be_duplicated(const SentRequest& r) const {
  auto it = shards_.find(r.shard.value);
  if (it == shards_.end()) return false;
  const BlockRequests& requests = it->second.requests[r.block.value];
  return requests.size() < config_.endgame_duplicates && !block_landing(requests) && still_in_flight(r);
}

TimePoint FetchSession::next_endgame_duplicate() const {
  if (unrequested_ != 0) return kTimeNever;
  // The first one that may be duplicated is the earliest: the queue is in
  // the order sent.
  for (const SentRequest& r : recent_requests_) {
    const TimePoint overdue_at = r.sent + block_rtt_ * 2;
    if (overdue_at > last_scheduled_ && may_be_duplicated(r)) return overdue_at;
  }
  return kTimeNever;
}

void FetchSession::handle_timeout(TimePoint now) {
  if (done_) return;
  std::erase_if(wan_deferred_until_, [&](const auto& entry) { return entry.second <= now; });
  if (connect_due_ && now >= *connect_due_) connect_due_.reset();  // schedule() below connects
  std::vector<PeerId> stale;
  for (const auto& [id, n] : neighbours_) {
    if (n.connecting && now >= n.connect_deadline) stale.push_back(id);
  }
  for (const PeerId& id : stale) lose_neighbour(now, id, /*ban=*/false, "connect timed out");
  // Requests past their deadline go elsewhere; the slow peer is told to drop them.
  std::vector<std::tuple<ShardIndex, BlockIndex, PeerId>> expired;
  for (const auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      for (const Request& r : s.requests[b]) {
        if (!r.landing && now >= deadline_of(r.sent, find_neighbour(r.peer))) {
          expired.emplace_back(ShardIndex{index}, BlockIndex{b}, r.peer);
        }
      }
    }
  }
  requests_timed_out_ += expired.size();
  for (const auto& [shard, block, peer] : expired) {
    drop_request(shard, block, peer);
    actions_.push(CancelAction{peer, shard, block});
  }
  refresh_first_sent();
  schedule(now);
}

TimePoint FetchSession::next_timeout() const {
  TimePoint t = kTimeNever;
  if (done_) return t;
  if (connecting_count_ != 0) {
    for (const auto& [id, n] : neighbours_) {
      if (n.connecting) t = std::min(t, n.connect_deadline);
    }
  }
  t = std::min(t, first_request_deadline());
  t = std::min(t, next_endgame_duplicate());
  if (starved_since_) t = std::min(t, *starved_since_ + config_.starvation_timeout);
  if (swap_due_) t = std::min(t, *swap_due_);  // always later than when it was set
  if (connect_due_) t = std::min(t, *connect_due_);
  if (slot_hungry_since_) t = std::min(t, *slot_hungry_since_ + config_.slot_probe_after);
  if (idle_since_ && *idle_since_ + config_.request_timeout > last_scheduled_ && pulls_across_wan()) {
    t = std::min(t, *idle_since_ + config_.request_timeout);  // allowed_from's idle rule
  }
  for (const auto& [shard, until] : wan_deferred_until_) t = std::min(t, until);  // the expired are gone
  // With nothing in flight, when a mate's claim stops binding.
  if (in_flight_total_ == 0) {
    for (const auto& [shard, claim] : mate_claims_) {
      const TimePoint lapses = claim.since + config_.request_timeout;
      if (lapses > last_scheduled_) t = std::min(t, lapses);
    }
  }
  return t;
}

void FetchSession::clear_starvation() {
  starved_since_.reset();
  trade_since_.reset();
  swap_due_.reset();
}

void FetchSession::check_starvation(TimePoint now) {
  if (done_) return;
  // Some wanted shard no connected neighbour holds, with nobody left to ask?
  // Only the wanted shards of availability 0 are looked at, not every shard:
  // this runs after every block and every HAVE.
  std::optional<ShardIndex> orphan;
  for (const ShardIndex s : picker_.unavailable()) {
    if (!shards_.count(s.value)) {
      orphan = s;
      break;
    }
  }
  // A neighbour yet to say what it holds (or a super-seed, which shows
  // shards as it goes) may still have it.
#ifdef TENSORHUB_DEBUG_INVARIANTS
  assert(may_yet_show_ == static_cast<std::size_t>(std::count_if(
                              neighbours_.begin(), neighbours_.end(), [](const auto& e) { return may_yet_show(e.second); })));
#endif
  if (!orphan || may_yet_show_ != 0) {
    clear_starvation();
    return;
  }
  if (!candidates_.empty()) {
    // Nobody we are connected to has it: ask one more known holder, past
    // the limit if need be (complete ones first), rather than wait forever.
    if (neighbours_.size() < config_.max_neighbours + kExtraNeighbours) {
      clear_starvation();
      // Drawn, not the first in id order: gossip does not say which shards
      // a holder has, and with every fetcher asking the same holder first a
      // trainer rank that holds an eighth of the version could be nobody's
      // neighbour until the trade below.
      auto more = candidates_.nearest(/*complete_only=*/true, &rng_);
      connect_to(now, more ? *more : *candidates_.nearest(/*complete_only=*/false, &rng_));
      return;
    }
    // Past that too, once starved for a request_timeout: trade a neighbour
    // that holds nothing we want for a candidate, complete ones first, at
    // most every request_timeout / 4 (swap_due_ wakes us for it). Without
    // the trade, a holder of shards no neighbour has (a trainer rank's part)
    // could stay out of reach for good.
    if (!trade_since_) trade_since_ = now;
    const TimePoint due = std::max(*trade_since_ + config_.request_timeout, last_swap_ + config_.request_timeout / 4);
    if (now < due) {
      swap_due_ = due;
      return;
    }
    swap_due_ = now + config_.request_timeout / 4;  // the next try, whether or not this one trades
    auto holds_something_wanted = [&](const Neighbour& n) {
      for (std::uint32_t s = 0; s < n.bits.size(); ++s) {
        if (n.bits.test(s) && !have_.test(s)) return true;
      }
      return false;
    };
    for (auto it = neighbours_.rbegin(); it != neighbours_.rend(); ++it) {
      const Neighbour& n = it->second;
      if (n.in_flight != 0 || n.complete_source || n.super_seed || n.proximity == Proximity::kSameHost) continue;
      if (!n.has_bits || holds_something_wanted(n)) continue;  // it can still give us something
      const PeerId idle = it->first;
      last_swap_ = now;
      trade_since_ = now;  // a new neighbour: give it a request_timeout
      release_neighbour(now, idle);
      auto more = candidates_.nearest(/*complete_only=*/true, &rng_);
      connect_to(now, more ? *more : candidates_.any(rng_));
      return;
    }
    return;
  }
  // Neighbours still fetching may yet get it: give them a while.
  trade_since_.reset();
  swap_due_.reset();
  if (!starved_since_) starved_since_ = now;
  if (now - *starved_since_ >= config_.starvation_timeout) {
    finish(Status::unavailable("no reachable peer holds shard " + std::to_string(orphan->value) + " (bytes " +
                               std::to_string(layout_.shard_offset(*orphan)) + ".." +
                               std::to_string(layout_.shard_offset(*orphan) + layout_.shard_length(*orphan)) + ")"));
  }
}

void FetchSession::finish(Status status) {
  if (done_) return;
  done_ = true;
  recent_requests_.clear();
  for (auto& [index, s] : shards_) {
    for (std::uint32_t b = 0; b < s.requests.size(); ++b) {
      for (const Request& r : s.requests[b]) actions_.push(CancelAction{r.peer, ShardIndex{index}, BlockIndex{b}});
    }
  }
  actions_.push(DoneAction{std::move(status)});
}

std::optional<FetchAction> FetchSession::poll() {
  return actions_.poll();
}

FetchProgress FetchSession::progress() const {
  FetchProgress p;
  p.shards_total = layout_.shard_count();
  for (std::uint32_t s = 0; s < layout_.shard_count(); ++s) {
    if (have_.test(s)) {
      ++p.shards_verified;
      p.bytes_verified += layout_.shard_length(ShardIndex{s});
    }
  }
  p.bytes_received = bytes_received_;
  p.bytes_from_wan = bytes_from_wan_;
  p.neighbours = neighbours_.size();
  p.bad_shards = bad_shards_;
  p.requests_timed_out = requests_timed_out_;
  p.duplicate_bytes = duplicate_bytes_;
  p.endgame = endgame_;
  return p;
}

}  // namespace tensorhub::swarm
