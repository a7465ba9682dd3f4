// SwarmCore's serving side of each version: upload slots and the
// super-seed's reveals, host mates served outside the slots, carriers across
// the WAN, requests answered, requesters introduced to each other, and
// silent requesters.
#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {

void SwarmCore::tell_host_mate_requesters(const ManifestId& id, const Version& v, MessageType type, ShardIndex shard) {
  for (const PeerId& peer : v.host_mate_requesters) {
    auto c = connections_.find(peer);
    if (c != connections_.end() && c->second.open) send(peer, SwarmMessage::about_shard(type, id, shard));
  }
}

void SwarmCore::reveal(const ManifestId& id, const std::vector<Reveal>& reveals) {
  for (const Reveal& r : reveals) send(r.peer, SwarmMessage::about_shard(MessageType::kHave, id, r.shard));
}

void SwarmCore::drain_slots(TimePoint now, const ManifestId& id, Version& v) {
  while (auto action = v.slots.poll()) {
    if (auto* u = std::get_if<UnchokeAction>(&*action)) {
      // One still finishing its last turn was never choked.
      if (v.finishing.erase(u->peer) == 0) send(u->peer, SwarmMessage::signal(MessageType::kUnchoke, id));
      if (v.seeder) reveal(id, v.seeder->activate(now, u->peer));
    } else {
      const PeerId choked = std::get<ChokeAction>(*action).peer;
      if (v.seeder && v.seeder->pending(choked) > 0) {
        // A super-seed's requester holds first copies in the making, which
        // only the seed can complete: choked now, their blocks already sent
        // would be wasted and the shards go out again to someone else. It finishes them
        // first, shown nothing new, and is choked when it has them.
        v.seeder->finish(choked);
        v.finishing.emplace(choked, now);
      } else {
        choke(id, v, choked);
      }
    }
  }
}

bool SwarmCore::served_outside_slots(const Version& v, const PeerId& peer) const {
  return !v.seeder && proximity_of(peer) == Proximity::kSameHost;
}

std::size_t SwarmCore::upload_slots_here() const {
  std::size_t on_host = locations_->peers_on_host(self_);
  const Location* listed = locations_->find(self_id_);
  if (listed && listed->dc == self_.dc && listed->rack == self_.rack && listed->host == self_.host && on_host > 0) --on_host;
  return std::max<std::size_t>(1, config_.upload_slots / (on_host + 1));
}

void SwarmCore::choke(const ManifestId& id, Version& v, const PeerId& peer) {
  v.finishing.erase(peer);
  forget_carrier(v, peer);
  if (v.seeder) v.seeder->deactivate(peer);
  send(peer, SwarmMessage::signal(MessageType::kChoke, id));
  actions_.push(DropQueuedPieces{peer, id});
}

bool SwarmCore::carried_by_a_mate(TimePoint now, Version& v, const PeerId& peer, ShardIndex shard) {
  if (proximity_of(peer) != Proximity::kRemote) return false;
  const Location* where = locations_->find(peer);
  if (!where) return false;
  auto [it, added] = v.wan_carriers.try_emplace({where->dc, shard.value}, Version::WanCarrier{peer, now});
  if (added) return false;
  if (it->second.peer != peer && now - it->second.last_asked < config_.fetch.request_timeout * 4) return true;
  it->second = Version::WanCarrier{peer, now};
  return false;
}

void SwarmCore::introduce_requesters(const ManifestId& id, const Version& v, const PeerId& newcomer) {
  const Location* where = locations_->find(newcomer);
  if (!where || v.requesters.size() < 2) return;
  std::vector<std::pair<Proximity, const PeerId*>> others;
  for (const PeerId& r : v.requesters) {
    const Location* at = r == newcomer ? nullptr : locations_->find(r);
    if (at) others.emplace_back(proximity(*where, *at), &r);
  }
  const std::size_t n = std::min(others.size(), kMaxPeersListed);
  std::partial_sort(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(n), others.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::uint8_t> ids;
  for (std::size_t i = 0; i < n; ++i) ids.insert(ids.end(), others[i].second->bytes.begin(), others[i].second->bytes.end());
  if (!ids.empty()) send(newcomer, SwarmMessage::with_bytes(MessageType::kPeers, id, std::move(ids)));
}

void SwarmCore::forget_carrier(Version& v, const PeerId& peer) {
  std::erase_if(v.wan_carriers, [&](const auto& entry) { return entry.second.peer == peer; });
}

void SwarmCore::handle_request(TimePoint now, const PeerId& peer, const SwarmMessage& m) {
  auto refuse = [&](const char* reason) {
    send(peer, SwarmMessage::refuse(m.version_id, m.request_id,
                                    std::vector<std::uint8_t>(reason, reason + std::char_traits<char>::length(reason))));
  };
  auto it = versions_.find(m.version_id);
  if (it == versions_.end()) return refuse("unknown version");
  Version& v = it->second;
  if (!v.offered) return refuse("not served here");
  if (!v.slots.unchoked(peer) && !v.finishing.count(peer) && !served_outside_slots(v, peer)) return refuse("choked");
  const ShardLayout& l = v.layout;
  if (m.shard.value >= l.shard_count()) return refuse("no such shard");
  if (!v.have.test(m.shard.value)) return refuse("shard not held");
  const std::uint64_t shard_start = l.shard_offset(m.shard), shard_end = shard_start + l.shard_length(m.shard);
  if (m.length == 0 || m.offset < shard_start || m.offset > shard_end || m.length > shard_end - m.offset) {
    return refuse("range outside the shard");
  }
  // Each shard into a remote datacenter once: its fetchers start with
  // nothing in flight, and each would take a shard across at once
  // (docs/swarm-policy.md, rule 5 of "Where to request it from").
  if (carried_by_a_mate(now, v, peer, m.shard)) {
    send(peer, SwarmMessage::about_request(MessageType::kDeferred, m.version_id, m.request_id));
    return;
  }
  SwarmMessage header = SwarmMessage::piece(m.version_id, m.request_id, m.length);
  actions_.push(ServePiece{peer, std::move(header), m.version_id, m.offset, m.length});
}

void SwarmCore::check_silence(TimePoint now, const ManifestId& id, Version& v) {
  for (const PeerId& peer : v.requesters) {
    if (v.seeder->pending(peer) == 0) continue;
    auto c = connections_.find(peer);
    if (c == connections_.end()) continue;
    const Duration limit = config_.fetch.request_timeout * (proximity_of(peer) == Proximity::kRemote ? 8 : 2);
    if (now - c->second.last_heard >= limit) reveal(id, v.seeder->suspend(now, peer));
  }
  // A check per request timeout while shards are shown: the first lapses
  // at once, and a silent requester is found within 3 request timeouts.
  v.next_silence_check = now + config_.fetch.request_timeout;
}

}  // namespace tensorhub::swarm
