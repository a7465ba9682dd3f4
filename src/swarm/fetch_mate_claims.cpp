// FetchSession and its host mates: a mate's claim on a shard (it brings the
// shard across the NIC we share) and our own claims, withdrawn when no
// holder beyond the host serves them any more. What a claim forbids is a
// source rule (SourceRules::left_to_a_mate).
#include "swarm/fetch_session.hpp"

#include <algorithm>

namespace tensorhub::swarm {

void FetchSession::on_mate_fetching(TimePoint now, const PeerId& peer, ShardIndex shard) {
  const Neighbour* mate = neighbourhood_.find(peer);
  if (mate == nullptr || mate->proximity != Proximity::kSameHost) return;
  if (shard.value >= layout_.shard_count() || !needs(shard) || done_) return;
  source_rules_.claim(now, peer, shard);
  // We began it too, in the same instant (a HAVE or an unchoke reaches all
  // mates at once, and each picks the one new shard): the loser cancels
  // what it asked beyond the host, and gets the rest from the winner.
  auto begun = shards_.find(shard.value);
  if (begun == shards_.end() || !source_rules_.left_to_a_mate(now, shard, /*begun=*/true)) return;
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
  if (source_rules_.unclaim(peer, shard)) schedule(now);
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

}  // namespace tensorhub::swarm
