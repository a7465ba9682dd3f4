#include "sim/gossip_network.hpp"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace tensorhub::sim {
namespace {

using namespace std::chrono_literals;

// Each distinct signed record is decoded and verified once for the whole
// process; every core gets the same immutable object.
class SharedRecordDecoder final : public gossip::RecordDecoder {
 public:
  Result<gossip::RecordPtr> decode(std::span<const std::uint8_t> encoded) override {
    std::string key(reinterpret_cast<const char*>(encoded.data()), encoded.size());
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    auto decoded = gossip::decode_record(encoded);
    if (!decoded) return decoded.status();
    cache_.emplace(std::move(key), *decoded);
    return *decoded;
  }

 private:
  std::unordered_map<std::string, gossip::RecordPtr> cache_;
};

SwarmKey swarm_key(std::uint8_t fill) {
  std::array<std::uint8_t, 32> bytes{};
  bytes.fill(fill);
  return SwarmKey::from_bytes(bytes);
}

}  // namespace

Identity GossipNetwork::identity_for(std::uint64_t key_index) {
  std::array<std::uint8_t, 32> seed{};
  std::memcpy(seed.data(), &key_index, sizeof key_index);
  seed[31] = 0x7e;
  return Identity::from_seed(seed);
}

SwarmKey GossipNetwork::members_key() { return swarm_key(0x11); }

void GossipNetwork::inject_datagram(std::size_t to, const std::string& from_address, std::vector<std::uint8_t> bytes) {
  schedule(Event{now() + conditions_.latency, EventKind::kDatagram, to, 0, from_address, std::move(bytes), 0});
}

GossipNetwork::GossipNetwork(std::uint64_t seed, gossip::GossipConfig config, NetworkConditions conditions,
                             TimePoint start)
    : config_(config),
      conditions_(conditions),
      rng_(seed),
      seed_(seed),
      events_(start),
      decoder_(std::make_shared<SharedRecordDecoder>()) {}

GossipNetwork::~GossipNetwork() = default;

std::unique_ptr<gossip::GossipCore> GossipNetwork::make_core(std::size_t peer, bool outsider,
                                                             std::optional<std::uint64_t> incarnation_at_start) {
  Peer& p = peers_[peer];
  gossip::LocalPeerInfo local{p.address, "", p.topology};
  // Incarnations start at the virtual time in ms: a restart comes back higher.
  const auto incarnation = incarnation_at_start.value_or(
      static_cast<std::uint64_t>(now().time_since_epoch().count() / 1000) + 1);
  return std::make_unique<gossip::GossipCore>(config_, identity_for(p.key_index), swarm_key(outsider ? 0x66 : 0x11),
                                              local, incarnation, seed_ * 1000003 + peer * 7919 + incarnation, now(),
                                              decoder_);
}

std::size_t GossipNetwork::add_peer(gossip::Topology topology, std::optional<std::uint64_t> key_index) {
  const std::size_t index = peers_.size();
  Peer p;
  p.address = "10." + std::to_string((index >> 16) & 255) + "." + std::to_string((index >> 8) & 255) + "." +
              std::to_string(index & 255) + ":7946";
  p.key_index = key_index.value_or(index);
  p.id = identity_for(p.key_index).public_key();
  p.topology = std::move(topology);
  peers_.push_back(std::move(p));
  by_address_[peers_[index].address] = index;
  peers_[index].core = make_core(index, false);
  arm_timer(index);
  return index;
}

std::size_t GossipNetwork::add_outsider() {
  const std::size_t index = add_peer();
  peers_[index].outsider = true;
  peers_[index].core = make_core(index, true);
  arm_timer(index);
  return index;
}

void GossipNetwork::join(std::size_t peer, const std::vector<std::size_t>& seeds) {
  std::vector<std::string> addresses;
  for (std::size_t s : seeds) addresses.push_back(peers_[s].address);
  peers_[peer].core->join(now(), addresses);
  drain(peer);
}

void GossipNetwork::preload_all() {
  std::vector<gossip::RecordPtr> records;
  for (const Peer& p : peers_) {
    if (p.core && !p.outsider) records.push_back(p.core->self_record());
  }
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i].core || peers_[i].outsider) continue;
    peers_[i].core->preload(now(), records);
    drain(i);
  }
}

std::optional<std::size_t> GossipNetwork::index_of(const PeerId& id) const {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].id == id) return i;
  }
  return std::nullopt;
}

std::optional<std::size_t> GossipNetwork::peer_at(const std::string& address) const {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  return it->second;
}

void GossipNetwork::crash(std::size_t peer) {
  peers_[peer].core.reset();
  ++peers_[peer].timer_generation;
  break_streams_of(peer);
}

void GossipNetwork::restart(std::size_t peer, const std::vector<std::size_t>& seeds,
                            std::optional<std::uint64_t> incarnation) {
  peers_[peer].core = make_core(peer, peers_[peer].outsider, incarnation);
  peers_[peer].stalled_until = TimePoint{};
  arm_timer(peer);
  join(peer, seeds);
}

void GossipNetwork::leave(std::size_t peer) {
  peers_[peer].core->leave(now());
  drain(peer);
}

void GossipNetwork::stall(std::size_t peer, Duration how_long) { peers_[peer].stalled_until = now() + how_long; }

void GossipNetwork::partition(const std::vector<std::vector<std::size_t>>& groups) {
  for (Peer& p : peers_) p.group = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t peer : groups[g]) peers_[peer].group = static_cast<int>(g + 1);
  }
  // Connections across the cut break.
  std::vector<std::pair<std::size_t, gossip::StreamId>> broken;
  for (const auto& [key, link] : streams_) {
    if (!reachable(link->a, link->b)) broken.push_back(key);
  }
  for (const auto& key : broken) {
    auto it = streams_.find(key);
    if (it == streams_.end()) continue;
    auto link = it->second;
    streams_.erase({link->a, link->a_id});
    streams_.erase({link->b, link->b_id});
    schedule(Event{now() + latency(link->b, link->a), EventKind::kStreamClosed, link->a, 0, {}, {}, link->a_id});
    schedule(Event{now() + latency(link->a, link->b), EventKind::kStreamClosed, link->b, 0, {}, {}, link->b_id});
  }
}

void GossipNetwork::heal() {
  for (Peer& p : peers_) p.group = 0;
}

bool GossipNetwork::reachable(std::size_t from, std::size_t to) const {
  return peers_[from].group == peers_[to].group;
}

void GossipNetwork::break_streams_of(std::size_t peer) {
  std::vector<std::shared_ptr<StreamLink>> links;
  for (const auto& [key, link] : streams_) {
    if (key.first == peer) links.push_back(link);
  }
  for (const auto& link : links) {
    streams_.erase({link->a, link->a_id});
    streams_.erase({link->b, link->b_id});
    const std::size_t other = link->a == peer ? link->b : link->a;
    const gossip::StreamId other_id = link->a == peer ? link->b_id : link->a_id;
    schedule(Event{now() + latency(peer, other), EventKind::kStreamClosed, other, 0, {}, {}, other_id});
  }
}

Duration GossipNetwork::datagram_delay(std::size_t from, std::size_t to) {
  Duration d = latency(from, to);
  if (conditions_.jitter.count() > 0) d += Duration(static_cast<std::int64_t>(rng_.below(conditions_.jitter.count() + 1)));
  return d;
}

void GossipNetwork::schedule(Event e) {
  events_.schedule(std::move(e));
}

void GossipNetwork::arm_timer(std::size_t peer) {
  Peer& p = peers_[peer];
  if (!p.core) return;
  const TimePoint t = std::max(p.core->next_timeout(), now());
  if (t == p.timer_at) return;
  p.timer_at = t;
  schedule(Event{t, EventKind::kTimer, peer, ++p.timer_generation, {}, {}, 0});
}

void GossipNetwork::stream_send(std::size_t from, gossip::StreamId from_id, std::vector<std::uint8_t> frame) {
  auto it = streams_.find({from, from_id});
  if (it == streams_.end()) return;
  StreamLink& link = *it->second;
  const bool forward = link.a == from && link.a_id == from_id;
  TimePoint& clock = forward ? link.a_to_b_clock : link.b_to_a_clock;
  clock = std::max(clock, now() + latency(link.a, link.b));
  schedule(Event{clock, EventKind::kStreamFrame, forward ? link.b : link.a, 0, {}, std::move(frame),
                 forward ? link.b_id : link.a_id});
}

void GossipNetwork::stream_close(std::size_t from, gossip::StreamId from_id) {
  auto it = streams_.find({from, from_id});
  if (it == streams_.end()) return;
  auto link = it->second;
  const bool forward = link->a == from && link->a_id == from_id;
  TimePoint& clock = forward ? link->a_to_b_clock : link->b_to_a_clock;
  clock = std::max(clock, now() + latency(link->a, link->b));
  // The close follows the frames already in flight in this direction.
  schedule(Event{clock, EventKind::kStreamClosed, forward ? link->b : link->a, 0, {}, {},
                 forward ? link->b_id : link->a_id});
  streams_.erase({link->a, link->a_id});
  streams_.erase({link->b, link->b_id});
}

void GossipNetwork::drain(std::size_t peer) {
  Peer& p = peers_[peer];
  if (!p.core) return;
  while (auto d = p.core->poll_datagram()) {
    ++datagrams_sent_;
    auto to = peer_at(d->to);
    if (!to || !reachable(peer, *to) || rng_.unit() < conditions_.loss) {
      ++datagrams_lost_;
      continue;
    }
    if (datagram_tap_) datagram_tap_(peer, *to, d->bytes);
    const int copies = rng_.unit() < conditions_.duplicate ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      schedule(Event{now() + datagram_delay(peer, *to), EventKind::kDatagram, *to, 0, p.address, d->bytes, 0});
    }
  }
  while (auto a = p.core->poll_stream()) {
    switch (a->kind) {
      case gossip::StreamAction::Kind::kOpen: {
        auto to = peer_at(a->to);
        if (!to || !peers_[*to].core || !reachable(peer, *to)) {
          // Connection refused or timed out.
          schedule(Event{now() + conditions_.latency * 2, EventKind::kStreamClosed, peer, 0, {}, {}, a->id});  // no route: no pair latency
          break;
        }
        auto link = std::make_shared<StreamLink>();
        link->a = peer;
        link->a_id = a->id;
        link->b = *to;
        link->b_id = gossip::kInboundStreamBit | next_inbound_stream_++;
        link->a_to_b_clock = now() + latency(peer, *to);
        link->b_to_a_clock = now();
        streams_[{link->a, link->a_id}] = link;
        streams_[{link->b, link->b_id}] = link;
        schedule(Event{link->a_to_b_clock, EventKind::kStreamAccepted, *to, 0, p.address, {}, link->b_id});
        stream_send(peer, a->id, std::move(a->frame));
        break;
      }
      case gossip::StreamAction::Kind::kSend: stream_send(peer, a->id, std::move(a->frame)); break;
      case gossip::StreamAction::Kind::kClose: stream_close(peer, a->id); break;
    }
  }
  while (auto e = p.core->poll_event()) {
    if (event_handler_) event_handler_(peer, *e);
  }
  arm_timer(peer);
}

void GossipNetwork::dispatch(Event& e) {
  Peer& p = peers_[e.peer];
  if (!p.core) return;  // crashed: everything addressed to it is lost
  if (e.kind == EventKind::kTimer && e.generation != p.timer_generation) return;
  if (p.stalled_until > now()) {
    // Paused: the event waits for the pause to end, in its original order.
    if (e.kind == EventKind::kTimer) {
      p.timer_at = p.stalled_until;
      e.generation = ++p.timer_generation;
    }
    e.at = p.stalled_until;
    events_.requeue(std::move(e));
    return;
  }
  switch (e.kind) {
    case EventKind::kDatagram: p.core->handle_datagram(now(), e.from, e.bytes); break;
    case EventKind::kTimer:
      p.timer_at = kTimeNever;
      p.core->handle_timeout(now());
      // A core must move its deadline past now when it runs; one that does
      // not would spin forever at one instant.
      if (p.core->next_timeout() <= now()) {
        throw std::logic_error("gossip core at " + p.address + " wants to run again at the same instant");
      }
      break;
    case EventKind::kStreamAccepted: p.core->handle_stream_accepted(now(), e.stream, e.from); break;
    case EventKind::kStreamFrame: p.core->handle_stream_frame(now(), e.stream, e.bytes); break;
    case EventKind::kStreamClosed: p.core->handle_stream_closed(now(), e.stream); break;
  }
  drain(e.peer);
}

void GossipNetwork::run_until(TimePoint t) {
  events_.run_until(t, [this](Event& e) { dispatch(e); });
}

bool GossipNetwork::run_until(const std::function<bool()>& done, Duration limit, Duration step) {
  return events_.run_until(done, limit, step, [this](Event& e) { dispatch(e); });
}

std::optional<gossip::Liveness> GossipNetwork::view(std::size_t observer, std::size_t subject) const {
  auto m = peers_[observer].core->member(peers_[subject].id);
  if (!m) return std::nullopt;
  return m->liveness;
}

bool GossipNetwork::converged() const {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i].core || peers_[i].outsider) continue;
    for (std::size_t j = 0; j < peers_.size(); ++j) {
      if (i == j || !peers_[j].core || peers_[j].outsider || peers_[j].core->leaving()) continue;
      if (view(i, j) != gossip::Liveness::kAlive) return false;
    }
  }
  return true;
}

}  // namespace tensorhub::sim
