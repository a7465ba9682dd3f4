#include "swarm/serve_session.hpp"

#include <algorithm>

#include "core/overloaded.hpp"

namespace tensorhub::swarm {

ServeSession::ServeSession(ManifestId id, ShardLayout layout, const core::Bitfield& have, UploadSlots slots,
                           bool offered, ServeConfig config, const ServePeers& peers,
                           core::ActionQueue<SwarmAction>& actions)
    : id_(id),
      layout_(layout),
      have_(have),
      slots_(std::move(slots)),
      offered_(offered),
      config_(config),
      peers_(peers),
      actions_(actions) {}

void ServeSession::super_seed(std::unique_ptr<SeedScheduler> seeder) { seeder_ = std::move(seeder); }

// --------------------------------------------------------------------------
// Requesters

void ServeSession::on_heard(TimePoint now, const PeerId& peer) {
  if (seeder_ && seeder_->suspended(peer)) reveal(seeder_->resume(now, peer));
}

void ServeSession::on_interested(TimePoint now, const PeerId& peer, const SwarmMessage& m) {
  // A super-seed shows shards (HAVE) once it unchokes the peer. Another
  // datacenter sees everything: its fetchers share the WAN work among
  // themselves, and each shard should cross once. A leech shows nothing.
  // A fetcher of a selection sees everything too: it takes only the shards
  // it wants, so shards revealed to it would wait for it in vain.
  const bool super_seeds = offered_ && seeder_ && peers_.proximity_of(peer) != Proximity::kRemote &&
                           m.type != MessageType::kInterestedInSelection;
  if (super_seeds) {
    core::Bitfield holds(layout_.shard_count());
    if (m.shard_count == layout_.shard_count()) {
      if (auto bits = core::Bitfield::from_bytes(m.bytes, m.shard_count)) holds = std::move(*bits);
    }
    seeder_->add_requester(peer, holds);
    send(peer, SwarmMessage::signal(MessageType::kSuperSeed, id_));
  }
  const core::Bitfield shown = offered_ && !super_seeds ? have_ : core::Bitfield(layout_.shard_count());
  send(peer, SwarmMessage::with_bits(MessageType::kBitfield, id_, layout_.shard_count(), shown.to_bytes()));
  if (!offered_) return;
  const bool new_requester = requesters_.insert(peer).second;
  if (new_requester && peers_.proximity_of(peer) == Proximity::kSameHost) host_mate_requesters_.push_back(peer);
  if (served_outside_slots(peer)) {
    send(peer, SwarmMessage::signal(MessageType::kUnchoke, id_));
  } else {
    slots_.on_interested(now, peer);
  }
  introduce_requesters(peer);
  drain_slots(now);
}

void ServeSession::on_not_interested(TimePoint now, const PeerId& peer) {
  actions_.push(DropQueuedPieces{peer, id_, /*fetch_ended=*/true});
  if (seeder_) seeder_->remove_requester(peer);
  finishing_.erase(peer);
  if (requesters_.erase(peer)) {
    std::erase(host_mate_requesters_, peer);
    slots_.on_gone(now, peer);
    drain_slots(now);
  }
}

void ServeSession::on_have(TimePoint now, const PeerId& peer, ShardIndex shard) {
  if (!seeder_ || shard.value >= layout_.shard_count()) return;
  reveal(seeder_->on_have(now, peer, shard));
  if (finishing_.count(peer) && seeder_->pending(peer) == 0) choke(peer);
}

void ServeSession::on_gone(TimePoint now, const PeerId& peer) {
  forget_carrier(peer);
  if (seeder_) seeder_->remove_requester(peer);
  finishing_.erase(peer);
  const bool was_requester = requesters_.erase(peer) != 0;
  std::erase(host_mate_requesters_, peer);
  if (was_requester) {
    slots_.on_gone(now, peer);
    drain_slots(now);
  }
}

void ServeSession::stop() {
  for (const PeerId& peer : requesters_) {
    send(peer, SwarmMessage::signal(MessageType::kUnknownVersion, id_));
    actions_.push(DropQueuedPieces{peer, id_});
  }
}

void ServeSession::tell_host_mate_requesters(MessageType type, ShardIndex shard) {
  for (const PeerId& peer : host_mate_requesters_) {
    if (peers_.connection_open(peer)) send(peer, SwarmMessage::about_shard(type, id_, shard));
  }
}

void ServeSession::introduce_requesters(const PeerId& newcomer) {
  const Location* where = peers_.location_of(newcomer);
  if (!where || requesters_.size() < 2) return;
  std::vector<std::pair<Proximity, const PeerId*>> others;
  for (const PeerId& r : requesters_) {
    const Location* at = r == newcomer ? nullptr : peers_.location_of(r);
    if (at) others.emplace_back(proximity(*where, *at), &r);
  }
  const std::size_t n = std::min(others.size(), kMaxPeersListed);
  std::partial_sort(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(n), others.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::uint8_t> ids;
  for (std::size_t i = 0; i < n; ++i) ids.insert(ids.end(), others[i].second->bytes.begin(), others[i].second->bytes.end());
  if (!ids.empty()) send(newcomer, SwarmMessage::with_bytes(MessageType::kPeers, id_, std::move(ids)));
}

// --------------------------------------------------------------------------
// Slots and reveals

void ServeSession::reveal(const std::vector<Reveal>& reveals) {
  for (const Reveal& r : reveals) send(r.peer, SwarmMessage::about_shard(MessageType::kHave, id_, r.shard));
}

void ServeSession::drain_slots(TimePoint now) {
  while (auto action = slots_.poll()) {
    std::visit(core::Overloaded{
                   [&](UnchokeAction& u) {
                     // One still finishing its last turn was never choked.
                     if (finishing_.erase(u.peer) == 0) send(u.peer, SwarmMessage::signal(MessageType::kUnchoke, id_));
                     if (seeder_) reveal(seeder_->activate(now, u.peer));
                   },
                   [&](ChokeAction& c) {
                     if (seeder_ && seeder_->pending(c.peer) > 0) {
                       // A super-seed's requester holds first copies in the making, which
                       // only the seed can complete: choked now, their blocks already sent
                       // would be wasted and the shards go out again to someone else. It
                       // finishes them first, shown nothing new, and is choked when it has them.
                       seeder_->finish(c.peer);
                       finishing_.emplace(c.peer, now);
                     } else {
                       choke(c.peer);
                     }
                   },
               },
               *action);
  }
}

bool ServeSession::served_outside_slots(const PeerId& peer) const {
  return !seeder_ && peers_.proximity_of(peer) == Proximity::kSameHost;
}

void ServeSession::choke(const PeerId& peer) {
  finishing_.erase(peer);
  forget_carrier(peer);
  if (seeder_) seeder_->deactivate(peer);
  send(peer, SwarmMessage::signal(MessageType::kChoke, id_));
  actions_.push(DropQueuedPieces{peer, id_});
}

void ServeSession::check_silence(TimePoint now) {
  for (const PeerId& peer : requesters_) {
    if (seeder_->pending(peer) == 0) continue;
    const auto heard = peers_.last_heard(peer);
    if (!heard) continue;
    const Duration limit = config_.request_timeout * (peers_.proximity_of(peer) == Proximity::kRemote ? 8 : 2);
    if (now - *heard >= limit) reveal(seeder_->suspend(now, peer));
  }
  // A check per request timeout while shards are shown: the first lapses
  // at once, and a silent requester is found within 3 request timeouts.
  next_silence_check_ = now + config_.request_timeout;
}

TimePoint ServeSession::finishing_at() const {
  TimePoint t = kTimeNever;
  for (const auto& [peer, since] : finishing_) t = std::min(t, since + config_.slot_rotation * kFinishingRotations);
  return t;
}

void ServeSession::handle_timeout(TimePoint now) {
  // A finishing requester gets kFinishingRotations more at most: at 1/8
  // of a 1 Gbit/s uplink, its two revealed 16 MiB shards take 2.2 s, and
  // cut off after one rotation they would be revealed again to others.
  if (now >= finishing_at()) {
    std::vector<PeerId> overdue;
    for (const auto& [peer, since] : finishing_) {
      if (now >= since + config_.slot_rotation * kFinishingRotations) overdue.push_back(peer);
    }
    for (const PeerId& peer : overdue) choke(peer);
  }
  slots_.handle_timeout(now);
  drain_slots(now);
  if (now >= reveal_at()) reveal(seeder_->handle_timeout(now));
  if (now >= silence_check_at()) check_silence(now);
}

// --------------------------------------------------------------------------
// Requests

bool ServeSession::carried_by_a_mate(TimePoint now, const PeerId& peer, ShardIndex shard) {
  if (peers_.proximity_of(peer) != Proximity::kRemote) return false;
  const Location* where = peers_.location_of(peer);
  if (!where) return false;
  auto [it, added] = wan_carriers_.try_emplace({where->dc, shard.value}, WanCarrier{peer, now});
  if (added) return false;
  if (it->second.peer != peer && now - it->second.last_asked < config_.request_timeout * 4) return true;
  it->second = WanCarrier{peer, now};
  return false;
}

void ServeSession::forget_carrier(const PeerId& peer) {
  std::erase_if(wan_carriers_, [&](const auto& entry) { return entry.second.peer == peer; });
}

void ServeSession::on_request(TimePoint now, const PeerId& peer, const SwarmMessage& m) {
  auto refuse = [&](const char* reason) {
    send(peer, SwarmMessage::refuse(m.version_id, m.request_id,
                                    std::vector<std::uint8_t>(reason, reason + std::char_traits<char>::length(reason))));
  };
  if (!offered_) return refuse("not served here");
  if (!slots_.unchoked(peer) && !finishing_.count(peer) && !served_outside_slots(peer)) return refuse("choked");
  const ShardLayout& l = layout_;
  if (m.shard.value >= l.shard_count()) return refuse("no such shard");
  if (!have_.test(m.shard.value)) return refuse("shard not held");
  const std::uint64_t shard_start = l.shard_offset(m.shard), shard_end = shard_start + l.shard_length(m.shard);
  if (m.length == 0 || m.offset < shard_start || m.offset > shard_end || m.length > shard_end - m.offset) {
    return refuse("range outside the shard");
  }
  // Each shard into a remote datacenter once: its fetchers start with
  // nothing in flight, and each would take a shard across at once
  // (docs/swarm-policy.md, rule 5 of "Where to request it from").
  if (carried_by_a_mate(now, peer, m.shard)) {
    send(peer, SwarmMessage::about_request(MessageType::kDeferred, m.version_id, m.request_id));
    return;
  }
  SwarmMessage header = SwarmMessage::piece(m.version_id, m.request_id, m.length);
  actions_.push(ServePiece{peer, std::move(header), m.version_id, m.offset, m.length});
}

}  // namespace tensorhub::swarm
