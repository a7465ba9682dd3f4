#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

namespace tensorhub::swarm {
namespace {

template <typename Requests>
auto find_request(Requests& requests, std::uint32_t request_id) {
  return std::find_if(requests.begin(), requests.end(), [&](const auto& r) { return r.first == request_id; });
}

std::uint64_t block_key(ShardIndex shard, BlockIndex block) { return std::uint64_t{shard.value} << 32 | block.value; }

}  // namespace

SwarmCore::SwarmCore(SwarmConfig config, Location self, PeerId self_id, std::uint64_t seed,
                     std::shared_ptr<LocationBook> locations)
    : config_(config),
      self_(std::move(self)),
      self_id_(self_id),
      seed_(seed),
      locations_(locations ? std::move(locations) : std::make_shared<LocationBook>()) {
  config_.fetch.starts_choked = true;  // holders grant upload slots explicitly
}

SwarmCore::~SwarmCore() = default;

std::uint64_t SwarmCore::version_seed(const ManifestId& id, std::uint64_t salt) const {
  std::uint64_t seed = seed_ ^ salt;
  for (auto b : id.bytes) seed = seed * 131 + b;
  return seed;
}

// --------------------------------------------------------------------------
// Versions

void SwarmCore::serve(TimePoint now, const ManifestId& id, const ShardLayout& layout, core::Bitfield have,
                      ServeMode mode) {
  auto [it, inserted] = versions_.try_emplace(id, Version{layout, std::move(have), nullptr, nullptr, std::nullopt,
                                                          UploadSlots(upload_slots_here(), config_.slot_rotation, version_seed(id, 0x51075)), {}, {}, {}, {}, {}, true, {}});
  if (!inserted) return;
  if (mode == ServeMode::kSuperSeed && it->second.have.all()) {
    // Enough revealed, unheld shards per requester for two full request
    // pipelines, so its connection to us never runs dry; at least two.
    const std::uint64_t pipeline = std::uint64_t{config_.fetch.pipeline_blocks} * layout.block_size;
    const std::uint64_t ahead = (2 * pipeline + layout.shard_size - 1) / layout.shard_size;
    const std::uint64_t seed = version_seed(id, 0x5eed);
    it->second.seeder = std::make_unique<SeedScheduler>(layout.shard_count(), std::max<std::uint64_t>(2, ahead), seed);
  }
  (void)now;
}

void SwarmCore::fetch(TimePoint now, const ManifestId& id, const ShardLayout& layout, core::Bitfield have) {
  auto it = versions_.find(id);
  if (it == versions_.end()) {
    it = versions_
             .emplace(id, Version{layout, have, nullptr, nullptr, std::nullopt,
                                  UploadSlots(upload_slots_here(), config_.slot_rotation, version_seed(id, 0x51075)), {}, {}, {}, {}, {},
                                  config_.serve_fetched, {}})
             .first;
  }
  Version& v = it->second;
  if (v.fetch) return;
  const std::uint64_t seed = version_seed(id, 0);
  v.fetch = std::make_unique<FetchSession>(layout, v.have, self_, self_id_, config_.fetch, seed, now);
  v.fetch->set_slot_share(now, upload_slots_here());
  drain(now, id, v);
}

void SwarmCore::stop(TimePoint now, const ManifestId& id) {
  auto it = versions_.find(id);
  if (it == versions_.end()) return;
  abort_landings(now, id, "the fetch of a version it was sending stopped");
  for (const PeerId& peer : it->second.sources) send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
  for (const PeerId& peer : it->second.requesters) {
    send(peer, SwarmMessage::signal(MessageType::kChoke, id));
    actions_.push(DropQueuedPieces{peer, id});
  }
  // Forget its outstanding requests on every connection.
  for (auto& [peer, c] : connections_) {
    std::erase_if(c.requests, [&](const auto& r) { return r.second.version_id == id; });
    c.pending.erase(id);
  }
  versions_.erase(it);
}

const core::Bitfield* SwarmCore::have(const ManifestId& id) const {
  auto it = versions_.find(id);
  return it == versions_.end() ? nullptr : &it->second.have;
}

std::optional<FetchProgress> SwarmCore::progress(const ManifestId& id) const {
  auto it = versions_.find(id);
  if (it == versions_.end()) return std::nullopt;
  if (!it->second.fetch) return it->second.finished;
  return it->second.fetch->progress();
}

// --------------------------------------------------------------------------
// Gossip input

void SwarmCore::set_location(const PeerId& peer, const Location& location) { locations_->set(peer, location); }

Proximity SwarmCore::proximity_of(const PeerId& peer) const {
  const Location* location = locations_->find(peer);
  return location ? proximity(self_, *location) : Proximity::kRemote;
}

void SwarmCore::add_holder(TimePoint now, const ManifestId& id, const PeerId& peer, bool complete) {
  auto it = versions_.find(id);
  if (it == versions_.end() || !it->second.fetch) return;
  it->second.fetch->add_candidate(now, peer, proximity_of(peer), complete);
  drain(now, id, it->second);
}

void SwarmCore::peer_gone(TimePoint now, const PeerId& peer) {
  for (auto& [id, v] : versions_) {
    if (v.fetch) {
      v.fetch->remove_candidate(now, peer);
      drain(now, id, v);
    }
  }
  if (connections_.count(peer)) {
    actions_.push(CloseConnection{peer, "the peer left the swarm"});
    forget_connection(now, peer);
  }
}

// --------------------------------------------------------------------------
// Fetch sessions

void SwarmCore::send(const PeerId& peer, SwarmMessage message) {
  actions_.push(SendMessage{peer, std::move(message)});
}

void SwarmCore::start_with(TimePoint now, const ManifestId& id, Version& v, const PeerId& peer) {
  v.sources.insert(peer);
  v.fetch->on_connected(now, peer);
  send(peer, interested(id, v));
}

SwarmMessage SwarmCore::interested(const ManifestId& id, const Version& v) const {
  // What we hold already travels along, so a super-seed does not reveal it.
  return SwarmMessage::with_bits(MessageType::kInterested, id, v.layout.shard_count(), v.have.to_bytes());
}

bool SwarmCore::holds_its_share_of_slots(const Version& v) const {
  return v.fetch->slot_sources() + v.asked_again.size() >= upload_slots_here();
}

bool SwarmCore::decline_slot(const ManifestId& id, Version& v, const PeerId& peer) {
  const bool asked = v.asked_again.erase(peer) != 0;
  const bool starving = v.fetch->in_flight_total() == 0;
  // Starved, a fetch that pulls across the WAN takes the slot: handing it
  // back only to ask again at once (ask_declined_again) leaves the holder's
  // slot idle for a round trip, a WAN one when the holder is a trainer
  // rank. Inside a datacenter that round trip is cheap, and taking the slot
  // would spread slots worse.
  const bool takes_it = starving && (asked || v.fetch->pulls_across_wan());
  if (takes_it || proximity_of(peer) == Proximity::kSameHost || !holds_its_share_of_slots(v)) return false;
  send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
  if (std::find(v.declined.begin(), v.declined.end(), peer) == v.declined.end()) v.declined.push_back(peer);
  return true;
}

void SwarmCore::ask_declined_again(const ManifestId& id, Version& v) {
  // Starved, the slots we hold give us nothing to ask for: every holder
  // handed back is asked again, and we wait in all their queues, as we did
  // before declining any. (One at a time, a fetcher could wait on a holder
  // whose slot stays taken for a whole rotation.)
  const bool starved = v.fetch && v.fetch->in_flight_total() == 0;
  while (!v.declined.empty() && v.fetch && (starved || !holds_its_share_of_slots(v))) {
    const PeerId peer = v.declined.front();
    v.declined.pop_front();
    auto c = connections_.find(peer);
    if (c == connections_.end() || !c->second.open) continue;
    send(peer, interested(id, v));
    v.asked_again.insert(peer);
  }
}

void SwarmCore::slot_ended(const ManifestId& id, Version& v, const PeerId& peer) {
  std::erase(v.declined, peer);
  v.asked_again.erase(peer);
  ask_declined_again(id, v);
}

void SwarmCore::tell_host_mate_requesters(const ManifestId& id, const Version& v, MessageType type, ShardIndex shard) {
  for (const PeerId& peer : v.host_mate_requesters) {
    auto c = connections_.find(peer);
    if (c != connections_.end() && c->second.open) send(peer, SwarmMessage::about_shard(type, id, shard));
  }
}

void SwarmCore::reveal(const ManifestId& id, const std::vector<Reveal>& reveals) {
  for (const Reveal& r : reveals) send(r.peer, SwarmMessage::about_shard(MessageType::kHave, id, r.shard));
}

void SwarmCore::drain(TimePoint now, const ManifestId& id, Version& v) {
  while (v.fetch) {
    auto action = v.fetch->poll();
    if (!action) break;
    if (auto* connect = std::get_if<ConnectAction>(&*action)) {
      auto [it, created] = connections_.try_emplace(connect->peer);
      if (it->second.open) {
        start_with(now, id, v, connect->peer);
      } else {
        it->second.pending.insert(id);
        if (created) actions_.push(OpenConnection{connect->peer});
      }
    } else if (auto* disconnect = std::get_if<DisconnectAction>(&*action)) {
      // The session gave up on this neighbour: it sent bad data.
      v.sources.erase(disconnect->peer);
      if (connections_.count(disconnect->peer)) {
        actions_.push(CloseConnection{disconnect->peer, disconnect->reason});
        forget_connection(now, disconnect->peer);
      }
    } else if (auto* release = std::get_if<ReleaseAction>(&*action)) {
      v.sources.erase(release->peer);
      slot_ended(id, v, release->peer);
      auto c = connections_.find(release->peer);
      if (c != connections_.end() && c->second.open) {
        send(release->peer, SwarmMessage::signal(MessageType::kNotInterested, id));
      }
    } else if (auto* request = std::get_if<RequestAction>(&*action)) {
      auto c = connections_.find(request->peer);
      if (c == connections_.end() || !c->second.open) continue;
      const std::uint32_t rid = c->second.next_request_id++;
      c->second.requests.emplace_back(rid, Outstanding{id, request->shard, request->block, request->offset, request->length, false, false, {}});
      send(request->peer, SwarmMessage::request(id, rid, request->shard, request->block, request->offset, request->length));
    } else if (auto* cancel = std::get_if<CancelAction>(&*action)) {
      auto c = connections_.find(cancel->peer);
      if (c == connections_.end()) continue;
      for (auto r = c->second.requests.begin(); r != c->second.requests.end(); ++r) {
        if (r->second.version_id == id && r->second.shard == cancel->shard && r->second.block == cancel->block) {
          // A landing payload is on the wire already: it keeps its request,
          // and the session takes its bytes if they are still wanted.
          if (r->second.landing) break;
          send(cancel->peer, SwarmMessage::about_request(MessageType::kCancel, id, r->first));
          c->second.requests.erase(r);
          break;
        }
      }
    } else if (auto* verify = std::get_if<VerifyAction>(&*action)) {
      actions_.push(VerifyShard{id, verify->shard});
    } else if (auto* announce = std::get_if<AnnounceAction>(&*action)) {
      v.have.set(announce->shard.value);
      actions_.push(ShardHeld{id, announce->shard});
      // Who has a use for the news: a peer that fetches from us, unless it
      // has shown us the shard (the one that sent it, at least: nobody
      // asks for what it holds), and a super-seed we fetch from, whose
      // reveals are paced by these HAVEs. A holder that only serves us
      // does nothing with them, and a peer that starts fetching from us
      // gets our whole bitfield then. A HAVE to every connection was most
      // of the simulator's events (35 per flow at 10,240 peers).
      // (told_ is reused: a set per shard was a tree of allocations.)
      v.fetch->audience_of_have(announce->shard, v.requesters, v.sources, told_);
      for (const PeerId& peer : told_) {
        auto c = connections_.find(peer);
        if (c != connections_.end() && c->second.open) {
          send(peer, SwarmMessage::about_shard(MessageType::kHave, id, announce->shard));
        }
      }
    } else if (auto* claim = std::get_if<ClaimAction>(&*action)) {
      // The host mates fetching from us: they would otherwise bring it
      // across the NIC we share as well.
      tell_host_mate_requesters(id, v, MessageType::kFetching, claim->shard);
    } else if (auto* unclaim = std::get_if<UnclaimAction>(&*action)) {
      tell_host_mate_requesters(id, v, MessageType::kNotFetching, unclaim->shard);
    } else if (auto* done = std::get_if<DoneAction>(&*action)) {
      Status status = done->status;
      v.finished = v.fetch->progress();
      v.fetch.reset();
      for (const PeerId& peer : v.sources) {
        if (connections_.count(peer) && connections_[peer].open) {
          send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
        }
      }
      v.sources.clear();
      v.declined.clear();
      v.asked_again.clear();
      // Before the driver hears that the fetch is over (and lets the
      // destination go), no payload may still be writing into it.
      if (!status.is_ok()) abort_landings(now, id, "the fetch of a version it was sending failed");
      actions_.push(FetchFinished{id, status});
      break;
    }
  }
  if (!v.declined.empty() && v.fetch && v.fetch->in_flight_total() == 0) ask_declined_again(id, v);
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
        // were wasted and the shards went out again to someone else (16
        // hosts: the publisher sent 1.47x the version). It finishes them
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

// --------------------------------------------------------------------------
// Connections

void SwarmCore::on_connected(TimePoint now, const PeerId& peer) {
  Connection& c = connections_[peer];
  c.open = true;
  c.last_heard = now;
  const std::set<ManifestId> pending = std::move(c.pending);
  c.pending.clear();
  for (const ManifestId& id : pending) {
    auto it = versions_.find(id);
    if (it == versions_.end() || !it->second.fetch) continue;
    start_with(now, id, it->second, peer);
    drain(now, id, it->second);
  }
}

void SwarmCore::on_connect_failed(TimePoint now, const PeerId& peer) {
  auto it = connections_.find(peer);
  if (it == connections_.end()) return;
  const std::set<ManifestId> pending = it->second.pending;
  connections_.erase(it);
  for (const ManifestId& id : pending) {
    auto v = versions_.find(id);
    if (v == versions_.end() || !v->second.fetch) continue;
    v->second.fetch->on_connect_failed(now, peer);
    drain(now, id, v->second);
  }
}

void SwarmCore::forget_connection(TimePoint now, const PeerId& peer) {
  if (auto c = connections_.find(peer); c != connections_.end()) {
    for (const auto& [rid, o] : c->second.requests) end_landing(o);  // the driver stopped their writes
    connections_.erase(c);
  }
  for (auto& [id, v] : versions_) {
    forget_carrier(v, peer);
    if (v.seeder) v.seeder->remove_requester(peer);
    v.finishing.erase(peer);
    const bool was_requester = v.requesters.erase(peer) != 0;
    std::erase(v.host_mate_requesters, peer);
    if (was_requester) {
      v.slots.on_gone(now, peer);
      drain_slots(now, id, v);
    }
    if (v.fetch) {
      v.sources.erase(peer);
      v.fetch->on_disconnected(now, peer);
      slot_ended(id, v, peer);
    }
  }
  for (auto& [id, v] : versions_) drain(now, id, v);
}

void SwarmCore::on_disconnected(TimePoint now, const PeerId& peer) {
  if (!connections_.count(peer)) return;
  forget_connection(now, peer);
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

void SwarmCore::on_message(TimePoint now, const PeerId& peer, const SwarmMessage& m) {
  Connection& c = connections_[peer];
  c.open = true;  // an inbound connection opens with its first message
  c.last_heard = now;
  auto it = versions_.find(m.version_id);
  if (it != versions_.end() && it->second.seeder && it->second.seeder->suspended(peer)) {
    reveal(m.version_id, it->second.seeder->resume(now, peer));
  }
  switch (m.type) {
    case MessageType::kInterested: {
      if (it == versions_.end()) {
        send(peer, SwarmMessage::signal(MessageType::kUnknownVersion, m.version_id));
        return;
      }
      Version& v = it->second;
      // A super-seed shows shards (HAVE) once it unchokes the peer. Another
      // datacenter sees everything: its fetchers share the WAN work among
      // themselves, and each shard should cross once. A leech shows nothing.
      const bool super_seeds = v.offered && v.seeder && proximity_of(peer) != Proximity::kRemote;
      if (super_seeds) {
        core::Bitfield holds(v.layout.shard_count());
        if (m.shard_count == v.layout.shard_count()) {
          if (auto bits = core::Bitfield::from_bytes(m.bytes, m.shard_count)) holds = std::move(*bits);
        }
        v.seeder->add_requester(peer, holds);
        send(peer, SwarmMessage::signal(MessageType::kSuperSeed, m.version_id));
      }
      const core::Bitfield shown = v.offered && !super_seeds ? v.have : core::Bitfield(v.layout.shard_count());
      send(peer, SwarmMessage::with_bits(MessageType::kBitfield, m.version_id, v.layout.shard_count(), shown.to_bytes()));
      if (v.offered) {
        const bool new_requester = v.requesters.insert(peer).second;
        if (new_requester && proximity_of(peer) == Proximity::kSameHost) v.host_mate_requesters.push_back(peer);
        if (served_outside_slots(v, peer)) {
          send(peer, SwarmMessage::signal(MessageType::kUnchoke, m.version_id));
        } else {
          v.slots.on_interested(now, peer);
        }
        introduce_requesters(m.version_id, v, peer);
        drain_slots(now, m.version_id, v);
      }
      // A peer fetching what we fetch is a neighbour for us too.
      if (v.fetch && !v.sources.count(peer)) {
        v.fetch->add_candidate(now, peer, proximity_of(peer));
        drain(now, m.version_id, v);
      }
      return;
    }
    case MessageType::kNotInterested:
      if (it != versions_.end() && it->second.seeder) it->second.seeder->remove_requester(peer);
      if (it != versions_.end()) it->second.finishing.erase(peer);
      if (it != versions_.end() && it->second.requesters.erase(peer)) {
        std::erase(it->second.host_mate_requesters, peer);
        it->second.slots.on_gone(now, peer);
        drain_slots(now, m.version_id, it->second);
      }
      return;
    case MessageType::kBitfield: {
      if (it == versions_.end() || !it->second.fetch) return;
      auto bits = core::Bitfield::from_bytes(m.bytes, m.shard_count);
      if (!bits || m.shard_count != it->second.layout.shard_count()) {
        actions_.push(CloseConnection{peer, "a bitfield that does not match the version"});
        forget_connection(now, peer);
        return;
      }
      it->second.fetch->on_bitfield(now, peer, *bits);
      drain(now, m.version_id, it->second);
      return;
    }
    case MessageType::kHave:
      if (it != versions_.end() && it->second.seeder && m.shard.value < it->second.layout.shard_count()) {
        Version& v = it->second;
        reveal(m.version_id, v.seeder->on_have(now, peer, m.shard));
        if (v.finishing.count(peer) && v.seeder->pending(peer) == 0) choke(m.version_id, v, peer);
      }
      if (it != versions_.end() && it->second.fetch && m.shard.value < it->second.layout.shard_count()) {
        it->second.fetch->on_have(now, peer, m.shard);
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kFetching:
    case MessageType::kNotFetching:
      if (it != versions_.end() && it->second.fetch && m.shard.value < it->second.layout.shard_count()) {
        if (m.type == MessageType::kFetching) {
          it->second.fetch->on_mate_fetching(now, peer, m.shard);
        } else {
          it->second.fetch->on_mate_not_fetching(now, peer, m.shard);
        }
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kChoke:
      if (it != versions_.end() && it->second.fetch) {
        it->second.fetch->on_choked(now, peer);
        slot_ended(m.version_id, it->second, peer);
        // A payload already landing (on another lane) still arrives.
        std::erase_if(c.requests, [&](const auto& r) { return r.second.version_id == m.version_id && !r.second.landing; });
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kUnchoke:
      if (it != versions_.end() && it->second.fetch && decline_slot(m.version_id, it->second, peer)) {
        ask_declined_again(m.version_id, it->second);  // when the slots we hold give us nothing to ask
        return;
      }
      if (it != versions_.end() && it->second.fetch) {
        it->second.fetch->on_unchoked(now, peer);
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kRequest:
      handle_request(now, peer, m);
      return;
    case MessageType::kRefuse:
    case MessageType::kDeferred: {
      auto r = find_request(c.requests, m.request_id);
      if (r == c.requests.end()) return;
      const Outstanding o = r->second;
      c.requests.erase(r);
      auto v = versions_.find(o.version_id);
      if (v != versions_.end() && v->second.fetch) {
        if (m.type == MessageType::kDeferred) {
          v->second.fetch->on_block_deferred(now, peer, o.shard, o.block);
        } else {
          v->second.fetch->on_block_refused(now, peer, o.shard, o.block);
        }
        drain(now, o.version_id, v->second);
      }
      return;
    }
    case MessageType::kPeers:
      // Only from a holder we fetch from, and only peers gossip knows (their
      // data endpoints come from their records).
      if (it != versions_.end() && it->second.fetch && it->second.sources.count(peer)) {
        for (std::size_t at = 0; at + PeerId::kSize <= m.bytes.size(); at += PeerId::kSize) {
          PeerId other;
          std::copy_n(m.bytes.begin() + static_cast<std::ptrdiff_t>(at), PeerId::kSize, other.bytes.begin());
          if (other == self_id_ || other == peer || !locations_->find(other)) continue;
          it->second.fetch->add_candidate(now, other, proximity_of(other));
        }
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kSuperSeed:
      if (it != versions_.end() && it->second.fetch) it->second.fetch->on_super_seed(now, peer);
      return;
    case MessageType::kUnknownVersion:
      if (it != versions_.end() && it->second.fetch) {
        it->second.sources.erase(peer);
        it->second.fetch->on_connect_failed(now, peer);
        drain(now, m.version_id, it->second);
      }
      return;
    case MessageType::kCancel:        // the driver drops the piece if it is still queued
    case MessageType::kPiece:         // handled through begin_piece/on_piece
    case MessageType::kGetManifest:   // manifests are the peer core's business
    case MessageType::kManifest:
    case MessageType::kNoManifest:
      return;
  }
}

std::optional<PieceTarget> SwarmCore::begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return std::nullopt;
  auto r = find_request(c->second.requests, header.request_id);
  if (r == c->second.requests.end() || r->second.version_id != header.version_id || r->second.length != header.length ||
      r->second.landing) {
    return std::nullopt;
  }
  auto v = versions_.find(header.version_id);
  if (v == versions_.end() || !v->second.fetch) return std::nullopt;
  Outstanding& o = r->second;
  // Two payloads writing one block could leave a liar's bytes over an
  // honest copy that has verified; one landing at a time cannot.
  if (!v->second.fetch->wants_block(o.shard, o.block) || !v->second.landing.insert(block_key(o.shard, o.block)).second) {
    o.superseded = true;
    return std::nullopt;
  }
  o.landing = true;
  o.landing_since = now;
  landing_since_.insert(now);
  v->second.fetch->on_block_landing(now, peer, o.shard, o.block);
  return PieceTarget{header.version_id, o.offset, o.length};
}

void SwarmCore::unlist_landing_since(const Outstanding& o) {
  // Invariant: every landing Outstanding has its landing_since in landing_since_.
  const auto since = landing_since_.find(o.landing_since);
  assert(since != landing_since_.end());
  if (since != landing_since_.end()) landing_since_.erase(since);
}

void SwarmCore::end_landing(const Outstanding& o) {
  if (!o.landing) return;
  unlist_landing_since(o);
  if (auto v = versions_.find(o.version_id); v != versions_.end()) v->second.landing.erase(block_key(o.shard, o.block));
}

void SwarmCore::on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return;
  auto r = find_request(c->second.requests, header.request_id);
  if (r == c->second.requests.end() || !r->second.landing) return;
  Outstanding& o = r->second;
  unlist_landing_since(o);
  o.landing_since = now;
  landing_since_.insert(now);
}

void SwarmCore::on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return;
  auto r = find_request(c->second.requests, header.request_id);
  if (r == c->second.requests.end()) {
    discarded_piece_bytes_ += header.length;
    return;
  }
  const Outstanding o = r->second;
  c->second.requests.erase(r);
  end_landing(o);
  auto v = versions_.find(o.version_id);
  if (v == versions_.end() || !v->second.fetch) return;
  if (stored && o.landing) {
    v->second.fetch->on_block(now, peer, o.shard, o.block);
  } else if (o.superseded) {
    v->second.fetch->on_block_superseded(now, peer, o.shard, o.block);
  } else {
    v->second.fetch->on_block_refused(now, peer, o.shard, o.block);
  }
  drain(now, o.version_id, v->second);
}

void SwarmCore::abort_landings(TimePoint now, const ManifestId& id, const std::string& reason) {
  if (landing_since_.empty()) return;
  std::vector<PeerId> landing_from;
  for (const auto& [peer, c] : connections_) {
    if (std::any_of(c.requests.begin(), c.requests.end(), [&](const auto& r) { return r.second.landing && r.second.version_id == id; })) {
      landing_from.push_back(peer);
    }
  }
  for (const PeerId& peer : landing_from) {
    actions_.push(CloseConnection{peer, reason});
    forget_connection(now, peer);
  }
}

TimePoint SwarmCore::next_landing_deadline() const {
  if (landing_since_.empty()) return kTimeNever;
  return *landing_since_.begin() + config_.fetch.request_timeout * kLandingLimitTimeouts;
}

void SwarmCore::on_verified(TimePoint now, const ManifestId& id, ShardIndex shard, bool good) {
  auto it = versions_.find(id);
  if (it == versions_.end() || !it->second.fetch) return;
  it->second.fetch->on_verified(now, shard, good);
  drain(now, id, it->second);
}

// --------------------------------------------------------------------------
// Time and output

void SwarmCore::handle_timeout(TimePoint now) {
  if (now >= next_landing_deadline()) {
    // A payload begun and not finished for this long holds its block
    // hostage (nobody else's copy may land): the sender is stalled, or
    // stalling on purpose.
    std::vector<PeerId> stalled;
    for (const auto& [peer, c] : connections_) {
      for (const auto& [rid, o] : c.requests) {
        if (o.landing && now >= o.landing_since + config_.fetch.request_timeout * kLandingLimitTimeouts) {
          stalled.push_back(peer);
          break;
        }
      }
    }
    for (const PeerId& peer : stalled) {
      actions_.push(CloseConnection{peer, "a piece stalled mid-payload"});
      forget_connection(now, peer);
    }
  }
  for (auto& [id, v] : versions_) {
    // A finishing requester gets kFinishingRotations more at most: at 1/8
    // of a 1 Gbit/s uplink, its two revealed 16 MiB shards take 2.2 s, and
    // cut off after one rotation they were revealed again to others.
    std::vector<PeerId> overdue;
    for (const auto& [peer, since] : v.finishing) {
      if (now >= since + config_.slot_rotation * kFinishingRotations) overdue.push_back(peer);
    }
    for (const PeerId& peer : overdue) choke(id, v, peer);
    v.slots.handle_timeout(now);
    drain_slots(now, id, v);
    if (v.seeder && now >= v.seeder->next_timeout()) reveal(id, v.seeder->handle_timeout(now));
    if (v.seeder && v.seeder->total_pending() > 0 && now >= v.next_silence_check) check_silence(now, id, v);
    if (v.fetch && now >= v.fetch->next_timeout()) {
      v.fetch->handle_timeout(now);
      drain(now, id, v);
    }
  }
}

TimePoint SwarmCore::next_timeout() const {
  TimePoint t = next_landing_deadline();
  for (const auto& [id, v] : versions_) {
    t = std::min(t, v.slots.next_timeout());
    for (const auto& [peer, since] : v.finishing) t = std::min(t, since + config_.slot_rotation * kFinishingRotations);
    if (v.seeder) t = std::min(t, v.seeder->next_timeout());
    if (v.seeder && v.seeder->total_pending() > 0) t = std::min(t, v.next_silence_check);
    if (v.fetch) t = std::min(t, v.fetch->next_timeout());
  }
  return t;
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

std::optional<SwarmAction> SwarmCore::poll() {
  return actions_.poll();
}

}  // namespace tensorhub::swarm

