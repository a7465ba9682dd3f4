// FetchSession's neighbourhood: candidates, connections, bitfields and
// HAVEs, starvation and trades of neighbours.
#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

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

void FetchSession::retry_lost_holders(TimePoint now) {
  for (auto& [peer, lost] : lost_) {
    if (lost.retry_at && now >= *lost.retry_at) {
      lost.retry_at.reset();
      add_candidate(now, peer, lost.proximity, lost.complete);
    }
  }
}

void FetchSession::remove_candidate(TimePoint now, const PeerId& peer) {
  lost_.erase(peer);
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
  const bool remote = n.proximity == Proximity::kRemote;
  const bool added = neighbours_.emplace(chosen, std::move(n)).second;
  requests_.add_holder(chosen, remote);
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
  if (it != neighbours_.end() && !it->second.choked) {
    it->second.choked = true;
    release_requests_of(peer);  // a choking holder drops what we asked
    withdraw_stranded_claims();
    schedule(now);
  }
  slot_ended(peer);
}

void FetchSession::on_unchoked(TimePoint now, const PeerId& peer) {
  auto it = neighbours_.find(peer);
  if (it == neighbours_.end()) return;
  if (decline_slot(peer)) {
    ask_declined_again();  // when the slots we hold give us nothing to ask
    return;
  }
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
  requests_.connection_closed(peer);  // nothing answers what it was asked now
  auto it = neighbours_.find(peer);
  if (it != neighbours_.end()) {
    // The connection went, not the peer (gossip says that: remove_candidate),
    // so it is a holder to come back to. Gossip names a holder again only
    // when its record changes, and a complete one's never does: a fetcher
    // whose neighbours closed on it (they had declared it dead while its
    // link was down) was left with nobody to ask.
    const bool was_connected = it->second.connected;
    const CandidateList::Entry known{it->second.proximity, it->second.complete_source || it->second.holds_all};
    LostHolder& lost = lost_[peer];
    lost.losses = it->second.bytes != 0 ? 1 : lost.losses + 1;
    lose_neighbour(now, peer, /*ban=*/false, "");
    if (was_connected) {
      lost.proximity = known.proximity;
      lost.complete = known.complete;
      if (lost.losses <= 1) {
        add_candidate(now, peer, known.proximity, known.complete);
      } else {
        const int doublings = std::min(lost.losses - 2, 5);
        lost.retry_at = now + std::min<Duration>(kReconnectBackoff * (1 << doublings), kMaxReconnectBackoff);
      }
    }
  }
  schedule(now);
  slot_ended(peer);
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
  requests_.remove_holder(peer);
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
  // Its connection stays, and its holder answers what we asked: those
  // pieces still land, as any copy does.
  release_requests_of(peer, /*still_answered=*/true);
  lose_neighbour(now, peer, /*ban=*/false, /*reason=*/"");
  actions_.push(ReleaseAction{peer});
  slot_ended(peer);
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

const FetchSession::Neighbour* FetchSession::find_neighbour(const PeerId& peer) const {
  auto n = neighbours_.find(peer);
  return n == neighbours_.end() ? nullptr : &n->second;
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
  // A started shard counts too once nothing of it is in flight or being
  // verified: a fetch whose only holder left with every missing shard begun
  // would otherwise wait for ever.
  std::optional<ShardIndex> orphan;
  for (const ShardIndex s : picker_.unavailable()) {
    auto started = shards_.find(s.value);
    const bool idle = started == shards_.end() || (!started->second.verifying && !requests_.asked(s));
    if (idle) {
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
      if (requests_.in_flight(it->first) != 0 || n.complete_source || n.super_seed || n.proximity == Proximity::kSameHost) continue;
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
    // Holders that sent shards failing verification are the likely cause:
    // name them (the orphan's own sender first), not only the absence.
    std::string cause;
    if (auto bad = failed_senders_.find(orphan->value); bad != failed_senders_.end()) {
      cause = "; holder " + bad->second.short_hex() + " sent shard " + std::to_string(orphan->value) +
              " that failed verification" + (banned_.count(bad->second) ? ", and is asked no more" : "");
    } else if (!failed_senders_.empty()) {
      std::map<PeerId, std::size_t> by_sender;
      for (const auto& [shard, sender] : failed_senders_) ++by_sender[sender];
      std::size_t named = 0;
      for (const auto& [sender, count] : by_sender) {
        if (named++ == 3) {
          cause += "; and " + std::to_string(by_sender.size() - 3) + " more";
          break;
        }
        cause += "; holder " + sender.short_hex() + " sent " + std::to_string(count) +
                 " shard(s) that failed verification" + (banned_.count(sender) ? ", and is asked no more" : "");
      }
    } else if (bad_shards_ > 0) {
      cause = "; " + std::to_string(bad_shards_) + " shard(s) received failed verification";
    }
    finish(Status::unavailable("no reachable peer holds shard " + std::to_string(orphan->value) + " (bytes " +
                               std::to_string(layout_.shard_offset(*orphan)) + ".." +
                               std::to_string(layout_.shard_offset(*orphan) + layout_.shard_length(*orphan)) + ")" +
                               cause));
  }
}

}  // namespace tensorhub::swarm
