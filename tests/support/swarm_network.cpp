#include "support/swarm_network.hpp"

#include <cstring>
#include <stdexcept>

#include "core/overloaded.hpp"
#include "support/gossip_network.hpp"

namespace tensorhub::testing {

using namespace std::chrono_literals;

SwarmNetwork::SwarmNetwork(std::uint64_t seed, const Manifest& manifest, std::vector<std::byte> image,
                           swarm::SwarmConfig config)
    : manifest_(manifest),
      image_(std::move(image)),
      layout_{manifest.total_size(), manifest.shard_size(), config.fetch.block_size},
      config_(config),
      rng_(seed) {
  if (image_.size() != manifest.total_size()) throw std::invalid_argument("image does not match the manifest");
}

std::size_t SwarmNetwork::add_holder(swarm::Location where, double uplink, swarm::SwarmCore::ServeMode mode) {
  return add_peer(std::move(where), uplink, true, mode);
}

std::size_t SwarmNetwork::add_fetcher(swarm::Location where, double uplink) {
  return add_peer(std::move(where), uplink, false);
}

std::size_t SwarmNetwork::add_peer(swarm::Location where, double uplink, bool holder, swarm::SwarmCore::ServeMode mode) {
  const std::size_t index = peers_.size();
  Peer p;
  p.id = GossipNetwork::identity_for(5000 + index).public_key();
  p.location = std::move(where);
  p.holder = holder;
  p.core = std::make_unique<swarm::SwarmCore>(config_, p.location, p.id, rng_.next());
  p.image = holder ? image_ : std::vector<std::byte>(image_.size());
  peers_.push_back(std::move(p));
  links_.add_peer(uplink);
  by_id_[peers_[index].id] = index;
  Peer& me = peers_[index];
  for (const Peer& other : peers_) me.core->set_location(other.id, other.location);
  for (Peer& other : peers_) {
    if (other.core) other.core->set_location(me.id, me.location);
  }
  const core::Bitfield bits(layout_.shard_count(), holder);
  if (holder) {
    me.core->serve(now(), manifest_.id(), layout_, bits, mode);
  } else {
    me.core->fetch(now(), manifest_.id(), layout_, bits);
  }
  introduce(index);
  drain(index);
  return index;
}

// Plays gossip: everyone fetching learns of everyone holding or fetching,
// holders named complete, as their records say.
void SwarmNetwork::introduce(std::size_t peer) {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (i == peer || !peers_[i].core) continue;
    if (!peers_[peer].holder) peers_[peer].core->add_holder(now(), manifest_.id(), peers_[i].id, peers_[i].holder);
    if (!peers_[i].result && !peers_[i].holder) {
      peers_[i].core->add_holder(now(), manifest_.id(), peers_[peer].id, peers_[peer].holder);
      drain(i);
    }
  }
}

void SwarmNetwork::crash(std::size_t peer) {
  peers_[peer].core.reset();
  peers_[peer].timer.cancel();
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (i == peer || !peers_[i].core) continue;
    links_.close(now(), peer, i);
    // Gossip would declare it dead within seconds; here at once.
    peers_[i].core->peer_gone(now() + kLatency, peers_[peer].id);
    drain(i);
  }
}

void SwarmNetwork::stop_serving(std::size_t peer) {
  peers_[peer].core->stop(now(), manifest_.id());
  drain(peer);
}

std::optional<std::size_t> SwarmNetwork::index_of(const PeerId& id) const {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

void SwarmNetwork::arm(std::size_t peer) {
  Peer& p = peers_[peer];
  if (!p.core) return;
  if (auto generation = p.timer.rearm(p.core->next_timeout(), now())) {
    events_.schedule(Event{p.timer.at(), peer, std::nullopt, *generation});
  }
}

void SwarmNetwork::drain(std::size_t peer) {
  Peer& p = peers_[peer];
  if (!p.core) return;
  while (auto action = p.core->poll()) {
    std::visit(
        core::Overloaded{
            [&](swarm::OpenConnection& connect) {
              auto to = index_of(connect.peer);
              links_.open(now(), peer, to, to && peers_[*to].core);
            },
            [&](swarm::CloseConnection& disconnect) {
              if (auto to = index_of(disconnect.peer)) links_.close(now(), peer, *to);
            },
            [&](swarm::SendMessage& send) {
              if (auto to = index_of(send.peer)) links_.send(now(), peer, *to, send.message);
            },
            [&](swarm::ServePiece& serve) {
              auto to = index_of(serve.peer);
              if (!to) return;
              std::vector<std::byte> bytes(p.image.begin() + static_cast<std::ptrdiff_t>(serve.offset),
                                           p.image.begin() + static_cast<std::ptrdiff_t>(serve.offset + serve.length));
              if (p.corrupt && !bytes.empty()) bytes[bytes.size() / 2] ^= std::byte{0x5a};
              links_.serve(now(), peer, *to, serve.header, std::move(bytes));
            },
            // Nothing to drop: this network times each piece's arrival when it
            // is served (the uplink is a schedule, not a queue).
            [](swarm::DropQueuedPieces&) {},
            [&](swarm::VerifyShard& verify) {
              const ShardEntry& shard = manifest_.shard(verify.shard);
              const bool good = verify_shard(manifest_, verify.shard,
                                             std::span(p.image).subspan(shard.byte_offset, shard.byte_length));
              p.core->on_verified(now(), verify.version_id, verify.shard, verify.fetch_serial, good);
            },
            // Progress and failed shards: tests read the core's counters.
            [](swarm::ShardHeld&) {},
            [](swarm::ShardFailed&) {},
            [&](swarm::FetchFinished& finished) {
              p.result = finished.status;
              p.finished_at = now();
              if (finished.status.is_ok()) p.holder = true;  // a finished fetcher keeps serving what it now holds
            },
        },
        *action);
  }
  arm(peer);
}

void SwarmNetwork::dispatch(Event& e) {
  Peer& p = peers_[e.to];
  if (!p.core) return;
  if (e.link) {
    links_.deliver(*p.core, now(), peers_[e.link->from].id, peers_[e.link->from].core != nullptr, *e.link,
                   [&](const swarm::PieceTarget& target, std::span<const std::byte> payload) {
                     std::memcpy(p.image.data() + target.offset, payload.data(), payload.size());
                     return true;
                   });
  } else {
    if (!p.timer.fires(e.generation)) return;
    p.core->handle_timeout(now());
  }
  drain(e.to);
}

void SwarmNetwork::run_until(TimePoint t) {
  events_.run_until(t, [this](Event& e) { dispatch(e); });
}

bool SwarmNetwork::run_until(const std::function<bool()>& done, Duration limit, Duration step) {
  return events_.run_until(done, limit, step, [this](Event& e) { dispatch(e); });
}

bool SwarmNetwork::complete(std::size_t peer) const {
  const auto& r = peers_[peer].result;
  return r && r->is_ok();
}

std::size_t SwarmNetwork::count_complete() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < peers_.size(); ++i) n += complete(i);
  return n;
}

std::size_t SwarmNetwork::count_finished() const {
  std::size_t n = 0;
  for (const Peer& p : peers_) n += p.result.has_value();
  return n;
}

}  // namespace tensorhub::testing
