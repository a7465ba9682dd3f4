// FetchSession's source rules (docs/swarm-policy.md): rendezvous shares,
// host-mate claims, and allowed_from, over who holds what near us (the
// Neighbourhood's counts).
#include "swarm/fetch_session.hpp"

#include "core/rng.hpp"

#include <algorithm>
#include <cassert>

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

bool FetchSession::held_by_a_serving_peer(ShardIndex shard, bool count_remote) const {
  for (const auto& [id, n] : neighbourhood_.all()) {
    if (!count_remote && n.proximity == Proximity::kRemote) continue;
    if (!n.super_seed && n.connected && !n.choked && n.has_bits && n.bits.test(shard.value)) return true;
  }
  return false;
}

bool FetchSession::share_is_mine(ShardIndex shard, Proximity beyond) const {
  // Over every fetching mate we know of (candidates too, not only
  // neighbours): a share among neighbours alone overlaps between fetchers,
  // and a shard crosses once per overlap.
  const std::uint64_t mine = rendezvous_score(self_id_, shard);
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

bool FetchSession::left_to_a_mate(TimePoint now, ShardIndex shard) const {
  if (mate_claims_.empty()) return false;
  auto claim = mate_claims_.find(shard.value);
  if (claim == mate_claims_.end()) return false;
  if (shards_.count(shard.value) != 0 && outranks(self_id_, claim->second.peer, shard)) return false;
  return in_flight_total() != 0 || now - claim->second.since < config_.request_timeout;
}

void FetchSession::on_mate_fetching(TimePoint now, const PeerId& peer, ShardIndex shard) {
  const Neighbour* mate = neighbourhood_.find(peer);
  if (mate == nullptr || mate->proximity != Proximity::kSameHost) return;
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
  const std::uint32_t blocks = layout_.block_count(shard);
  for (std::uint32_t b = 0; b < blocks; ++b) {
    std::vector<CancelAction> beyond_host;
    requests_.for_each_on(shard, BlockIndex{b}, [&](const RequestTable::Request& r) {
      const Neighbour* n = neighbourhood_.find(r.peer);
      const bool over_nic = n != nullptr && n->proximity != Proximity::kSameHost && n->proximity != Proximity::kRemote;
      if (over_nic) beyond_host.push_back(CancelAction{r.peer, r.id, shard, BlockIndex{b}});
    });
    for (const CancelAction& cancel : beyond_host) {
      drop_request(shard, cancel.block, cancel.peer);
      actions_.push(cancel);
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
    const auto shard = index;  // a structured binding: clang's lambdas cannot capture one
    const auto& neighbours = neighbourhood_.all();
    const bool reachable = std::any_of(neighbours.begin(), neighbours.end(), [&](const auto& entry) {
      const Neighbour& n = entry.second;
      return n.connected && !n.choked && n.proximity != Proximity::kSameHost && n.proximity != Proximity::kRemote &&
             n.has_bits && n.bits.test(shard);
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
  if (neighbourhood_.held_within(shard, mates)) return false;
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
    for (const auto& [id, other] : neighbourhood_.all()) {
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
  const bool sole_holder_across = neighbourhood_.holders_at(shard, Proximity::kRemote) == 1 && n.complete_source;
  const bool idle = in_flight_total() == 0 &&
                    (n.complete_source || (idle_since_ && now >= *idle_since_ + config_.request_timeout));
  if (!begun_across && !sole_holder_across && !idle && !share_is_mine(shard, mates)) return false;
  // 8. Not while the holder says a mate carries it into our datacenter (kDeferred).
  if (auto d = wan_deferred_until_.find(shard.value); d != wan_deferred_until_.end() && now < d->second) return false;
  // 9. At most max_wan_requests in flight across the WAN.
  return wan_in_flight() < config_.max_wan_requests;
}

}  // namespace tensorhub::swarm
