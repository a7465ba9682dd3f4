#include "sim/swarm_simulation.hpp"

#include "sim/placement.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tensorhub::sim {

using namespace std::chrono_literals;

namespace {

constexpr const char* kModel = "policy";  // gossip records name the model

swarm::SwarmConfig swarm_config(const Scenario& s) {
  swarm::SwarmConfig c;
  c.fetch.block_size = s.model.flow_size;
  c.fetch.max_neighbours = s.swarm.max_neighbours;
  c.fetch.pipeline_blocks = s.swarm.pipeline_blocks;
  c.upload_slots = s.swarm.upload_slots;
  return c;
}

}  // namespace

SwarmSimulation::SwarmSimulation(const Scenario& scenario, NetworkModel& network)
    : scenario_(scenario),
      network_(network),
      topology_(scenario.topology, network),
      layout_{scenario.model.size, scenario.model.shard_size, scenario.model.flow_size},
      rng_(scenario.seed),
      link_faults_(topology_, network) {
  add_peers();
  ledger_.emplace(scenario.workload, workers_.size(), place_peers(scenario).first_spot_worker);
  if (scenario.membership == "gossip") start_gossip();
}

SwarmSimulation::~SwarmSimulation() = default;

// --------------------------------------------------------------------------
// Setting up

void SwarmSimulation::add_peers() {
  const WorkloadSpec& w = scenario_.workload;
  const Placement placement = place_peers(scenario_);
  for (std::uint32_t rank = 0; rank < placement.trainer_nodes.size(); ++rank) {
    trainers_.push_back(add_peer(placement.trainer_nodes[rank], true, rank));
  }
  for (std::uint32_t node : placement.worker_nodes) {
    const std::uint32_t p = add_peer(node, false, 0);
    peers_[p].worker = static_cast<std::uint32_t>(workers_.size());
    workers_.push_back(p);
  }
  join_first_worker_ = placement.join_first_worker;
  for (std::size_t s = placement.first_spot_worker; s < workers_.size(); ++s) peers_[workers_[s]].core.reset();  // absent until they join
  for (std::size_t j = 0; j < w.joins.size(); ++j) events_.schedule(Event{w.joins[j].at, Kind::kJoin, 0, 0, {}, j});
  if (w.interval.count() > 0) {
    for (std::uint32_t v = 1; v <= w.versions; ++v) {
      events_.schedule(Event{TimePoint(w.interval * (v - 1)), Kind::kPublish, 0, 0, {}, v});
    }
  } else {
    events_.schedule(Event{kTimeZero, Kind::kPublish, 0, 0, {}, 1});
  }
  for (std::size_t f = 0; f < scenario_.faults.size(); ++f) {
    events_.schedule(Event{scenario_.faults[f].at, Kind::kFault, 0, 0, {}, f});
  }
}

std::uint32_t SwarmSimulation::add_peer(std::uint32_t node, bool trainer, std::uint32_t rank) {
  SimPeer p;
  for (std::size_t i = 0; i < p.id.bytes.size(); i += 8) {
    const std::uint64_t r = rng_.next();
    for (std::size_t b = 0; b < 8; ++b) p.id.bytes[i + b] = static_cast<std::uint8_t>(r >> (8 * b));
  }
  // With gossip, a peer's id is its gossip identity's key (records are signed).
  if (scenario_.membership == "gossip") p.id = GossipNetwork::identity_for(peers_.size()).public_key();
  p.node = node;
  const NodeInfo& info = topology_.node(node);
  p.location = swarm::Location{info.dc_name, info.rack_name, info.host_name};
  // Everyone knows where everyone is (gossip's records carry the labels):
  // one book that every core reads.
  locations_->set(p.id, p.location);
  p.core = new_core(p);
  p.trainer = trainer;
  p.rank = rank;
  const auto index = static_cast<std::uint32_t>(peers_.size());
  by_id_[p.id] = index;
  peers_.push_back(std::move(p));
  return index;
}

std::unique_ptr<swarm::SwarmCore> SwarmSimulation::new_core(const SimPeer& p) {
  return std::make_unique<swarm::SwarmCore>(swarm_config(scenario_), p.location, p.id, rng_.next(), locations_);
}

void SwarmSimulation::join(std::size_t index) {
  ++joins_done_;
  const std::uint32_t latest = ledger_->latest();
  std::vector<std::uint32_t> joined;
  for (std::size_t w = join_first_worker_[index]; w < join_first_worker_[index + 1]; ++w) {
    const std::uint32_t peer = workers_[w];
    SimPeer& p = peers_[peer];
    p.core = new_core(p);
    ledger_->worker_joined(w, now());
    joined.push_back(peer);
  }
  if (gossip_) {
    // They join through a trainer rank and learn the rest (and the head) by gossip.
    const std::vector<std::size_t> seeds{trainers_.front()};
    for (std::uint32_t peer : joined) gossip_->restart(peer, seeds);
    return advance_workload();
  }
  if (latest == 0) return advance_workload();  // nothing published yet: they fetch with everyone
  // Ideal membership: a joiner learns every live holder of the head at once,
  // and the workers still fetching it learn of the joiners.
  const ManifestId id = version_id(latest);
  for (std::uint32_t peer : joined) {
    SimPeer& p = peers_[peer];
    p.core->fetch(now(), id, layout_, core::Bitfield(layout_.shard_count()));
    const auto& done = ledger_->outcomes()[latest - 1].worker_done;
    for (std::uint32_t t : trainers_) {
      if (alive(t)) p.core->add_holder(now(), id, peers_[t].id, /*complete=*/true);
    }
    for (std::uint32_t other : workers_) {
      if (other != peer && alive(other)) p.core->add_holder(now(), id, peers_[other].id, done[peers_[other].worker].has_value());
    }
    drain(peer);
  }
  for (std::uint32_t other : workers_) {
    if (!alive(other) || std::find(joined.begin(), joined.end(), other) != joined.end()) continue;
    for (std::uint32_t peer : joined) peers_[other].core->add_holder(now(), id, peers_[peer].id);
    drain(other);
  }
  advance_workload();  // a join of no GPUs, or the last join after everything
}

ManifestId SwarmSimulation::version_id(std::uint32_t number) const {
  ManifestId id;
  core::SplitMix64 r(scenario_.seed * 1000003 + number);
  for (std::size_t i = 0; i < id.bytes.size(); i += 8) {
    const std::uint64_t v = r.next();
    for (std::size_t b = 0; b < 8; ++b) id.bytes[i + b] = static_cast<std::uint8_t>(v >> (8 * b));
  }
  return id;
}

// --------------------------------------------------------------------------
// The workload

void SwarmSimulation::publish(std::uint32_t number) {
  const ManifestId id = version_id(number);
  version_numbers_[id] = number;
  ledger_->publish(number, now());
  const std::uint32_t ranks = scenario_.model.trainer_ranks;
  const std::uint32_t shards = layout_.shard_count();
  for (std::uint32_t t : trainers_) {
    if (!alive(t)) continue;
    SimPeer& p = peers_[t];
    // The trainer's weights are the new version now: the old one is gone.
    if (number > 1) p.core->stop(now(), version_id(number - 1));
    core::Bitfield part(shards);
    for (std::uint32_t s = p.rank; s < shards; s += ranks) part.set(s);
    const bool whole = ranks == 1;
    p.core->serve(now(), id, layout_, std::move(part),
                  whole && scenario_.swarm.super_seed ? swarm::SwarmCore::ServeMode::kSuperSeed
                                                      : swarm::SwarmCore::ServeMode::kPlain);
    drain(t);
    if (gossip_) {
      gossip_->core(t).set_head(gossip::HeadEntry{kModel, number, id});
      if (number > 1) withdraw_holding(t, number - 1);
      announce_holding(t, number, 1000);
    }
  }
  if (gossip_) return;  // the workers hear of it by gossip
  // Ideal membership: every worker learns of every trainer rank and every
  // other worker (holders to be) of this version at once, in an order drawn
  // for the version. Within one instant the first told ask first and take
  // the holders' upload slots; in worker order that was rack after rack,
  // and whole racks came late (scale-1024 at 140 GB: racks 0-3 all done
  // by 1.05x the bound, racks 4-7 up to 1.88x; reversed, the other way).
  std::vector<std::uint32_t> told(workers_.begin(), workers_.end());
  for (std::size_t i = told.size(); i > 1; --i) std::swap(told[i - 1], told[rng_.below(i)]);
  for (std::uint32_t w : told) {
    if (!alive(w)) continue;
    peers_[w].core->fetch(now(), id, layout_, core::Bitfield(shards));
  }
  for (std::uint32_t w : told) {
    if (!alive(w)) continue;
    SimPeer& p = peers_[w];
    for (std::uint32_t t : trainers_) {
      if (alive(t)) p.core->add_holder(now(), id, peers_[t].id, /*complete=*/true);
    }
    for (std::uint32_t other : workers_) {
      if (other != w && alive(other)) p.core->add_holder(now(), id, peers_[other].id);
    }
    drain(w);
  }
}

void SwarmSimulation::on_worker_done(std::uint32_t peer, const ManifestId& version, const Status& status) {
  auto number = version_numbers_.find(version);
  if (number == version_numbers_.end() || !status.is_ok()) return;
  SimPeer& p = peers_[peer];
  if (auto progress = p.core->progress(version)) requests_timed_out_ += progress->requests_timed_out;
  ledger_->worker_done(number->second, p.worker, now());
  // A double buffer: the version before the one just completed is dropped.
  if (number->second > 1) p.core->stop(now(), version_id(number->second - 1));
  if (gossip_) {
    if (number->second > 1) withdraw_holding(peer, number->second - 1);
    announce_holding(peer, number->second, 1000);
  }
  advance_workload();
}

void SwarmSimulation::advance_workload() {
  switch (ledger_->next([this](std::size_t w) { return alive(workers_[w]); }, joins_done_ < scenario_.workload.joins.size())) {
    case VersionLedger::Next::kPublishNext:
      events_.schedule(Event{now(), Kind::kPublish, 0, 0, {}, ledger_->latest() + 1});
      break;
    case VersionLedger::Next::kFinished: finished_ = true; break;
    case VersionLedger::Next::kWait: break;
  }
}

// --------------------------------------------------------------------------
// Gossip mode

void SwarmSimulation::start_gossip() {
  gossip_ = std::make_unique<GossipNetwork>(scenario_.seed, gossip::GossipConfig{}, NetworkConditions{}, kTimeZero);
  gossip_->set_latency([this](std::size_t from, std::size_t to) {
    return topology_.latency(peers_[from].node, peers_[to].node);
  });
  for (std::uint32_t p = 0; p < peers_.size(); ++p) {
    const NodeInfo& node = topology_.node(peers_[p].node);
    gossip_->add_peer(gossip::Topology{node.dc_name, node.rack_name, node.host_name});
  }
  // Spot workers are not there yet; the rest start as a converged swarm.
  for (std::uint32_t p = 0; p < peers_.size(); ++p) {
    if (!alive(p)) gossip_->crash(p);
  }
  gossip_->preload_all();
  gossip_->on_event([this](std::size_t peer, const gossip::MemberEvent& e) {
    on_member_event(static_cast<std::uint32_t>(peer), e);
  });
}

void SwarmSimulation::on_member_event(std::uint32_t peer, const gossip::MemberEvent& e) {
  SimPeer& p = peers_[peer];
  if (!p.core) return;
  switch (e.kind) {
    case gossip::MemberEventKind::kDead:
    case gossip::MemberEventKind::kLeft:
    case gossip::MemberEventKind::kRemoved: p.core->peer_gone(now(), e.id); return drain(peer);
    default: break;
  }
  if (!e.record) return;
  const gossip::PeerRecord& r = e.record->record;
  for (const gossip::HeadEntry& head : r.heads) {
    auto number = version_numbers_.find(head.manifest_id);
    if (!p.trainer && number != version_numbers_.end() && number->second > p.newest) {
      start_fetch_from_gossip(peer, number->second);
    }
  }
  for (const gossip::HoldingEntry& h : r.holdings) {
    if (p.core->knows(h.manifest_id)) p.core->add_holder(now(), h.manifest_id, r.id, h.complete());
  }
  drain(peer);
}

void SwarmSimulation::start_fetch_from_gossip(std::uint32_t peer, std::uint32_t number) {
  SimPeer& p = peers_[peer];
  p.newest = number;
  const ManifestId id = version_id(number);
  p.core->fetch(now(), id, layout_, core::Bitfield(layout_.shard_count()));
  for (const gossip::MemberView& m : gossip_->core(peer).members()) {
    if (m.liveness != gossip::Liveness::kAlive || !m.record) continue;
    for (const gossip::HoldingEntry& h : m.record->record.holdings) {
      if (h.manifest_id == id) p.core->add_holder(now(), id, m.record->record.id, h.complete());
    }
  }
  // As the runtime does once the manifest checks out: the head goes into its
  // own record (so every record spreads it), and so does the fetch.
  gossip_->core(peer).set_head(gossip::HeadEntry{kModel, number, id});
  announce_holding(peer, number, 0);  // fetching: a neighbour for the other fetchers
  drain(peer);
}

void SwarmSimulation::announce_holding(std::uint32_t peer, std::uint32_t number, std::uint16_t permille) {
  gossip_->core(peer).set_holding(gossip::HoldingEntry{kModel, number, version_id(number), permille});
  gossip_->pump(peer);
}

void SwarmSimulation::withdraw_holding(std::uint32_t peer, std::uint32_t number) {
  gossip_->core(peer).remove_holding(kModel, number);
  gossip_->pump(peer);
}

// --------------------------------------------------------------------------
// Faults

void SwarmSimulation::fault(const FaultSpec& spec) {
  if (spec.kind == FaultSpec::Kind::kCrashNode) {
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      if (peers_[workers_[w]].node == spec.node && alive(workers_[w])) ledger_->worker_left(w, now());
    }
    for (std::uint32_t p = 0; p < peers_.size(); ++p) {
      if (peers_[p].node == spec.node && alive(p)) crash(p);
    }
    return;
  }
  if (spec.hash_fraction < 1) {
    if (slow_hashing_.size() <= spec.node) slow_hashing_.resize(spec.node + 1);
    const TimePoint until = spec.length == Duration::max() ? kTimeNever : now() + spec.length;
    slow_hashing_[spec.node].add(until, spec.hash_fraction);
  }
  if (spec.rate_fraction >= 1) return;
  const TimePoint until = link_faults_.degrade(now(), spec.node, spec.rate_fraction, spec.length);
  if (until != kTimeNever) events_.schedule(Event{until, Kind::kLinkRestore, 0, 0, {}, spec.node});
}

double SwarmSimulation::hash_fraction(std::uint32_t node) const {
  return node < slow_hashing_.size() ? slow_hashing_[node].fraction(now()) : 1.0;
}

void SwarmSimulation::crash(std::uint32_t peer) {
  peers_[peer].core.reset();
  ++peers_[peer].timer_generation;
  if (gossip_) gossip_->crash(peer);
  for (std::uint32_t other = 0; other < peers_.size(); ++other) {
    if (other == peer) continue;
    close_pipes(peer, other);
    if (!alive(other)) continue;
    // Connections break at once (RST); gossip declares the peer dead later.
    deliver_later(Event{now(), Kind::kDisconnected, other, peer, {}, 0});
    // Ideal membership: the news after failure_detection (with gossip, SWIM's own time).
    if (!gossip_) events_.schedule(Event{now() + scenario_.failure_detection, Kind::kPeerGone, other, peer, {}, 0});
  }
  // A worker that died no longer counts towards "every worker has it".
  advance_workload();
}

// --------------------------------------------------------------------------
// Carrying the cores' actions

SwarmSimulation::Pipe& SwarmSimulation::pipe(std::uint32_t from, std::uint32_t to) { return pipes_[{from, to}]; }

void SwarmSimulation::send_next(std::uint32_t from, std::uint32_t to) {
  Pipe& p = pipe(from, to);
  if (p.flow || p.queue.empty()) return;
  p.sending = std::move(p.queue.front());
  p.queue.pop_front();
  const Path path = topology_.path(peers_[from].node, peers_[to].node);
  const FlowId flow = network_.start_flow(now(), peers_[from].node, peers_[to].node, path.links, p.sending->length);
  ++flows_started_;
  p.flow = flow;
  flow_pipe_[flow.value] = {from, to};
}

void SwarmSimulation::close_pipes(std::uint32_t a, std::uint32_t b) {
  for (auto key : {std::pair{a, b}, std::pair{b, a}}) {
    auto it = pipes_.find(key);
    if (it == pipes_.end()) continue;
    if (it->second.flow) {
      network_.cancel_flow(now(), *it->second.flow);
      flow_pipe_.erase(it->second.flow->value);
    }
    pipes_.erase(it);
  }
}

void SwarmSimulation::on_flow_done(FlowId flow) {
  auto owner = flow_pipe_.find(flow.value);
  if (owner == flow_pipe_.end()) return;
  const auto [from, to] = owner->second;
  flow_pipe_.erase(owner);
  Pipe& p = pipe(from, to);
  QueuedPiece piece = std::move(*p.sending);
  p.sending.reset();
  p.flow.reset();
  peers_[from].bytes_sent += piece.length;
  for (LinkId link : topology_.path(peers_[from].node, peers_[to].node).links) {
    timeline_.add(now(), topology_.link_class(link), piece.length);
  }
  if (peers_[from].trainer) {
    auto number = version_numbers_.find(piece.header.version);
    if (number != version_numbers_.end()) ledger_->add_publisher_bytes(number->second, piece.length);
  }
  // The last byte reaches the fetcher one path latency after it left.
  deliver_later(Event{now(), Kind::kPiece, to, from, std::move(piece.header), 0});
  send_next(from, to);
}

void SwarmSimulation::deliver_later(Event e) {
  const std::uint32_t a = peers_[e.from].node, b = peers_[e.to].node;
  TimePoint at = std::max({e.at, link_faults_.down_until(a), link_faults_.down_until(b)});
  e.at = at + topology_.latency(a, b);
  events_.schedule(std::move(e));
}

void SwarmSimulation::arm(std::uint32_t peer) {
  SimPeer& p = peers_[peer];
  if (!p.core) return;
  const TimePoint t = std::max(p.core->next_timeout(), now());
  if (t == p.timer_at || t == kTimeNever) return;
  p.timer_at = t;
  events_.schedule(Event{t, Kind::kTimer, peer, peer, {}, ++p.timer_generation});
}

void SwarmSimulation::drain(std::uint32_t peer) {
  SimPeer& p = peers_[peer];
  while (p.core) {
    auto action = p.core->poll();
    if (!action) break;
    if (auto* open = std::get_if<swarm::OpenConnection>(&*action)) {
      auto to = by_id_.find(open->peer);
      if (to == by_id_.end()) continue;
      // TCP and the data-plane handshake: about 1.5 round trips.
      const Duration one_way = topology_.latency(p.node, peers_[to->second].node);
      const bool up = alive(to->second);
      events_.schedule(Event{now() + one_way * (up ? 3 : 20), up ? Kind::kConnected : Kind::kConnectFailed, peer,
                             to->second, {}, 0});
    } else if (auto* close = std::get_if<swarm::CloseConnection>(&*action)) {
      auto to = by_id_.find(close->peer);
      if (to == by_id_.end()) continue;
      close_pipes(peer, to->second);
      deliver_later(Event{now(), Kind::kDisconnected, to->second, peer, {}, 0});
    } else if (auto* send = std::get_if<swarm::SendMessage>(&*action)) {
      auto to = by_id_.find(send->peer);
      if (to != by_id_.end()) deliver_later(Event{now(), Kind::kMessage, to->second, peer, send->message, 0});
    } else if (auto* serve = std::get_if<swarm::ServePiece>(&*action)) {
      auto to = by_id_.find(serve->peer);
      if (to == by_id_.end()) continue;
      pipe(peer, to->second).queue.push_back(QueuedPiece{serve->header, serve->length});
      send_next(peer, to->second);
    } else if (auto* drop = std::get_if<swarm::DropQueuedPieces>(&*action)) {
      auto to = by_id_.find(drop->peer);
      if (to == by_id_.end()) continue;
      auto it = pipes_.find({peer, to->second});
      if (it == pipes_.end()) continue;
      std::erase_if(it->second.queue, [&](const QueuedPiece& q) { return q.header.version == drop->version; });
    } else if (auto* verify = std::get_if<swarm::VerifyShard>(&*action)) {
      // One hasher per peer: shards wait for the previous one. A slow host's
      // rate when the shard is handed over holds for the whole shard.
      const double bytes = static_cast<double>(layout_.shard_length(verify->shard));
      const double rate = scenario_.hash_bytes_per_second * hash_fraction(p.node);
      const auto micros = static_cast<std::int64_t>(std::ceil(1e6 * bytes / rate));
      p.hasher_free = std::max(p.hasher_free, now()) + Duration(micros);
      Event e{p.hasher_free, Kind::kVerified, peer, peer, {}, verify->shard.value};
      e.message.version = verify->version;
      events_.schedule(std::move(e));
    } else if (auto* finished = std::get_if<swarm::FetchFinished>(&*action)) {
      on_worker_done(peer, finished->version, finished->status);
    }
    else if (auto* held = std::get_if<swarm::ShardHeld>(&*action); held && gossip_ && !p.trainer) {
      // Coarse progress in the record (the gossip core coalesces re-signing).
      auto number = version_numbers_.find(held->version);
      const core::Bitfield* have = p.core->have(held->version);
      if (number != version_numbers_.end() && have) {
        announce_holding(peer, number->second, static_cast<std::uint16_t>(999 * have->count() / have->size()));
      }
    }
  }
  arm(peer);
}

void SwarmSimulation::dispatch(Event& e) {
  ++events_processed_;
  switch (e.kind) {
    case Kind::kPublish: publish(static_cast<std::uint32_t>(e.number)); return;
    case Kind::kFault: fault(scenario_.faults[e.number]); return;
    case Kind::kJoin: join(e.number); return;
    case Kind::kLinkRestore: link_faults_.restore(now(), static_cast<std::uint32_t>(e.number)); return;
    default: break;
  }
  SimPeer& p = peers_[e.to];
  if (!p.core) return;
  const bool from_the_dead = e.kind != Kind::kTimer && e.kind != Kind::kVerified && e.kind != Kind::kConnected &&
                             e.kind != Kind::kConnectFailed && e.kind != Kind::kDisconnected &&
                             e.kind != Kind::kPeerGone && !alive(e.from);
  if (from_the_dead) return;
  const PeerId& from = peers_[e.from].id;
  switch (e.kind) {
    case Kind::kMessage:
      if (e.message.type == swarm::MessageType::kCancel) {
        // As the data connection does: a piece still queued is dropped.
        auto it = pipes_.find({e.to, e.from});
        if (it != pipes_.end()) {
          std::erase_if(it->second.queue,
                        [&](const QueuedPiece& q) { return q.header.request_id == e.message.request_id; });
        }
        return;
      }
      p.core->on_message(now(), from, e.message);
      break;
    case Kind::kPiece: {
      auto target = p.core->begin_piece(now(), from, e.message);
      p.core->on_piece(now(), from, e.message, target && target->length == e.message.length);
      break;
    }
    case Kind::kConnected:
      if (alive(e.from)) {
        p.core->on_connected(now(), from);
      } else {
        p.core->on_connect_failed(now(), from);
      }
      break;
    case Kind::kConnectFailed: p.core->on_connect_failed(now(), from); break;
    case Kind::kDisconnected: p.core->on_disconnected(now(), from); break;
    case Kind::kPeerGone: p.core->peer_gone(now(), from); break;
    case Kind::kVerified:
      p.core->on_verified(now(), e.message.version, ShardIndex{static_cast<std::uint32_t>(e.number)}, true);
      break;
    case Kind::kTimer:
      if (e.number != p.timer_generation) return;
      p.timer_at = kTimeNever;
      p.core->handle_timeout(now());
      break;
    default: return;
  }
  drain(e.to);
}

// --------------------------------------------------------------------------
// Running

void SwarmSimulation::run_events_due(TimePoint now) {
  if (gossip_) {
    // Gossip's events first (each core's news reaches the swarm cores at `now`).
    events_.advance_to(now);
    gossip_->run_until(now);
  }
  events_.run_until(now, [this](Event& e) { dispatch(e); });
  // Progress only: reading the wall clock never changes the run.
  if (progress_ && throttle_.due()) progress_(*this);
}

void SwarmSimulation::on_flows_done(TimePoint now, std::span<const FlowId> flows) {
  events_.advance_to(now);
  for (FlowId f : flows) on_flow_done(f);
  ++events_processed_;
}

SimulationResult SwarmSimulation::run(const std::function<void(const SwarmSimulation&)>& progress) {
  progress_ = progress;
  const RunEnd end = network_.run(*this, kTimeZero + scenario_.time_limit);
  events_.advance_to(end.at);
  if (progress) progress(*this);
  std::vector<std::uint32_t> worker_nodes;
  for (std::uint32_t w : workers_) worker_nodes.push_back(peers_[w].node);
  SimulationResult result = SimulationResult::of_run(end, finished_, *ledger_, timeline_, network_, std::move(worker_nodes));
  result.events = events_processed_;
  result.flows = flows_started_;
  result.trainer_ranks = trainers_.size();
  for (const SimPeer& p : peers_) {
    if (p.core) result.discarded_piece_bytes += p.core->discarded_piece_bytes();
  }
  result.requests_timed_out = requests_timed_out_;
  if (gossip_) result.gossip_datagrams = gossip_->datagrams_sent();
  return result;
}

}  // namespace tensorhub::sim
