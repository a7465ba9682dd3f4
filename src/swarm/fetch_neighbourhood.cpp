// FetchSession's policies over its Neighbourhood: whom to connect, what a
// connection, bitfield or HAVE changes, starvation and trades of
// neighbours.
#include "swarm/fetch_session.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

void FetchSession::add_candidate(TimePoint now, const PeerId& peer, Proximity proximity, bool complete) {
  if (done_ || !neighbourhood_.add_candidate(peer, proximity, complete)) return;
  starved_since_.reset();
  // Connect at the next timeout (due now), not at once: holders arrive in
  // bursts (a fetch starting, a gossip round, a publication), and choosing
  // after the whole burst lets the nearest win; connecting per candidate
  // would fill the neighbourhood with whoever is named first.
  if (!connect_due_) connect_due_ = now;
}

void FetchSession::retry_lost_holders(TimePoint now) {
  std::vector<std::pair<PeerId, CandidateList::Entry>> due;
  neighbourhood_.retry_due(now, due);
  for (const auto& [peer, known] : due) add_candidate(now, peer, known.proximity, known.complete);
}

void FetchSession::remove_candidate(TimePoint now, const PeerId& peer) {
  neighbourhood_.forget(peer);
  if (neighbourhood_.find(peer)) lose_neighbour(now, peer, /*ban=*/false, "the peer left the swarm");
  schedule(now);
}

void FetchSession::connect_to(TimePoint now, const PeerId& chosen) {
  neighbourhood_.connect(chosen, now + config_.connect_timeout);
  requests_.add_holder(chosen, neighbourhood_.find(chosen)->proximity == Proximity::kRemote);
  actions_.push(ConnectAction{chosen});
}

void FetchSession::connect_more(TimePoint now) {
  const CandidateList& candidates = neighbourhood_.candidates();
  while (!candidates.empty()) {
    if (neighbourhood_.host_mates() < kMaxHostMates && candidates.any_at(Proximity::kSameHost)) {
      // Host mates are never refused, even past the limit: their blocks
      // never cross the NIC, which is what the limit guards, and gossip may
      // name them after far peers have taken every slot.
      connect_to(now, *neighbourhood_.nearest_candidate(/*complete_only=*/false, /*drawn=*/false));  // a mate: the nearest there is
      continue;
    }
    if (neighbourhood_.size() >= config_.max_neighbours) break;
    const std::size_t free_slots = config_.max_neighbours - neighbourhood_.size();
    // The last slots go to random candidates, for diversity.
    connect_to(now, free_slots <= config_.random_neighbours
                        ? neighbourhood_.any_candidate()
                        : *neighbourhood_.nearest_candidate(/*complete_only=*/false, /*drawn=*/false));
  }
  // At least one neighbour that holds everything, when gossip names one,
  // even past the limit: nearest-first can otherwise fill every slot with
  // fetchers that have nothing yet while the publisher is nobody's
  // neighbour, and nothing would ever move.
  if (candidates.complete_count() == 0) return;
  const auto& neighbours = neighbourhood_.all();
  const bool have_complete = std::any_of(neighbours.begin(), neighbours.end(), [](const auto& entry) {
    return entry.second.complete_source || entry.second.holds_all;
  });
  if (!have_complete) {
    if (auto seed = neighbourhood_.nearest_candidate(/*complete_only=*/true, /*drawn=*/false)) connect_to(now, *seed);
  }
}

void FetchSession::on_connected(TimePoint now, const PeerId& peer) {
  if (!neighbourhood_.find(peer)) return;
  neighbourhood_.set_connected(peer);
  neighbourhood_.set_choked(peer, config_.starts_choked);
  schedule(now);
}

void FetchSession::on_super_seed(TimePoint now, const PeerId& peer) {
  if (!neighbourhood_.find(peer)) return;
  neighbourhood_.set_super_seed(peer);
  schedule(now);
}

void FetchSession::on_choked(TimePoint now, const PeerId& peer) {
  const Neighbour* n = neighbourhood_.find(peer);
  if (n != nullptr && !n->choked) {
    neighbourhood_.set_choked(peer, true);
    release_requests_of(peer);  // a choking holder drops what we asked
    withdraw_stranded_claims();
    schedule(now);
  }
  slot_ended(peer);
}

void FetchSession::on_unchoked(TimePoint now, const PeerId& peer) {
  if (!neighbourhood_.find(peer)) return;
  if (decline_slot(peer)) {
    ask_declined_again();  // when the slots we hold give us nothing to ask
    return;
  }
  neighbourhood_.set_choked(peer, false);
  schedule(now);
}

void FetchSession::on_connect_failed(TimePoint now, const PeerId& peer) {
  if (neighbourhood_.find(peer)) lose_neighbour(now, peer, /*ban=*/false, "");
  schedule(now);
}

void FetchSession::on_disconnected(TimePoint now, const PeerId& peer) {
  requests_.connection_closed(peer);  // nothing answers what it was asked now
  if (neighbourhood_.find(peer)) {
    const std::optional<CandidateList::Entry> again = neighbourhood_.lost_connection(now, peer);
    lose_neighbour(now, peer, /*ban=*/false, "");
    if (again) add_candidate(now, peer, again->proximity, again->complete);
  }
  schedule(now);
  slot_ended(peer);
}

void FetchSession::lose_neighbour(TimePoint now, const PeerId& peer, bool ban, const std::string& reason) {
  const Neighbour* n = neighbourhood_.find(peer);
  if (n == nullptr) return;
  release_requests_of(peer);
  source_rules_.forget_claims_of(peer);
  if (n->has_bits) picker_.remove_peer(n->bits);
  requests_.remove_holder(peer);
  const bool beyond_host = n->proximity != Proximity::kSameHost;
  neighbourhood_.remove(peer, ban);
  if (beyond_host) withdraw_stranded_claims();
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
  const Neighbour* n = neighbourhood_.find(peer);
  if (n == nullptr) return;
  if (bits.size() != layout_.shard_count()) {
    lose_neighbour(now, peer, /*ban=*/true, "its bitfield has the wrong size");
    schedule(now);
    return;
  }
  if (n->has_bits) picker_.remove_peer(n->bits);
  neighbourhood_.set_bits(peer, bits);
  picker_.add_peer(bits);
  schedule(now);
}

void FetchSession::on_have(TimePoint now, const PeerId& peer, ShardIndex shard) {
  const Neighbour* n = neighbourhood_.find(peer);
  if (n == nullptr || shard.value >= layout_.shard_count()) return;
  source_rules_.unclaim(peer, shard);
  if (neighbourhood_.add_have(peer, shard)) picker_.increment(shard);
  starved_since_.reset();
  if (done_ || !needs(shard)) return;  // nothing new to ask anyone for
  // Only the sender can be asked for more. News of a holder never lets
  // another neighbour give what it could not: each source rule
  // forbids more as holders appear (a mate holding the shard, a serving
  // peer holding what a super-seed would give), and a mate that now holds
  // everything gives all of it itself. A HAVE goes to every neighbour and
  // requester of the version, so a full schedule per HAVE would cost
  // O(neighbours) per HAVE. Endgame duplicates due for others wait for
  // their timer, which last_scheduled_ still sets.
  fill(now, peer, *n);
  check_starvation(now);
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
  if (!orphan || neighbourhood_.may_yet_show_count() != 0) {
    clear_starvation();
    return;
  }
  if (!neighbourhood_.candidates().empty()) {
    // Nobody we are connected to has it: ask one more known holder, past
    // the limit if need be (complete ones first), rather than wait forever.
    if (neighbourhood_.size() < config_.max_neighbours + kExtraNeighbours) {
      clear_starvation();
      // Drawn, not the first in id order: gossip does not say which shards
      // a holder has, and with every fetcher asking the same holder first a
      // trainer rank that holds an eighth of the version could be nobody's
      // neighbour until the trade below.
      auto more = neighbourhood_.nearest_candidate(/*complete_only=*/true, /*drawn=*/true);
      connect_to(now, more ? *more : *neighbourhood_.nearest_candidate(/*complete_only=*/false, /*drawn=*/true));
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
        if (n.bits.test(s) && needs(ShardIndex{s})) return true;
      }
      return false;
    };
    const auto& neighbours = neighbourhood_.all();
    for (auto it = neighbours.rbegin(); it != neighbours.rend(); ++it) {
      const Neighbour& n = it->second;
      if (requests_.in_flight(it->first) != 0 || n.complete_source || n.super_seed || n.proximity == Proximity::kSameHost) continue;
      if (!n.has_bits || holds_something_wanted(n)) continue;  // it can still give us something
      const PeerId idle = it->first;
      last_swap_ = now;
      trade_since_ = now;  // a new neighbour: give it a request_timeout
      release_neighbour(now, idle);
      auto more = neighbourhood_.nearest_candidate(/*complete_only=*/true, /*drawn=*/true);
      connect_to(now, more ? *more : neighbourhood_.any_candidate());
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
              " that failed verification" + (neighbourhood_.banned(bad->second) ? ", and is asked no more" : "");
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
                 " shard(s) that failed verification" + (neighbourhood_.banned(sender) ? ", and is asked no more" : "");
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
