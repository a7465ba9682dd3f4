// SwarmCore: its versions, connections and message routing. Each version's
// serving side is its ServeSession (serve_session.cpp), its fetching side
// its FetchSession (its requests, the payloads landing, the slot share);
// a piece that arrives is routed to the session whose request it answers.
#include "swarm/swarm_core.hpp"

#include <algorithm>
#include <cassert>

#include "core/overloaded.hpp"

namespace tensorhub::swarm {

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

SwarmCore::Version& SwarmCore::version(const ManifestId& id, const ShardLayout& layout, const core::Bitfield& have,
                                       bool offered) {
  auto [it, inserted] = versions_.try_emplace(id, layout, have);
  touch(id);
  if (inserted) {
    it->second.serve = std::make_unique<ServeSession>(
        id, layout, it->second.have,
        UploadSlots(upload_slots_here(), config_.slot_rotation, version_seed(id, 0x51075)), offered,
        ServeConfig{config_.slot_rotation, config_.fetch.request_timeout}, static_cast<const ServePeers&>(*this),
        actions_);
  }
  return it->second;
}

void SwarmCore::serve(TimePoint now, const ManifestId& id, const ShardLayout& layout, core::Bitfield have,
                      ServeMode mode) {
  if (versions_.count(id)) return;
  Version& v = version(id, layout, have, /*offered=*/true);
  if (mode == ServeMode::kSuperSeed && v.have.all()) {
    // Enough revealed, unheld shards per requester for two full request
    // pipelines, so its connection to us never runs dry; at least two.
    const std::uint64_t pipeline = std::uint64_t{config_.fetch.pipeline_blocks} * layout.block_size;
    const std::uint64_t ahead = (2 * pipeline + layout.shard_size - 1) / layout.shard_size;
    const std::uint64_t seed = version_seed(id, 0x5eed);
    v.serve->super_seed(std::make_unique<SeedScheduler>(layout.shard_count(), std::max<std::uint64_t>(2, ahead), seed));
  }
  (void)now;
}

void SwarmCore::fetch(TimePoint now, const ManifestId& id, const ShardLayout& layout, core::Bitfield have,
                      core::Bitfield wanted) {
  Version& v = version(id, layout, have, config_.serve_fetched);
  if (v.fetch) return;
  const std::uint64_t seed = version_seed(id, 0);
  v.fetch = std::make_unique<FetchSession>(layout, v.have, self_, self_id_, config_.fetch, seed, now, request_ids_,
                                           std::move(wanted));
  v.fetch_serial = ++fetch_serials_;
  v.fetch->set_slot_share(now, upload_slots_here());
  drain(now, id, v);
}

void SwarmCore::stop(TimePoint now, const ManifestId& id) {
  auto it = versions_.find(id);
  if (it == versions_.end()) return;
  if (it->second.fetch) {
    abort_landings(now, it->second.fetch->landing_senders(), "the fetch of a version it was sending stopped");
  }
  for (const PeerId& peer : it->second.sources) send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
  // Its requesters hear that it is served here no more (not merely a
  // choke, which they would wait out): where nobody else holds it, their
  // fetch fails instead of waiting for ever.
  it->second.serve->stop();
  for (auto& [peer, c] : connections_) c.pending.erase(id);
  deadlines_.erase({it->second.deadline, id});
  touched_.erase(id);
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

bool SwarmCore::connection_open(const PeerId& peer) const {
  auto c = connections_.find(peer);
  return c != connections_.end() && c->second.open;
}

std::optional<TimePoint> SwarmCore::last_heard(const PeerId& peer) const {
  auto c = connections_.find(peer);
  if (c == connections_.end()) return std::nullopt;
  return c->second.last_heard;
}

std::size_t SwarmCore::upload_slots_here() const {
  std::size_t on_host = locations_->peers_on_host(self_);
  const Location* listed = locations_->find(self_id_);
  if (listed && listed->dc == self_.dc && listed->rack == self_.rack && listed->host == self_.host && on_host > 0) --on_host;
  return std::max<std::size_t>(1, config_.upload_slots / (on_host + 1));
}

void SwarmCore::add_holder(TimePoint now, const ManifestId& id, const PeerId& peer, bool complete) {
  auto it = versions_.find(id);
  if (it == versions_.end() || !it->second.fetch) return;
  it->second.fetch->add_candidate(now, peer, proximity_of(peer), complete);
  drain(now, id, it->second);
}

void SwarmCore::peer_gone(TimePoint now, const PeerId& peer) {
  touch_all();
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

void SwarmCore::drain(TimePoint now, const ManifestId& id, Version& v) {
  touch(id);
  // Until the session ends (DoneAction resets it) or has nothing more.
  while (v.fetch) {
    auto action = v.fetch->poll();
    if (!action) break;
    std::visit(
        core::Overloaded{
            [&](ConnectAction& connect) {
              auto [it, created] = connections_.try_emplace(connect.peer);
              if (it->second.open) {
                start_with(now, id, v, connect.peer);
              } else {
                it->second.pending.insert(id);
                if (created) actions_.push(OpenConnection{connect.peer});
              }
            },
            [&](DisconnectAction& disconnect) {
              // The session gave up on this neighbour: it sent bad data.
              v.sources.erase(disconnect.peer);
              if (connections_.count(disconnect.peer)) {
                actions_.push(CloseConnection{disconnect.peer, disconnect.reason});
                forget_connection(now, disconnect.peer);
              }
            },
            [&](ReleaseAction& release) {
              v.sources.erase(release.peer);
              auto c = connections_.find(release.peer);
              if (c != connections_.end() && c->second.open) {
                send(release.peer, SwarmMessage::signal(MessageType::kNotInterested, id));
              }
            },
            [&](RequestAction& request) {
              auto c = connections_.find(request.peer);
              if (c == connections_.end() || !c->second.open) return;  // it times out in the session
              send(request.peer, SwarmMessage::request(id, request.request_id, request.shard, request.block,
                                                       request.offset, request.length));
            },
            [&](CancelAction& cancel) {
              auto c = connections_.find(cancel.peer);
              if (c == connections_.end() || !c->second.open) return;
              // A landing payload is on the wire already: it lands, and the
              // session takes its bytes if they are still wanted.
              if (v.fetch->lands(cancel.peer, cancel.request_id)) return;
              send(cancel.peer, SwarmMessage::about_request(MessageType::kCancel, id, cancel.request_id));
            },
            [&](VerifyAction& verify) { actions_.push(VerifyShard{id, verify.shard, v.fetch_serial}); },
            [&](AnnounceAction& announce) {
              v.have.set(announce.shard.value);
              actions_.push(ShardHeld{id, announce.shard});
              // Who has a use for the news: a peer that fetches from us, unless it
              // has shown us the shard (the one that sent it, at least: nobody
              // asks for what it holds), and a super-seed we fetch from, whose
              // reveals are paced by these HAVEs. A holder that only serves us
              // does nothing with them, and a peer that starts fetching from us
              // gets our whole bitfield then, so a HAVE goes to those few, not to
              // every connection. (told_ is reused: no set is allocated per shard.)
              v.fetch->audience_of_have(announce.shard, v.serve->requesters(), v.sources, told_);
              for (const PeerId& peer : told_) {
                auto c = connections_.find(peer);
                if (c != connections_.end() && c->second.open) {
                  send(peer, SwarmMessage::about_shard(MessageType::kHave, id, announce.shard));
                }
              }
            },
            // The host mates fetching from us: they would otherwise bring it
            // across the NIC we share as well.
            [&](ClaimAction& claim) { v.serve->tell_host_mate_requesters(MessageType::kFetching, claim.shard); },
            [&](UnclaimAction& unclaim) {
              v.serve->tell_host_mate_requesters(MessageType::kNotFetching, unclaim.shard);
            },
            [&](DeclineSlotAction& decline) {
              send(decline.peer, SwarmMessage::signal(MessageType::kNotInterested, id));
            },
            [&](AskSlotAgainAction& again) {
              auto c = connections_.find(again.peer);
              if (c != connections_.end() && c->second.open) send(again.peer, interested(id, v));
            },
            [&](DoneAction& done) {
              const Status status = done.status;
              v.finished = v.fetch->progress();
              const std::vector<PeerId> landing = v.fetch->landing_senders();
              v.fetch.reset();  // ends the loop
              for (const PeerId& peer : v.sources) {
                if (connections_.count(peer) && connections_[peer].open) {
                  send(peer, SwarmMessage::signal(MessageType::kNotInterested, id));
                }
              }
              v.sources.clear();
              // Before the driver hears that the fetch is over (and lets the
              // destination go), no payload may still be writing into it.
              if (!status.is_ok()) abort_landings(now, landing, "the fetch of a version it was sending failed");
              actions_.push(FetchFinished{id, status});
            },
        },
        *action);
  }
}

void SwarmCore::start_with(TimePoint now, const ManifestId& id, Version& v, const PeerId& peer) {
  v.sources.insert(peer);
  v.fetch->on_connected(now, peer);
  send(peer, interested(id, v));
}

SwarmMessage SwarmCore::interested(const ManifestId& id, const Version& v) const {
  // What we hold already travels along, so a super-seed does not reveal it.
  // A fetch of a selection takes only the shards it wants, never a shard a
  // super-seed reveals for it to spread: it asks to see every shard.
  const bool selection = v.fetch && !v.fetch->wants_all();
  return SwarmMessage::with_bits(selection ? MessageType::kInterestedInSelection : MessageType::kInterested, id,
                                 v.layout.shard_count(), v.have.to_bytes());
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
  touch_all();
  if (auto c = connections_.find(peer); c != connections_.end()) {
    for (auto& [id, v] : versions_) {
      if (v.fetch) v.fetch->end_landings_from(peer);  // the driver stopped their writes
    }
    connections_.erase(c);
  }
  for (auto& [id, v] : versions_) {
    v.serve->on_gone(now, peer);
    if (v.fetch) {
      v.sources.erase(peer);
      v.fetch->on_disconnected(now, peer);
    }
  }
  for (auto& [id, v] : versions_) drain(now, id, v);
}

void SwarmCore::on_disconnected(TimePoint now, const PeerId& peer) {
  if (!connections_.count(peer)) return;
  forget_connection(now, peer);
}

void SwarmCore::on_message(TimePoint now, const PeerId& peer, const SwarmMessage& m) {
  Connection& c = connections_[peer];
  c.open = true;  // an inbound connection opens with its first message
  c.last_heard = now;
  auto it = versions_.find(m.version_id);
  Version* v = it == versions_.end() ? nullptr : &it->second;
  if (v) {
    touch(m.version_id);
    v->serve->on_heard(now, peer);
  }
  // The serving side (every type is routed here: a new one fails to build).
  switch (m.type) {
    case MessageType::kInterested:
    case MessageType::kInterestedInSelection:
      if (!v) {
        send(peer, SwarmMessage::signal(MessageType::kUnknownVersion, m.version_id));
        return;
      }
      v->serve->on_interested(now, peer, m);
      break;  // a peer fetching what we fetch is a neighbour for us too
    case MessageType::kNotInterested:
      if (v) v->serve->on_not_interested(now, peer);
      return;
    case MessageType::kRequest:
      if (!v) {
        static constexpr std::string_view kUnknown = "unknown version";
        send(peer, SwarmMessage::refuse(m.version_id, m.request_id, std::vector<std::uint8_t>(kUnknown.begin(), kUnknown.end())));
        return;
      }
      v->serve->on_request(now, peer, m);
      return;
    case MessageType::kHave:
      if (v) v->serve->on_have(now, peer, m.shard);
      break;
    // The fetching side's alone.
    case MessageType::kBitfield:
    case MessageType::kFetching:
    case MessageType::kNotFetching:
    case MessageType::kChoke:
    case MessageType::kUnchoke:
    case MessageType::kRefuse:
    case MessageType::kDeferred:
    case MessageType::kPeers:
    case MessageType::kSuperSeed:
    case MessageType::kUnknownVersion:
      break;
    case MessageType::kCancel:        // the driver drops the piece if it is still queued
    case MessageType::kPiece:         // handled through begin_piece/on_piece
    case MessageType::kGetManifest:   // manifests and proofs are the peer core's business
    case MessageType::kManifest:
    case MessageType::kSeal:
    case MessageType::kGroup:
    case MessageType::kServeView:
    case MessageType::kViewServed:
    case MessageType::kNoManifest:
    case MessageType::kChallenge:
    case MessageType::kProof:
    case MessageType::kTransport:     // a transport's own; never delivered here
      return;
  }
  if (!v || !v->fetch) return;
  if (fetch_message(now, peer, m, *v)) drain(now, m.version_id, *v);
}

bool SwarmCore::fetch_message(TimePoint now, const PeerId& peer, const SwarmMessage& m, Version& v) {
  FetchSession& fetch = *v.fetch;
  const bool in_range = m.shard.value < v.layout.shard_count();
  switch (m.type) {
    case MessageType::kInterested:
    case MessageType::kInterestedInSelection:
      if (v.sources.count(peer)) return false;
      fetch.add_candidate(now, peer, proximity_of(peer));
      return true;
    case MessageType::kBitfield: {
      auto bits = core::Bitfield::from_bytes(m.bytes, m.shard_count);
      if (!bits || m.shard_count != v.layout.shard_count()) {
        actions_.push(CloseConnection{peer, "a bitfield that does not match the version"});
        forget_connection(now, peer);  // which drained
        return false;
      }
      fetch.on_bitfield(now, peer, *bits);
      return true;
    }
    case MessageType::kHave:
      if (!in_range) return false;
      fetch.on_have(now, peer, m.shard);
      return true;
    case MessageType::kFetching:
      if (!in_range) return false;
      fetch.on_mate_fetching(now, peer, m.shard);
      return true;
    case MessageType::kNotFetching:
      if (!in_range) return false;
      fetch.on_mate_not_fetching(now, peer, m.shard);
      return true;
    case MessageType::kChoke:
      // A payload already landing (on another lane) still arrives: the session's landings hold it.
      fetch.on_choked(now, peer);
      return true;
    case MessageType::kUnchoke:
      fetch.on_unchoked(now, peer);
      return true;
    case MessageType::kRefuse:
      return fetch.on_answer(now, peer, m.request_id, /*deferred=*/false);
    case MessageType::kDeferred:
      return fetch.on_answer(now, peer, m.request_id, /*deferred=*/true);
    case MessageType::kPeers:
      // Only from a holder we fetch from, and only peers gossip knows (their
      // data endpoints come from their records).
      if (!v.sources.count(peer)) return false;
      for (std::size_t at = 0; at + PeerId::kSize <= m.bytes.size(); at += PeerId::kSize) {
        PeerId other;
        std::copy_n(m.bytes.begin() + static_cast<std::ptrdiff_t>(at), PeerId::kSize, other.bytes.begin());
        if (other == self_id_ || other == peer || !locations_->find(other)) continue;
        fetch.add_candidate(now, other, proximity_of(other));
      }
      return true;
    case MessageType::kSuperSeed:
      // What it schedules goes out with the version's next drain.
      fetch.on_super_seed(now, peer);
      return false;
    case MessageType::kUnknownVersion:
      v.sources.erase(peer);
      fetch.on_connect_failed(now, peer);
      return true;
    case MessageType::kNotInterested:
    case MessageType::kRequest:
    case MessageType::kCancel:
    case MessageType::kPiece:
    case MessageType::kGetManifest:
    case MessageType::kManifest:
    case MessageType::kSeal:
    case MessageType::kGroup:
    case MessageType::kServeView:
    case MessageType::kViewServed:
    case MessageType::kNoManifest:
    case MessageType::kChallenge:
    case MessageType::kProof:
    case MessageType::kTransport:
      return false;  // on_message answered these, or they are not this core's
  }
  return false;
}

// --------------------------------------------------------------------------
// Pieces: routed to the fetch session whose request they answer.

std::optional<PieceTarget> SwarmCore::begin_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  if (!connections_.count(peer)) return std::nullopt;
  auto v = versions_.find(header.version_id);
  if (v == versions_.end() || !v->second.fetch) return std::nullopt;
  touch(header.version_id);
  const auto offset = v->second.fetch->begin_piece(now, peer, header.request_id, header.length);
  if (!offset) return std::nullopt;
  return PieceTarget{header.version_id, *offset, header.length};
}

void SwarmCore::on_piece_progress(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  auto v = versions_.find(header.version_id);
  if (v == versions_.end() || !v->second.fetch) return;
  touch(header.version_id);
  v->second.fetch->piece_progress(now, peer, header.request_id);
}

void SwarmCore::on_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, bool stored) {
  end_piece(now, peer, header, stored ? FetchSession::PieceEnd::kStored : FetchSession::PieceEnd::kNotStored);
}

void SwarmCore::on_piece_not_kept(TimePoint now, const PeerId& peer, const SwarmMessage& header) {
  end_piece(now, peer, header, FetchSession::PieceEnd::kNotKept);
}

void SwarmCore::end_piece(TimePoint now, const PeerId& peer, const SwarmMessage& header, FetchSession::PieceEnd how) {
  if (!connections_.count(peer)) return;
  auto v = versions_.find(header.version_id);
  if (v != versions_.end()) touch(header.version_id);
  if (v == versions_.end() || !v->second.fetch || !v->second.fetch->end_piece(now, peer, header.request_id, how)) {
    discarded_piece_bytes_ += header.length;
    return;
  }
  drain(now, header.version_id, v->second);
}

void SwarmCore::abort_landings(TimePoint now, const std::vector<PeerId>& senders, const std::string& reason) {
  for (const PeerId& peer : senders) {
    actions_.push(CloseConnection{peer, reason});
    forget_connection(now, peer);
  }
}

TimePoint SwarmCore::next_landing_deadline() const {
  TimePoint earliest = kTimeNever;
  for (const auto& [id, v] : versions_) {
    if (v.fetch) earliest = std::min(earliest, v.fetch->next_landing_deadline());
  }
  return earliest;
}

void SwarmCore::on_verified(TimePoint now, const ManifestId& id, ShardIndex shard, std::uint64_t fetch_serial,
                            bool good) {
  auto it = versions_.find(id);
  if (it == versions_.end() || !it->second.fetch || it->second.fetch_serial != fetch_serial) return;
  if (!good) actions_.push(ShardFailed{id, shard});
  it->second.fetch->on_verified(now, shard, good);
  drain(now, id, it->second);
}

// --------------------------------------------------------------------------
// Time and output

void SwarmCore::handle_timeout(TimePoint now) {
  refresh_deadlines();
  std::vector<ManifestId> due;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) due.push_back(it->second);
  if (due.empty()) return;
  // In id order, as every version's timers ran before they were kept apart:
  // the actions they queue, and the request ids they take, come in that order.
  std::sort(due.begin(), due.end());
  // A payload that stopped, or drips below the minimum rate, holds its
  // block hostage (nobody else's copy may land): the sender is stalled,
  // or stalling on purpose.
  std::vector<std::pair<TimePoint, PeerId>> stalled;
  for (const ManifestId& id : due) {
    const Version& v = versions_.at(id);
    if (v.fetch && now >= v.fetch->next_landing_deadline()) v.fetch->stalled_landings(now, stalled);
  }
  std::sort(stalled.begin(), stalled.end());
  std::vector<PeerId> closed;
  for (const auto& [deadline, peer] : stalled) {
    if (std::find(closed.begin(), closed.end(), peer) != closed.end()) continue;
    closed.push_back(peer);
    actions_.push(CloseConnection{peer, "a piece stalled mid-payload, or landed below the minimum rate"});
    forget_connection(now, peer);
  }
  for (const ManifestId& id : due) {
    auto it = versions_.find(id);
    if (it == versions_.end()) continue;
    Version& v = it->second;
    touch(id);
    v.serve->handle_timeout(now);
    if (now >= version_timer(v, SwarmTimer::kFetch)) {
      v.fetch->handle_timeout(now);
      drain(now, id, v);
    }
  }
}

TimePoint SwarmCore::version_timer(const Version& v, SwarmTimer timer) const {
  switch (timer) {
    case SwarmTimer::kSlotRotation: return v.serve->slot_rotation_at();
    case SwarmTimer::kFinishing: return v.serve->finishing_at();
    case SwarmTimer::kReveal: return v.serve->reveal_at();
    case SwarmTimer::kSilenceCheck: return v.serve->silence_check_at();
    case SwarmTimer::kFetch: return v.fetch ? v.fetch->next_timeout() : kTimeNever;
    case SwarmTimer::kLandingStall:
    case SwarmTimer::kCount: break;
  }
  return kTimeNever;
}

core::TimerTable<SwarmTimer> SwarmCore::timers() const {
  core::TimerTable<SwarmTimer> t;
  t.set(SwarmTimer::kLandingStall, next_landing_deadline());
  for (const auto& [id, v] : versions_) {
    for (SwarmTimer timer : {SwarmTimer::kSlotRotation, SwarmTimer::kFinishing, SwarmTimer::kReveal,
                             SwarmTimer::kSilenceCheck, SwarmTimer::kFetch}) {
      t.earliest(timer, version_timer(v, timer));
    }
  }
  return t;
}

TimePoint SwarmCore::version_deadline(const Version& v) const {
  TimePoint t = v.fetch ? v.fetch->next_landing_deadline() : kTimeNever;
  for (SwarmTimer timer : {SwarmTimer::kSlotRotation, SwarmTimer::kFinishing, SwarmTimer::kReveal,
                           SwarmTimer::kSilenceCheck, SwarmTimer::kFetch}) {
    t = std::min(t, version_timer(v, timer));
  }
  return t;
}

void SwarmCore::refresh_deadlines() const {
  auto refresh = [&](const ManifestId& id, const Version& v) {
    deadlines_.erase({v.deadline, id});
    v.deadline = version_deadline(v);
    if (v.deadline != kTimeNever) deadlines_.insert({v.deadline, id});
  };
  if (all_touched_) {
    for (const auto& [id, v] : versions_) refresh(id, v);
  } else {
    for (const ManifestId& id : touched_) {
      if (auto it = versions_.find(id); it != versions_.end()) refresh(id, it->second);
    }
  }
  all_touched_ = false;
  touched_.clear();
}

TimePoint SwarmCore::next_timeout() const {
  refresh_deadlines();
  const TimePoint next = deadlines_.empty() ? kTimeNever : deadlines_.begin()->first;
#ifdef TENSORHUB_DEBUG_INVARIANTS
  // Never late: a missed touch would leave a timer unserved.
  assert(next <= timers().next());
#endif
  return next;
}

std::optional<SwarmAction> SwarmCore::poll() {
  return actions_.poll();
}

}  // namespace tensorhub::swarm
