#include "sim/swarm_simulation.hpp"

#include "sim/placement.hpp"

#include "core/overloaded.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

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

// Each distinct manifest encoding is decoded once for every core.
class SharedManifestDecoder final : public peer::ManifestDecoder {
 public:
  Result<std::shared_ptr<const Manifest>> decode(std::span<const std::uint8_t> encoded) override {
    std::string key(reinterpret_cast<const char*>(encoded.data()), encoded.size());
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    auto m = decode_manifest(encoded);
    if (!m) return m.status();
    auto shared = std::make_shared<const Manifest>(std::move(*m));
    cache_.emplace(std::move(key), shared);
    return shared;
  }

 private:
  std::unordered_map<std::string, std::shared_ptr<const Manifest>> cache_;
};

// The key that signs every version (any identity: the trainer's).
constexpr std::uint64_t kTrainerKeyIndex = 1'000'000'007;

}  // namespace

SwarmSimulation::SwarmSimulation(const Scenario& scenario, NetworkModel& network)
    : scenario_(scenario),
      network_(network),
      topology_(scenario.topology, network),
      layout_{scenario.model.size, scenario.model.shard_size, scenario.model.flow_size},
      rng_(scenario.seed),
      link_faults_(topology_, network),
      trainer_key_(GossipNetwork::identity_for(kTrainerKeyIndex)),
      decoder_(std::make_shared<SharedManifestDecoder>()) {
  add_peers();
  const std::size_t first_spot = place_peers(scenario).first_spot_worker;
  ledger_.emplace(scenario.workload, workers_.size(), first_spot);
  if (scenario.membership == "gossip") start_gossip();
  // Spot workers are not there yet; everyone else starts now.
  std::vector<bool> absent(peers_.size(), false);
  for (std::size_t s = first_spot; s < workers_.size(); ++s) absent[workers_[s]] = true;
  for (std::uint32_t p = 0; p < peers_.size(); ++p) {
    if (!absent[p]) peers_[p].core = new_core(p);
  }
}

SwarmSimulation::~SwarmSimulation() = default;

// --------------------------------------------------------------------------
// Setting up

void SwarmSimulation::add_peers() {
  const WorkloadSpec& w = scenario_.workload;
  const Placement placement = place_peers(scenario_);
  for (std::uint32_t rank = 0; rank < placement.trainer_nodes.size(); ++rank) {
    trainers_.push_back(add_peer(placement.trainer_nodes[rank], placement.trainer_gpus[rank], true, rank));
  }
  if (scenario_.inference.enabled()) plan_.emplace(scenario_);
  for (std::size_t i = 0; i < placement.worker_nodes.size(); ++i) {
    const std::uint32_t p = add_peer(placement.worker_nodes[i], placement.worker_gpus[i], false, 0);
    peers_[p].worker = static_cast<std::uint32_t>(workers_.size());
    if (plan_) peers_[p].slice = peers_[p].worker % plan_->slices();
    workers_.push_back(p);
  }
  join_first_worker_ = placement.join_first_worker;
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

std::uint32_t SwarmSimulation::add_peer(std::uint32_t node, std::uint32_t gpu, bool trainer, std::uint32_t rank) {
  SimPeer p;
  for (std::size_t i = 0; i < p.id.bytes.size(); i += 8) {
    const std::uint64_t r = rng_.next();
    for (std::size_t b = 0; b < 8; ++b) p.id.bytes[i + b] = static_cast<std::uint8_t>(r >> (8 * b));
  }
  // With gossip, a peer's id is its gossip identity's key (records are signed).
  if (scenario_.membership == "gossip") p.id = GossipNetwork::identity_for(peers_.size()).public_key();
  p.node = node;
  p.endpoint = topology_.endpoint(node, gpu);
  const NodeInfo& info = topology_.node(node);
  p.location = swarm::Location{info.dc_name, info.rack_name, info.host_name};
  // Everyone knows where everyone is (gossip's records carry the labels):
  // one book that every core reads.
  locations_->set(p.id, p.location);
  p.seed = rng_.next();
  p.trainer = trainer;
  p.rank = rank;
  const auto index = static_cast<std::uint32_t>(peers_.size());
  by_id_[p.id] = index;
  peers_.push_back(std::move(p));
  return index;
}

std::unique_ptr<peer::PeerCore> SwarmSimulation::new_core(std::uint32_t peer) {
  const SimPeer& p = peers_[peer];
  peer::PeerCoreConfig c;
  c.swarm = swarm_config(scenario_);
  c.location = p.location;
  c.trusted_publishers = {trainer_key_->public_key()};
  c.retention = swarm::RetentionPolicy{0, Duration(0)};  // the driver releases what it no longer needs
  c.super_seed = scenario_.swarm.super_seed;
  return std::make_unique<peer::PeerCore>(std::move(c), p.id, p.seed, gossip_ ? &gossip_->core(peer) : nullptr,
                                          locations_, decoder_);
}

void SwarmSimulation::join(std::size_t index) {
  ++joins_done_;
  const std::uint32_t latest = ledger_->latest();
  std::vector<std::uint32_t> joined;
  for (std::size_t w = join_first_worker_[index]; w < join_first_worker_[index + 1]; ++w) {
    const std::uint32_t peer = workers_[w];
    peers_[peer].seed = rng_.next();
    ledger_->worker_joined(w, now());
    joined.push_back(peer);
  }
  if (gossip_) {
    // They join through a trainer rank and learn the rest (and the head) by gossip.
    const std::vector<std::size_t> seeds{trainers_.front()};
    for (std::uint32_t peer : joined) {
      gossip_->restart(peer, seeds);
      peers_[peer].core = new_core(peer);
    }
    return advance_workload();
  }
  for (std::uint32_t peer : joined) peers_[peer].core = new_core(peer);
  if (latest == 0) return advance_workload();  // nothing published yet: they fetch with everyone
  // Ideal membership: a joiner gets the head's manifest and learns every
  // live holder of it at once, and the workers still fetching it learn of
  // the joiners.
  const ManifestId id = version_id(latest);
  for (std::uint32_t peer : joined) {
    SimPeer& p = peers_[peer];
    (void)p.core->learn_manifest(now(), manifest(latest));
    drain(peer);  // it fetches the head
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
    for (std::uint32_t peer : joined) peers_[other].core->add_holder(now(), id, peers_[peer].id, false);
    drain(other);
  }
  advance_workload();  // a join of no GPUs, or the last join after everything
}

std::shared_ptr<const Manifest> SwarmSimulation::signed_manifest(const std::string& model, std::uint32_t number,
                                                                 const ManifestId& parent,
                                                                 const swarm::ShardLayout& layout,
                                                                 std::uint64_t digest_seed) const {
  ManifestBody body;
  body.model = model;
  body.version = number;
  body.parent = parent;
  body.publisher = trainer_key_->public_key();
  body.shard_size = layout.shard_size;
  body.total_size = layout.total_size;
  body.tensors.push_back(TensorEntry{"weights", DType::kU8, {layout.total_size}, 0, layout.total_size});
  // Digests drawn per version: every shard changes, as a training step changes every weight.
  core::SplitMix64 r(digest_seed);
  for (std::uint32_t s = 0; s < layout.shard_count(); ++s) {
    ShardEntry e;
    e.byte_offset = layout.shard_offset(ShardIndex{s});
    e.byte_length = layout.shard_length(ShardIndex{s});
    e.digest.size = 16;
    const std::uint64_t a = r.next(), b = r.next();
    std::memcpy(e.digest.bytes.data(), &a, 8);
    std::memcpy(e.digest.bytes.data() + 8, &b, 8);
    body.shards.push_back(e);
  }
  auto m = sign_manifest(std::move(body), *trainer_key_);
  if (!m) throw std::invalid_argument("the simulated version cannot have a manifest: " + m.status().to_string());
  return std::make_shared<const Manifest>(std::move(*m));
}

const std::shared_ptr<const Manifest>& SwarmSimulation::manifest(std::uint32_t number) {
  while (manifests_.size() < number) {
    const auto n = static_cast<std::uint32_t>(manifests_.size() + 1);
    const ManifestId parent = n > 1 ? manifests_.back()->id() : ManifestId{};
    manifests_.push_back(signed_manifest(kModel, n, parent, layout_, scenario_.seed * 1000003 + n));
    version_numbers_[manifests_.back()->id()] = n;
  }
  return manifests_[number - 1];
}

// --------------------------------------------------------------------------
// The workload

void SwarmSimulation::publish(std::uint32_t number) {
  if (plan_) return publish_images(number);
  const std::shared_ptr<const Manifest> m = manifest(number);
  const ManifestId id = m->id();
  ledger_->publish(number, now());
  const std::uint32_t ranks = scenario_.model.trainer_ranks;
  const std::uint32_t shards = layout_.shard_count();
  for (std::uint32_t t : trainers_) {
    if (!alive(t)) continue;
    SimPeer& p = peers_[t];
    // The trainer's weights are the new version now: the old one is gone.
    if (number > 1) release(t, number - 1);
    core::Bitfield part;  // empty: the whole version
    if (ranks > 1) {
      part = core::Bitfield(shards);
      for (std::uint32_t s = p.rank; s < shards; s += ranks) part.set(s);
    }
    auto published = p.core->publish(now(), m, {}, std::move(part));
    if (!published) throw std::logic_error("a trainer rank could not publish: " + published.status().to_string());
    drain(t);
  }
  if (gossip_) return;  // the workers hear of it by gossip
  // Ideal membership: every worker gets the manifest and learns of every
  // trainer rank and every other worker (holders to be) of this version at
  // once, in an order drawn for the version. Within one instant the first
  // told ask first and take the holders' upload slots; told in worker order,
  // rack after rack, whole racks would come late.
  std::vector<std::uint32_t> told(workers_.begin(), workers_.end());
  for (std::size_t i = told.size(); i > 1; --i) std::swap(told[i - 1], told[rng_.below(i)]);
  for (std::uint32_t w : told) {
    if (!alive(w)) continue;
    (void)peers_[w].core->learn_manifest(now(), m);
    drain(w);  // it fetches the new head
  }
  for (std::uint32_t w : told) {
    if (!alive(w)) continue;
    SimPeer& p = peers_[w];
    for (std::uint32_t t : trainers_) {
      if (alive(t)) p.core->add_holder(now(), id, peers_[t].id, /*complete=*/true);
    }
    for (std::uint32_t other : workers_) {
      if (other != w && alive(other)) p.core->add_holder(now(), id, peers_[other].id, false);
    }
    drain(w);
  }
}

void SwarmSimulation::release(std::uint32_t peer, std::uint32_t number) {
  if (plan_) return release_images(peer, number);
  SimPeer& p = peers_[peer];
  if (number == 0 || number > manifests_.size()) return;
  if (auto v = p.core->find(manifests_[number - 1]->id())) {
    p.core->release(now(), v, peer::ReleaseMode::kNow);
  }
}

void SwarmSimulation::on_head(std::uint32_t peer, const VersionInfo& head) {
  if (plan_) return fetch_image(peer, head);
  SimPeer& p = peers_[peer];
  auto number = version_numbers_.find(head.id);
  if (p.trainer || number == version_numbers_.end() || number->second <= p.newest) return;
  p.newest = number->second;
  auto m = p.core->resolve(head.model, number_of(head));
  if (!m) return;
  (void)p.core->fetch(now(), *m, {});
}

void SwarmSimulation::on_worker_done(std::uint32_t peer, const ManifestId& version_id, const Status& status) {
  if (plan_) return on_image_done(peer, version_id, status);
  auto number = version_numbers_.find(version_id);
  if (number == version_numbers_.end() || !status.is_ok()) return;
  SimPeer& p = peers_[peer];
  if (auto progress = p.core->swarm().progress(version_id)) requests_timed_out_ += progress->requests_timed_out;
  ledger_->worker_done(number->second, p.worker, now());
  // A double buffer: the version before the one just completed is dropped.
  if (number->second > 1) release(peer, number->second - 1);
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
  const std::size_t first_spot = place_peers(scenario_).first_spot_worker;
  for (std::size_t s = first_spot; s < workers_.size(); ++s) gossip_->crash(workers_[s]);
  gossip_->preload_all();
  gossip_->on_event([this](std::size_t peer, const gossip::MemberEvent& e) {
    SimPeer& p = peers_[peer];
    if (!p.core) return;
    p.core->on_member_event(now(), e);
    drain(static_cast<std::uint32_t>(peer));
  });
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
  peers_[peer].timer.cancel();
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
  const Path path = topology_.path(peers_[from].endpoint, peers_[to].endpoint);
  const FlowId flow = network_.start_flow(now(), peers_[from].endpoint, peers_[to].endpoint, path.links, p.sending->length);
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
  peers_[to].bytes_received += piece.length;
  for (LinkId link : topology_.path(peers_[from].endpoint, peers_[to].endpoint).links) {
    timeline_.add(now(), topology_.link_class(link), piece.length);
  }
  if (peers_[from].trainer) {
    auto number = version_numbers_.find(piece.header.version_id);
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
  if (auto generation = p.timer.rearm(p.core->next_timeout(), now())) {
    events_.schedule(Event{p.timer.at(), Kind::kTimer, peer, peer, {}, *generation});
  }
}

void SwarmSimulation::drain(std::uint32_t peer) {
  SimPeer& p = peers_[peer];
  while (p.core) {
    auto action = p.core->poll();
    if (!action) break;
    std::visit(
        core::Overloaded{
            [&](swarm::OpenConnection& open) {
              auto to = by_id_.find(open.peer);
              if (to == by_id_.end()) return;
              // TCP and the data-plane handshake: about 1.5 round trips.
              const Duration one_way = topology_.latency(p.node, peers_[to->second].node);
              const bool up = alive(to->second);
              events_.schedule(Event{now() + one_way * (up ? 3 : 20), up ? Kind::kConnected : Kind::kConnectFailed,
                                     peer, to->second, {}, 0});
            },
            [&](swarm::CloseConnection& close) {
              auto to = by_id_.find(close.peer);
              if (to == by_id_.end()) return;
              close_pipes(peer, to->second);
              deliver_later(Event{now(), Kind::kDisconnected, to->second, peer, {}, 0});
            },
            [&](swarm::SendMessage& send) {
              auto to = by_id_.find(send.peer);
              if (to == by_id_.end()) return;
              if (send.message.type == swarm::MessageType::kGetManifest && !scenario_.manifest_round_trip) {
                // Free: the answer is here at once, as if the record had carried it.
                auto number = version_numbers_.find(send.message.version_id);
                if (number != version_numbers_.end()) {
                  const auto encoded = manifests_[number->second - 1]->encoded();
                  p.core->on_message(now(), send.peer,
                                     swarm::SwarmMessage::with_bytes(swarm::MessageType::kManifest,
                                                                     send.message.version_id,
                                                                     {encoded.begin(), encoded.end()}));
                  return;
                }
              }
              deliver_later(Event{now(), Kind::kMessage, to->second, peer, std::move(send.message), 0});
            },
            [&](swarm::ServePiece& serve) {
              auto to = by_id_.find(serve.peer);
              if (to == by_id_.end()) return;
              pipe(peer, to->second).queue.push_back(QueuedPiece{serve.header, serve.length});
              send_next(peer, to->second);
            },
            [&](swarm::DropQueuedPieces& drop) {
              auto to = by_id_.find(drop.peer);
              if (to == by_id_.end()) return;
              auto it = pipes_.find({peer, to->second});
              if (it == pipes_.end()) return;
              std::erase_if(it->second.queue,
                            [&](const QueuedPiece& q) { return q.header.version_id == drop.version_id; });
            },
            [&](peer::CancelQueuedPiece& cancel) {
              // As the data connection does: a piece still queued is dropped.
              auto to = by_id_.find(cancel.peer);
              if (to == by_id_.end()) return;
              auto it = pipes_.find({peer, to->second});
              if (it == pipes_.end()) return;
              std::erase_if(it->second.queue,
                            [&](const QueuedPiece& q) { return q.header.request_id == cancel.request_id; });
            },
            [&](peer::HashShard& hash) {
              // One hasher per peer: shards wait for the previous one. A slow
              // host's rate when the shard is handed over holds for the whole shard.
              const double bytes = static_cast<double>(hash.version->manifest->shard(hash.shard).byte_length);
              const double rate = scenario_.hash_bytes_per_second * hash_fraction(p.node);
              const auto micros = static_cast<std::int64_t>(std::ceil(1e6 * bytes / rate));
              p.hasher_free = std::max(p.hasher_free, now()) + Duration(micros);
              Event e{p.hasher_free, Kind::kVerified, peer, peer, {}, hash.shard.value};
              e.message.version_id = hash.version->id;
              e.message.offset = hash.fetch_serial;  // the fetch the result is for
              events_.schedule(std::move(e));
            },
            // Simulated versions share no bytes and hosts share no memory:
            // these never come; counted, should they.
            [&](peer::CopyShards&) { ++actions_ignored_["copy_shards"]; },
            [&](peer::CopyFromMate&) { ++actions_ignored_["copy_from_mate"]; },
            // No piece holds simulated memory and nobody waits for it.
            [](peer::ReleaseMemory&) {},
            [&](peer::FetchDone& done) {
              if (!p.trainer) on_worker_done(peer, done.version->id, done.status);
            },
            [&](peer::HeadChanged& head) { on_head(peer, head.head); },
            [&](peer::GossipChanged&) {
              if (gossip_) gossip_->pump(peer);
            },
            // For applications and operators: no simulated reader waits or reads logs.
            [&](peer::StateChanged&) { ++actions_ignored_["state_changed"]; },
            [&](peer::Report&) { ++actions_ignored_["report"]; },
        },
        *action);
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
    case Kind::kMessage: p.core->on_message(now(), from, e.message); break;
    case Kind::kPiece: {
      // Header and payload arrive at once: the piece lands whole.
      p.core->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) {
        const auto landing = p.core->landing_for(path.begin_piece(at, from, e.message));
        path.on_piece(at, from, e.message, landing && landing->length == e.message.length);
      });
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
      p.core->pieces(now(), [&](swarm::PiecePath& path, TimePoint at) {
        path.on_verified(at, e.message.version_id, ShardIndex{static_cast<std::uint32_t>(e.number)}, e.message.offset,
                         true);
      });
      break;
    case Kind::kTimer:
      if (!p.timer.fires(e.number)) return;
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
  for (std::uint32_t w : workers_) {
    result.worker_received.push_back(peers_[w].bytes_received);
    result.worker_wanted.push_back(plan_ ? plan_->fetched_bytes(peers_[w].slice) : layout_.total_size);
  }
  result.events = events_processed_;
  result.flows = flows_started_;
  result.trainer_ranks = trainers_.size();
  for (const SimPeer& p : peers_) {
    if (p.core) result.discarded_piece_bytes += p.core->swarm().discarded_piece_bytes();
  }
  result.requests_timed_out = requests_timed_out_;
  result.actions_ignored = actions_ignored_;
  if (gossip_) result.gossip_datagrams = gossip_->datagrams_sent();
  return result;
}

}  // namespace tensorhub::sim
